"""Scorer configuration, sampling and score parsing (pure logic of decision 71)."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime import Agent
from threadline.runtime.scorers import judge, parse_judge_answer, sampled, score_of, scorer_entries


def test_sampling_shapes_and_errors():
    entries = scorer_entries({"a": {"scorer": len, "sampling": {"type": "ratio", "rate": 0.3}},
                              "b": {"scorer": judge(model="openai/x"), "sampling": {"type": "none"}},
                              "c": len}, "ag")
    assert [(e.name, e.rate) for e in entries] == [("a", 0.3), ("b", 0.0), ("c", 1.0)]
    for bad in ({"scorer": len, "sampling": 1.5}, {"scorer": len, "sampling": {"type": "every"}},
                {"scorer": "len"}, {"scorer": len, "sampling": True}):
        with pytest.raises(ConfigurationError):
            scorer_entries({"x": bad}, "ag")
    with pytest.raises(ConfigurationError):
        Agent(id="ag", scorers=[len])


def test_sampling_is_a_pure_function_of_run_and_scorer():
    picks = [sampled(f"run-{i}", "s", 0.25) for i in range(4000)]
    assert picks == [sampled(f"run-{i}", "s", 0.25) for i in range(4000)]
    assert 0.2 < sum(picks) / len(picks) < 0.3
    assert not any(sampled(f"run-{i}", "s", 0) for i in range(100))
    assert all(sampled(f"run-{i}", "s", 1) for i in range(100))


def test_scores_and_judge_answers():
    assert score_of(0.5) == (0.5, None)
    assert score_of({"score": 1, "reason": "fine"}) == (1.0, "fine")
    for bad in (None, "0.5", True, {"reason": "no score"}):
        with pytest.raises(ValueError):
            score_of(bad)
    assert parse_judge_answer('Sure. {"score": 0.7, "reason": "clear"} Done.') == (0.7, "clear")
    assert parse_judge_answer("I'd say 0.4 out of 1") == (0.4, None)
    with pytest.raises(ValueError):
        parse_judge_answer("no idea")


async def test_scorers_given_as_a_function_of_the_request_context():
    from threadline.flows.scoring import entries_for

    async def by_tier(ctx):
        return {"strict": {"scorer": len, "sampling": 1.0 if ctx["tier"] == "pro" else 0.0}}

    agent = Agent(id="ag", scorers=by_tier)
    assert agent.scorers == [] and agent.dynamic_scorers is by_tier
    assert [(e.name, e.rate) for e in await entries_for(agent, {"tier": "pro"})] == [("strict", 1.0)]
    assert [(e.name, e.rate) for e in await entries_for(agent, {"tier": "free"})] == [("strict", 0.0)]
