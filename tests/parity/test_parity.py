"""The parity suite: every scenario of ``scenarios.json`` on @mastra/core (``runner.mjs``, in
Node) and on Threadline (the services, forked here, serving :mod:`tests.parity.agents`), both
against one fake model server; the records are compared (:mod:`tests.parity.compare`) and the
verdicts written to ``.run/parity/parity.md`` (``make parity``: to ``docs/parity.md``).

The test fails when a side could not run a scenario, or when a scenario's verdict is not the
one ``verdicts.json`` records (a difference fixed, or a new one: update the file and the
report together).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.parity.compare import Rule, classify, diff_scenario
from tests.parity.report import render
from tests.parity.threadline_side import run_all
from threadline.config import Settings
from threadline.testing.harness import ServiceSet
from threadline.testing.model_script import ModelScript
from threadline.testing.model_server import RunningServer, start_in_thread

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TABLE = HERE / "scenarios.json"
# THREADLINE_PARITY_ONLY=id1,id2 runs those scenarios alone (a subset's verdicts are checked, the
# report covers the subset); unset, every scenario runs.
ONLY = [s for s in os.environ.get("THREADLINE_PARITY_ONLY", "").split(",") if s]
pytestmark = pytest.mark.timeout(900)


@dataclass
class Sides:
    """The fake model server, the services serving the parity agents, and the Mastra side's
    run (``runner.mjs``, started before the services so that the two overlap)."""

    server: RunningServer
    services: ServiceSet
    mastra: subprocess.Popen[str]
    mastra_out: Path
    out_dir: Path


@pytest.fixture(scope="module")
def sides(own_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    out_dir = Path(os.environ.get("THREADLINE_PARITY_OUT", ROOT / ".run" / "parity"))
    out_dir.mkdir(parents=True, exist_ok=True)
    _node_modules()
    server = start_in_thread()
    ModelScript(server.url).reset()
    node = shutil.which("node")
    assert node, "the parity suite needs Node 20+"
    mastra = subprocess.Popen([node, str(HERE / "runner.mjs"), str(TABLE), server.url, str(out_dir / "mastra.json"), *ONLY],
                              cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "THREADLINE_KAFKA_BOOTSTRAP": own_cluster.bootstrap,
           "THREADLINE_PG_DSN": own_cluster.dsn, "THREADLINE_TOPIC_PREFIX": own_cluster.prefix,
           "THREADLINE_AGENTS_MODULE": "tests.parity.agents", "THREADLINE_MODEL_API_BASE": server.api_base,
           "THREADLINE_PARTITIONS": "4", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "THREADLINE_MODEL_RETRY_INITIAL_S": "0.05", "THREADLINE_MODEL_RETRY_MAX_WAIT_S": "5"}
    svc = ServiceSet(env=env, log_dir=tmp_path_factory.mktemp("parity-logs"), cwd=ROOT)
    try:
        svc.start_all()
        yield Sides(server, svc, mastra, out_dir / "mastra.json", out_dir)
    finally:
        if mastra.poll() is None:
            mastra.kill()
        svc.stop_all()
        server.stop()


def _node_modules() -> None:
    """``npm ci`` in tests/parity when @mastra/core is not installed yet (the lockfile pins it)."""
    if (HERE / "node_modules" / "@mastra" / "core" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("the parity suite needs Node 20+ and npm (to install @mastra/core)", pytrace=False)
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True, timeout=600)


def _mastra_records(sides: Sides) -> dict[str, Any]:
    """Wait for runner.mjs (started by the fixture) and read what it wrote."""
    _, stderr = sides.mastra.communicate(timeout=600)
    assert sides.mastra.returncode == 0, f"runner.mjs failed:\n{stderr[-4000:]}"
    return json.loads(sides.mastra_out.read_text())


def test_parity(sides: Sides, own_cluster: Any) -> None:
    out_dir, server = sides.out_dir, sides.server
    scenarios = [s for s in json.loads(TABLE.read_text())["scenarios"] if not ONLY or s["id"] in ONLY]
    mastra = _mastra_records(sides)
    ModelScript(server.url).reset()  # the journal holds one side's requests at a time
    settings = Settings(kafka_bootstrap=own_cluster.bootstrap, pg_dsn=own_cluster.dsn, topic_prefix=own_cluster.prefix,
                        partitions=4, agents_module="tests.parity.agents")  # per-call objects are encoded against it
    threadline = asyncio.run(run_all(settings, server.url, own_cluster.dsn, scenarios))
    (out_dir / "threadline.json").write_text(json.dumps(threadline, indent=1, default=str))
    rules = [Rule.of(r) for r in json.loads((HERE / "known.json").read_text())["rules"]]
    verdicts: dict[str, str] = {}
    results = []
    for s in scenarios:
        sid = s["id"]
        diffs = diff_scenario(mastra[sid], threadline[sid], {"parity", f"parity-{sid}"})
        verdict, groups = classify(diffs, rules, sid)
        verdicts[sid] = verdict
        results.append((s, verdict, groups))
    report = render(results, rules)
    (out_dir / "parity.md").write_text(report)
    if os.environ.get("THREADLINE_PARITY_REPORT"):
        Path(os.environ["THREADLINE_PARITY_REPORT"]).write_text(report)
    (out_dir / "verdicts.json").write_text(json.dumps(verdicts, indent=1) + "\n")
    failed = {sid: rec.get("failed") for side in (mastra, threadline) for sid, rec in side.items() if "failed" in rec}
    assert not failed, f"scenarios a side could not run: {failed}"
    expected = json.loads((HERE / "verdicts.json").read_text())
    changed = {sid: (expected.get(sid), v) for sid, v in verdicts.items() if expected.get(sid) != v}
    assert not changed, (f"verdicts changed (expected, now): {changed}; see {out_dir / 'parity.md'}; "
                         f"update tests/parity/verdicts.json and docs/parity.md (make parity) with the change")
