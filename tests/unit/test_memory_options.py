"""Memory options (docs/agents.md): parsing, a call's options over the agent's, the history kept."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime import Agent
from threadline.runtime.memory import DEFAULT_LAST_MESSAGES, Memory, for_run, memory_config, recent


def test_the_agent_memory_forms() -> None:
    assert memory_config(None) == Memory() and Memory().reads == DEFAULT_LAST_MESSAGES and Memory().stores
    off = memory_config(False)
    assert (off.reads, off.stores, off.enabled) == (0, False, False)
    assert memory_config({"lastMessages": 3, "readOnly": True}) == Memory(last_messages=3, read_only=True)
    assert memory_config({"options": {"lastMessages": False}}).reads == 0  # Mastra's new Memory({options})
    assert Agent(id="a", memory={"last_messages": 7}).memory.reads == 7


@pytest.mark.parametrize("bad", [{"lastMessages": -1}, {"lastMessages": True}, {"lastMessages": "5"},
                                 {"readOnly": "yes"}, {"semanticRecall": True}, 3, "all"])
def test_bad_memory_options_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        memory_config(bad)


def test_a_calls_options_override_but_cannot_turn_memory_on() -> None:
    agent = Memory(last_messages=2)
    assert for_run(agent, None) is agent
    assert for_run(agent, {"lastMessages": 5, "readOnly": True}) == Memory(last_messages=5, read_only=True)
    off = memory_config(False)
    assert for_run(off, {"lastMessages": 5}).reads == 0 and not for_run(off, {"readOnly": False}).stores
    with pytest.raises(ConfigurationError):
        for_run(agent, {"last_messages": -2})


def test_recent_keeps_the_last_messages_oldest_first() -> None:
    history = [1, 2, 3, 4]
    assert recent(history, Memory(last_messages=2)) == [3, 4]
    assert recent(history, Memory(last_messages=10)) == history
    assert recent(history, Memory(last_messages=0)) == [] == recent(history, Memory(last_messages=False))
