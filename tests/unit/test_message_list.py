from threadline.runtime.messages import MessageList, make_message, text_of, to_core


def test_get_text_seed_example_works_with_attribute_access():
    msg = make_message("user", [{"type": "text", "text": "a"}, {"type": "file", "data": "x"}, {"type": "text", "text": "b"}])
    text = ""
    for part in msg.content.parts:
        if part.type == "text" and isinstance(part.text, str):
            text += part.text
    assert text == "ab" == text_of(msg)
    legacy = {"content": {"format": 2, "parts": [], "content": "old"}}
    assert text_of(legacy) == "old"


def test_views_and_tool_round_trip_to_core():
    ml = MessageList()
    ml.add(make_message("user", [{"type": "text", "text": "earlier"}], id="m0"), "memory")
    ml.add("now")
    reply = make_message("assistant", [
        {"type": "step-start"}, {"type": "text", "text": "looking"},
        {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c1", "toolName": "t",
                                                       "args": {"a": 1}, "result": {"ok": True}}},
        {"type": "step-start"}, {"type": "text", "text": "done"}], id="r1")
    ml.add(reply, "response")
    assert [m["id"] for m in ml.get.remembered.db()] == ["m0"]
    assert len(ml.get.input.db()) == 1 and ml.get.response.db()[0]["id"] == "r1"
    core = to_core(ml.get.all.db())
    assert [m["role"] for m in core] == ["user", "user", "assistant", "tool", "assistant"]
    assert core[2]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'
    assert core[3] == {"role": "tool", "tool_call_id": "c1", "content": '{"ok":true}'}
    assert core[4]["content"] == "done"


def test_update_tool_invocation_replaces_result():
    ml = MessageList()
    ml.add(make_message("assistant", [{"type": "tool-invocation", "toolInvocation": {
        "state": "call", "toolCallId": "c1", "toolName": "lookup", "args": {}}}], id="r"), "response")
    assert ml.update_tool_invocation({"type": "tool-invocation", "toolInvocation": {
        "state": "result", "toolCallId": "c1", "toolName": "lookup", "args": {}, "result": {"ssn": "***"}}})
    inv = ml.get_by_id("r").content.parts[0].toolInvocation
    assert inv.state == "result" and inv.result == {"ssn": "***"}


def test_state_round_trip():
    ml = MessageList()
    ml.add("hi")
    ml.add_system("be brief")
    back = MessageList.from_state(ml.to_state())
    assert text_of(back.get.all.db()[0]) == "hi"
    assert back.get_system_messages()[0]["content"] == "be brief"
