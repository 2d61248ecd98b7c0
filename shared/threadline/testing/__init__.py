"""Test and demo helpers.

* :mod:`threadline.testing.memory`: in-process doubles of the step's ports (:class:`MemorySink`,
  :class:`MemoryStepStore`, :class:`ScriptedModel`) to unit-test an agent without a cluster
  (docs/testing.md).
* `threadline.testing.model_server`: a scriptable fake of the OpenAI chat-completions API
  (`python -m threadline.testing.model_server`).
* `threadline.testing.model_script`: the test-side client and script builders.
"""

from threadline.testing.memory import (
    MemorySink,
    MemoryStepStore,
    ScriptedModel,
    step_run,
    text_delta,
    tool_call,
    user_signal,
)

__all__ = ["MemorySink", "MemoryStepStore", "ScriptedModel", "step_run", "text_delta", "tool_call", "user_signal"]
