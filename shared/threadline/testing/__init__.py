"""Test and demo helpers.

* :mod:`threadline.testing.memory`: in-process doubles of the step's ports (``MemorySink``,
  ``MemoryStepStore``, ``ScriptedModel``) to unit-test an agent without a cluster
  (docs/testing.md); exported here, imported on first use.
* `threadline.testing.model_server`: a scriptable fake of the OpenAI chat-completions API
  (`python -m threadline.testing.model_server`).
* `threadline.testing.model_script`: the test-side client and script builders.

The doubles are imported lazily: the e2e harness's fork server imports
:mod:`threadline.testing.forkserver` in each service process *before* it sets the instance's
environment, so this package must not import Threadline's runtime (its settings and fault
points are read from the environment at import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadline.testing.memory import (
        MemorySink,
        MemoryStepStore,
        ScriptedModel,
        run_output,
        step_run,
        text_delta,
        tool_call,
        user_signal,
    )

__all__ = ["MemorySink", "MemoryStepStore", "ScriptedModel", "run_output", "step_run", "text_delta", "tool_call", "user_signal"]


def __getattr__(name: str) -> object:
    if name in __all__:
        return getattr(importlib.import_module("threadline.testing.memory"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
