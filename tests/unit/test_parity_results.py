"""What a call returns, in Mastra's shapes: a ``generate`` result's usage, a stream's text, a
notification's record."""

from __future__ import annotations

import pytest

from threadline.client.run_output import RunFailed
from threadline.events.replies import RunResult
from threadline.testing import run_output

RAW = {"inputTokens": {"total": 3, "noCache": 3, "cacheRead": 0},
       "outputTokens": {"total": 2, "text": 2, "reasoning": 0}, "raw": {"prompt_tokens": 3, "completion_tokens": 2}}
COUNTS = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}


def test_a_result_s_usage_carries_the_last_step_s_provider_report_as_raw() -> None:
    steps = [{"stepNumber": 0, "usage": {**COUNTS, "raw": {**RAW, "raw": {"first": True}}}},
             {"stepNumber": 1, "usage": {**COUNTS, "raw": RAW}}]
    result = RunResult(request_id="q", run_id="r", finish_reason="stop", usage={**COUNTS, "totalTokens": 10},
                       steps=steps)
    assert result.usage["raw"] == RAW  # the last step's, as Mastra's result.usage.raw
    assert result.usage["totalTokens"] == 10  # the run's counts stay
    without = RunResult(request_id="q", run_id="r", finish_reason="stop", usage=COUNTS,
                        steps=[{"stepNumber": 0, "usage": COUNTS}])
    assert "raw" not in without.usage  # no provider report, no raw
    assert RunResult(request_id="q", run_id="r", finish_reason="error", steps=steps).usage == {}


def test_a_notification_result_s_record_is_mastra_s_notification_record() -> None:
    from datetime import UTC, datetime

    from threadline.flows.inbox import result_record

    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = {"id": "ntf_1", "thread_id": "t", "source": "spam", "kind": "ad", "priority": "high", "status": "discarded",
           "summary": "Buy now", "payload": None, "dedupe_key": None, "coalesced_count": 1, "attributes": {},
           "metadata": {}, "summarized": False, "held": False, "delivery_reason": None, "delivery_attempts": 0,
           "created_at": at, "updated_at": at, "discarded_at": at, "archived_at": None}
    assert result_record(row) == {"id": "ntf_1", "thread_id": "t", "source": "spam", "kind": "ad",
                                  "priority": "high", "status": "discarded", "summary": "Buy now",
                                  "coalesced_count": 1, "delivery_attempts": 0, "created_at": at.isoformat(),
                                  "updated_at": at.isoformat(), "discarded_at": at.isoformat()}
    assert result_record({**row, "attributes": {"repo": "a"}})["attributes"] == {"repo": "a"}  # given: kept
    assert result_record({**row, "held": True})["held"] is True  # Threadline's hold (Mastra has none): told


def _chunk(seq: int, kind: str, payload: dict) -> dict:
    return {"runId": "r", "seq": seq, "step": 0, "attempt": 1, "type": kind, "payload": payload}


async def test_a_stream_s_text_is_empty_when_process_output_result_rejected_the_answer() -> None:
    trip = {"reason": "final answer rejected", "retry": False, "metadata": None, "processorId": "result-abort"}
    head = [_chunk(0, "start", {}), _chunk(1, "text-delta", {"id": "t0", "text": "answer"})]
    done = _chunk(2, "step-finish", {"stepResult": {"reason": "stop", "isContinued": False}})
    end = [_chunk(3, "tripwire", trip), _chunk(4, "finish", {"stepResult": {"reason": "tripwire"}, "tripwire": trip})]
    assert await run_output([*head, done, *end]).text() == ""  # Mastra's result.text after the abort
    # a tripwire in the stream (process_output_stream) or of a rejected step keeps the text that streamed
    assert await run_output([*head, *end]).text() == "answer"
    rejected = _chunk(2, "step-finish", {"stepResult": {"reason": "tripwire", "isContinued": False}})
    assert await run_output([*head, rejected, *end]).text() == "answer"
    continued = _chunk(2, "step-finish", {"stepResult": {"reason": "tool-calls", "isContinued": True}})
    assert await run_output([*head, continued, *end]).text() == "answer"  # the next step's input aborted
    finished = _chunk(3, "finish", {"stepResult": {"reason": "stop"}, "finishReason": "stop"})
    assert await run_output([*head, done, finished]).text() == "answer"
    edited = _chunk(3, "finish", {"stepResult": {"reason": "stop"}, "finishReason": "stop", "text": "ANSWER"})
    assert await run_output([*head, done, edited]).text() == "ANSWER"  # process_output_result's edit


async def test_a_failed_stream_s_result_carries_the_error_and_its_text_does_not_raise() -> None:
    error = {"kind": "server_error", "message": "boom", "statusCode": 500, "retryable": True}
    chunks = [_chunk(0, "start", {}), _chunk(1, "text-delta", {"id": "t0", "text": "Hel"}),
              _chunk(2, "error", {"error": error}),
              _chunk(3, "step-finish", {"stepResult": {"reason": "error", "isContinued": False}}),
              _chunk(4, "finish", {"stepResult": {"reason": "error"}, "finishReason": "error"})]
    out = run_output(chunks)
    assert await out.text() == "Hel"  # Mastra's stream result.text: what streamed
    assert await out.error() == error  # Mastra's result.error
    assert await out.finish_reason() == "error"
    assert await out.tripwire() is None  # no processor ended it; reading it does not raise either
    with pytest.raises(RunFailed):  # consuming the stream still says the run failed
        await out.consume_stream()
    assert await run_output([*chunks[:2], _chunk(2, "finish", {"stepResult": {"reason": "stop"}})]).error() is None
