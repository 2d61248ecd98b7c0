"""threadline.testing exports the step doubles without importing Threadline's runtime: the e2e fork
server imports threadline.testing.forkserver in a service process before it sets the instance's
environment, and the fault points (read from it at import) would then never be armed."""

from __future__ import annotations

import subprocess
import sys


def test_the_package_imports_no_runtime_until_a_double_is_asked_for():
    code = ("import sys, threadline.testing.forkserver\n"
            "assert 'threadline._internal.faults' not in sys.modules\n"
            "assert not [m for m in sys.modules if m.startswith('threadline.runtime')]\n"
            "from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel\n"
            "from threadline.testing.memory import MemorySink as Same\n"
            "assert MemorySink is Same and 'threadline.runtime.step.ports' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
