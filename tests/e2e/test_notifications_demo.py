"""``make demo`` (threadline.examples.demo) against this session's cluster, as ``make demo`` runs
it against ``make up``: it must pass, including the notification that arrives while the agent is
busy (summary into the running run, full delivery when idle)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys


async def test_demo_passes_with_a_notification_while_the_agent_is_busy(services, cluster, model_server):
    env = {**os.environ, "THREADLINE_KAFKA_BOOTSTRAP": cluster.bootstrap, "THREADLINE_PG_DSN": cluster.dsn,
           "THREADLINE_TOPIC_PREFIX": cluster.prefix, "THREADLINE_PARTITIONS": "4",
           "THREADLINE_MODEL_API_BASE": model_server.api_base, "THREADLINE_MODEL": "openai/threadline-fake"}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "threadline.examples.demo"], env=env,
                                   capture_output=True, text=True, timeout=240)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "send_notification_signal while the agent is busy" in out
    assert "[notification-summary signal] 'ci: 1'" in out  # the summary, inside the running run
    assert "[notification signal] \"Deploy of billing v2.3 failed at step 'migrate'.\"" in out  # in full, at idle
    assert "status=delivered" in out and "demo OK" in out
    assert "[answered by model openai/threadline-fake, as the running workers are configured]" in out
