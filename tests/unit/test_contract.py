"""docs/asyncapi.json is what the code declares (threadline.contract): regenerate it with
`make asyncapi` when a topic or an event model changes."""

from __future__ import annotations

import json
from pathlib import Path

from threadline.contract import document
from threadline.topics import Topics

DOC = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.json"


def test_the_checked_in_document_matches_the_code() -> None:
    checked_in = json.loads(DOC.read_text())
    assert checked_in == json.loads(json.dumps(document())), "docs/asyncapi.json drifted: run `make asyncapi`"


def test_every_topic_is_declared_with_its_messages() -> None:
    doc = document()
    addresses = {c["address"] for c in doc["channels"].values()}
    assert set(Topics("threadline").internal()) <= addresses
    assert "threadline.chunks.{resource}.{thread}.{hash}" in addresses
    schemas = set(doc["components"]["schemas"])
    for model in ("SendMessage", "Stream", "Generate", "AbortRequest", "SendNotificationSignal", "Accepted",
                  "ErrorReply", "RunResult", "StartRun", "AbortRun", "StepTask", "StepResult", "LifecycleEvent",
                  "DeadLetter"):
        assert model in schemas, model
    received = {op["channel"]["$ref"].rsplit("/", 1)[-1] for op in doc["operations"].values() if op["action"] == "receive"}
    assert received == {"ingress", "run-commands", "step-results", "step-tasks", "lifecycle"}
