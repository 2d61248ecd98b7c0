"""The replay rule (decision 25): a transcript rebuilt from chunks drops dead attempts, duplicates
and the reply of a run a tripwire ended (but one ``process_output_step`` rejected), keeps what a
failed run streamed (stored with its error part), and matches the stored messages' view."""

from __future__ import annotations

from typing import Any

from threadline.client.transcript import replay_transcript, stored_transcript


def _c(run: str, seq: int, kind: str, *, step: int = 0, attempt: int = 1, **payload: Any) -> dict[str, Any]:
    return {"runId": run, "seq": seq, "step": step, "attempt": attempt, "type": kind, "payload": payload}


def _echo(run: str, seq: int, sid: str, text: str) -> dict[str, Any]:
    return {"runId": run, "seq": seq, "step": 0, "attempt": 1, "type": "data-user-message",
            "data": {"id": sid, "contents": text}}


def test_replay_rule() -> None:
    chunks = [
        _echo("r1", 0, "s1", "hi"), _c("r1", 1, "start", messageId="a1"), _c("r1", 2, "step-start", messageId="a1"),
        _c("r1", 3, "tool-call", toolCallId="k1"), _c("r1", 4, "step-finish", messageId="a1"),
        _c("r1", 5, "step-start", step=1, messageId="a1"), _c("r1", 6, "text-delta", step=1, text="Char"),
        {**_c("r1", 7, "attempt-discarded", step=1, attempt=2), "payload": {"step": 1, "attempt": 1}},
        _c("r1", 8, "step-start", step=1, attempt=2, messageId="a1"),
        _c("r1", 9, "text-delta", step=1, attempt=2, text="Charged."),
        _c("r1", 9, "text-delta", step=1, attempt=2, text="Charged."),  # a duplicate delivery
        _c("r1", 10, "finish", step=1, attempt=2, stepResult={"reason": "stop"}),
        _echo("r2", 0, "s2", "again"), _c("r2", 1, "start", messageId="a2"),
        _c("r2", 2, "text-delta", text="Partial"), _c("r2", 3, "error"),
        _c("r2", 4, "finish", stepResult={"reason": "error"}),
    ]
    assert replay_transcript(chunks) == [
        {"id": "s1", "role": "user", "text": "hi", "toolCallIds": []},
        {"id": "a1", "role": "assistant", "text": "Charged.", "toolCallIds": ["k1"]},
        {"id": "s2", "role": "user", "text": "again", "toolCallIds": []},
        {"id": "a2", "role": "assistant", "text": "Partial", "toolCallIds": []},
    ]
    stored = [
        {"id": "s1", "role": "user", "content": {"parts": [{"type": "text", "text": "hi"}]}},
        {"id": "a1", "role": "assistant", "content": {"parts": [
            {"type": "step-start"},
            {"type": "tool-invocation", "toolInvocation": {"toolCallId": "k1", "state": "result"}},
            {"type": "text", "text": "Charged."}]}},
        {"id": "s2", "role": "user", "content": {"parts": [{"type": "text", "text": "again"}]}},
        {"id": "a2", "role": "assistant", "content": {"parts": [
            {"type": "text", "text": "Partial"}, {"type": "error", "error": {"name": "Error", "message": "x"}}]}},
    ]
    assert stored_transcript(stored) == replay_transcript(chunks)


def test_a_run_whose_result_a_processor_rejected_keeps_no_reply() -> None:
    # an abort in process_output_result: Mastra's finish keeps the step's reason; its tripwire tells
    chunks = [_echo("r1", 0, "s1", "hi"), _c("r1", 1, "start", messageId="a1"),
              _c("r1", 2, "text-delta", text="answer"), _c("r1", 3, "step-finish", messageId="a1"),
              _c("r1", 4, "tripwire", reason="no"),
              _c("r1", 5, "finish", stepResult={"reason": "stop"}, tripwire={"reason": "no"})]
    assert replay_transcript(chunks) == [{"id": "s1", "role": "user", "text": "hi", "toolCallIds": []}]


def test_a_tripwire_drops_the_reply_but_a_rejected_step_keeps_it() -> None:
    """A stream abort stores nothing; a ``process_output_step`` abort (its step-finish says
    ``tripwire``) stores the rejected answer, as Mastra's; a failed call with no text keeps an
    empty message (its error part)."""
    chunks = [
        _echo("r1", 0, "s1", "hi"), _c("r1", 1, "start", messageId="a1"), _c("r1", 2, "text-delta", text="bad"),
        _c("r1", 3, "tripwire"), _c("r1", 4, "finish", stepResult={"reason": "tripwire"}),
        _echo("r2", 0, "s2", "again"), _c("r2", 1, "start", messageId="a2"), _c("r2", 2, "text-delta", text="No."),
        _c("r2", 3, "step-finish", stepResult={"reason": "tripwire"}), _c("r2", 4, "tripwire"),
        _c("r2", 5, "finish", stepResult={"reason": "tripwire"}),
        _echo("r3", 0, "s3", "more"), _c("r3", 1, "start", messageId="a3"), _c("r3", 2, "error"),
        _c("r3", 3, "finish", stepResult={"reason": "error"}),
    ]
    assert [(m["id"], m["text"]) for m in replay_transcript(chunks)] == [
        ("s1", "hi"), ("s2", "again"), ("a2", "No."), ("s3", "more"), ("a3", "")]
