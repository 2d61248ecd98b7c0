"""The parity suite's comparison (:mod:`tests.parity.compare`): what it normalises, how it names
differences, how it gives verdicts. No cluster: pure functions on hand-made records."""

from __future__ import annotations

from typing import Any

from tests.parity.compare import Diff, Rule, classify, diff_scenario, normalise


def _record(chunks: list[dict[str, Any]], text: str = "hi") -> dict[str, Any]:
    return {"chunks": chunks, "requests": [{"model": "m", "body": {"messages": [{"role": "user", "content": text}]}}],
            "thread": [], "returns": []}


def test_ids_and_times_are_normalised_and_nothing_else() -> None:
    value = {"runId": "run_01a24981afd806dacf3c501cdf", "messageId": "19495cd4-edb0-4f94-93f0-d93584c60a30",
             "createdAt": 1796526977918, "at": "2026-12-06T03:17:08.239Z", "date": "Sun, 06 Dec 2026 04:00:38 GMT",
             "agent": "parity-x", "id": "txt-0",
             "count": 3}
    assert normalise(value, {"parity-x"}) == {"runId": "<id>", "messageId": "<id>", "createdAt": "<time>",
                                              "at": "<time>", "date": "<time>", "agent": "<agent>", "id": "txt-0", "count": 3}


def test_a_chunk_more_on_one_side_is_one_sequence_difference_and_the_rest_still_pairs() -> None:
    mastra = _record([{"type": "start", "payload": {}}, {"type": "text-delta", "payload": {"text": "a"}}])
    threadline = _record([{"type": "start", "payload": {}}, {"type": "data-user-message", "data": {}},
                          {"type": "text-delta", "payload": {"text": "b"}}])
    paths = [d.path for d in diff_scenario(mastra, threadline, set())]
    assert paths == ["chunks/sequence/after-start/-/to/data-user-message", "chunks/text-delta#0/payload/text"]


def test_verdicts() -> None:
    design = Rule.of({"id": "d", "kind": "design", "pattern": "^chunks/envelope$", "title": "t", "decision": "x"})
    bug = Rule.of({"id": "b", "kind": "bug", "pattern": "^requests/", "value": "Feedback", "title": "t"})
    envelope = Diff("chunks/envelope", ["runId"], ["runId", "seq"])
    feedback = Diff("requests/1/body/messages/0/content", "[Processor Feedback] ...", "x")
    other_request = Diff("requests/1/body/messages/0/content", "a", "b")
    assert classify([], [design, bug])[0] == "identical"
    assert classify([envelope], [design, bug])[0] == "differs by design"
    assert classify([envelope, feedback], [design, bug]) == ("differs", {"d": [envelope], "b": [feedback]})
    assert classify([other_request], [design, bug]) == ("differs", {"?": [other_request]})


def test_a_rule_may_name_the_differences_of_some_scenarios_only() -> None:
    refused = Rule.of({"id": "r", "kind": "design", "pattern": "^requests/", "scenarios": "^refused-", "title": "t",
                       "decision": "x"})
    count = Diff("requests/count", 1, 0)
    assert classify([count], [refused], "refused-option") == ("differs by design", {"r": [count]})
    assert classify([count], [refused], "plain") == ("differs", {"?": [count]})
    assert classify([count], [refused]) == ("differs", {"?": [count]})
