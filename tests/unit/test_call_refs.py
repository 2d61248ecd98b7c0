"""Call-level objects as references to the agents module (decision 73)."""

from __future__ import annotations

import pytest

from tests.e2e.agents import evals, processing
from threadline.errors import ConfigurationError
from threadline.runtime.refs import encode, resolve, resolve_options

PKG = "tests.e2e.agents"


def test_objects_become_references_and_back():
    sent = encode({"inputProcessors": [evals.tag_call, "shout"], "hooks": evals.call_hooks,
                   "prepareStep": evals.call_prepare_step, "maxSteps": 2}, PKG)
    assert sent == {"input_processors": [{"ref": "tests.e2e.agents.evals:tag_call"}, "shout"],
                    "hooks": {"ref": "tests.e2e.agents.evals:call_hooks"},
                    "prepare_step": {"ref": "tests.e2e.agents.evals:call_prepare_step"}, "maxSteps": 2}
    back = resolve_options(sent, PKG)
    assert back["input_processors"] == [evals.tag_call, "shout"]
    assert back["hooks"] is evals.call_hooks and back["prepare_step"] is evals.call_prepare_step


def test_a_processor_defined_elsewhere_goes_by_its_id_and_other_objects_are_refused():
    assert encode({"output_processors": [processing.Shout()]}, PKG) == {"output_processors": ["shout"]}
    with pytest.raises(ConfigurationError, match="module level"):
        encode({"prepare_step": lambda **_: {}}, PKG)
    with pytest.raises(ConfigurationError, match="module level"):
        encode({"hooks": {"before_tool_call": print}}, PKG)


def test_the_worker_resolves_only_inside_the_agents_package():
    with pytest.raises(ConfigurationError, match="not inside"):
        resolve({"ref": "os:system"}, PKG)
    with pytest.raises(ConfigurationError, match="names nothing"):
        resolve({"ref": "tests.e2e.agents.evals:missing"}, PKG)
    assert resolve("shout", PKG) == "shout"


def test_an_object_under_a_registered_id_that_differs_is_refused_not_replaced():
    # the worker looks a processor up by id: another object under that id would silently run as the registered one
    loud = processing.Shout()
    loud.volume = 11  # the same class, other settings
    with pytest.raises(ConfigurationError, match="not the one the agents module registers"):
        encode({"output_processors": [loud]}, PKG)

    class Impostor(processing.Upper):
        id = "shout"

    with pytest.raises(ConfigurationError, match="not the one the agents module registers"):
        encode({"output_processors": [Impostor()]}, PKG)

    class Unknown(processing.Upper):
        id = "nobody-registers-this"

    with pytest.raises(ConfigurationError, match="nor registered"):
        encode({"input_processors": [Unknown()]}, PKG)
