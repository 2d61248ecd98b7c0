"""What a call returns, in Mastra's shapes: a ``generate`` result's usage and tripwire."""

from __future__ import annotations

from threadline.events.replies import RunResult, mastra_tripwire

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


def test_a_result_s_tripwire_has_retry_only_when_true_and_metadata_only_when_given() -> None:
    assert mastra_tripwire({"reason": "x", "retry": False, "metadata": None, "processorId": "p"}) == {
        "reason": "x", "processorId": "p"}
    kept = {"reason": "x", "retry": True, "metadata": {"word": "BAD"}, "processorId": "p"}
    assert mastra_tripwire(kept) == kept
    assert mastra_tripwire(None) is None
    result = RunResult(request_id="q", run_id="r", finish_reason="other",
                       tripwire={"reason": "x", "retry": False, "metadata": {"a": 1}, "processorId": "p"})
    assert result.tripwire == {"reason": "x", "metadata": {"a": 1}, "processorId": "p"}
