"""Editor overrides as pure functions (decisions 62, 68): the ``editor`` option's shapes, what is
stripped from an override, tool descriptions applied, and the gateway's editor scope."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.gateway.auth import AuthConfig, AuthConfigError, authenticate, parse_api_keys
from threadline.runtime import Agent, create_tool
from threadline.runtime.editor import EditorPolicy, editor_policy, strip, tool_descriptions, with_descriptions

ADD = create_tool(id="add", description="add two numbers", execute=lambda i: i)
FULL = {"instructions": "new prompt", "tools": {"add": {"description": "sum"}}}


@pytest.mark.parametrize(("editor", "policy"), [
    (None, EditorPolicy(True, True)),
    (True, EditorPolicy(True, True)),
    (False, EditorPolicy(False, False)),
    ({}, EditorPolicy(True, True)),
    ({"instructions": False}, EditorPolicy(False, True)),
    ({"instructions": True}, EditorPolicy(True, True)),
    ({"tools": False}, EditorPolicy(True, False)),
    ({"tools": {"description": False}}, EditorPolicy(True, False)),
    ({"tools": {}}, EditorPolicy(True, True)),
    ({"instructions": False, "tools": {"description": False}}, EditorPolicy(False, False)),
])
def test_the_editor_option_shapes(editor, policy):
    assert editor_policy(editor) == policy
    assert editor_policy(policy.to_json()) == policy  # the stored JSON reads back the same


@pytest.mark.parametrize("bad", ["yes", 1, {"model": True}, {"instructions": "no"}, {"tools": {"members": True}},
                                 {"tools": {"description": 0}}])
def test_a_bad_editor_option_is_refused_when_the_agent_is_defined(bad):
    with pytest.raises(ConfigurationError):
        Agent(id="a", editor=bad)


def test_an_open_agent_keeps_instructions_and_known_tool_descriptions():
    kept, stripped = strip(EditorPolicy(), {**FULL, "tools": {"add": {"description": "sum"}, "ghost": {"description": "x"}}},
                           ["add"])
    assert kept == FULL and stripped == ["tools.ghost.description"]


def test_id_name_and_model_always_come_from_code():
    kept, stripped = strip(EditorPolicy(), {"id": "x", "name": "y", "model": "openai/other", **FULL}, ["add"])
    assert kept == FULL and sorted(stripped) == ["id", "model", "name"]


@pytest.mark.parametrize(("editor", "kept", "stripped"), [
    (False, {}, ["instructions", "tools.add.description"]),
    ({"instructions": False}, {"tools": {"add": {"description": "sum"}}}, ["instructions"]),
    ({"tools": {"description": False}}, {"instructions": "new prompt"}, ["tools.add.description"]),
])
def test_locked_fields_are_stripped(editor, kept, stripped):
    assert strip(editor_policy(editor), FULL, ["add"]) == (kept, stripped)


def test_tools_from_a_function_keep_any_id_and_non_strings_are_stripped():
    kept, _ = strip(EditorPolicy(), {"tools": {"later": {"description": "d"}}}, None)
    assert kept == {"tools": {"later": {"description": "d"}}}
    assert strip(EditorPolicy(), {"instructions": 5, "tools": {"add": {"description": None}}}, ["add"]) == \
        ({}, ["instructions", "tools.add.description"])
    assert strip(EditorPolicy(), None) == ({}, [])
    with pytest.raises(ValueError, match="longer"):
        strip(EditorPolicy(), {"instructions": "x" * 100_001})


def test_overridden_descriptions_are_applied_to_copies():
    tools = {"add": ADD}
    applied = with_descriptions(tools, tool_descriptions(FULL))
    assert applied["add"].description == "sum" and applied["add"].execute is ADD.execute
    assert ADD.description == "add two numbers"  # the agent's own tool is unchanged
    assert with_descriptions(tools, tool_descriptions({}))["add"] is ADD


def test_the_editor_scope_comes_from_an_api_key_or_a_token():
    keys = parse_api_keys('{"plain": ["r1"], "admin": {"resources": ["*"], "scopes": ["editor"]}}')
    cfg = AuthConfig(keys=keys)
    plain, admin = authenticate(cfg, "plain"), authenticate(cfg, "admin")
    assert plain is not None and not plain.has_scope("editor") and plain.may_act_for("r1")
    assert admin is not None and admin.has_scope("editor") and admin.may_act_for("any")
    assert authenticate(AuthConfig(open=True), None).has_scope("editor")  # local development only
    with pytest.raises(AuthConfigError):
        parse_api_keys('{"k": {"resources": ["r"], "scopes": "editor"}}')
    with pytest.raises(AuthConfigError):
        parse_api_keys('{"k": {"resources": ["r"], "admin": true}}')
