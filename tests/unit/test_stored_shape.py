"""The stored message shape, as Mastra stores it (parity rules stored-content, stored-parts,
signal-role): what ``signal_to_message`` and ``as_stored`` make of a run's messages."""

from threadline.events.messages import as_stored, is_user_authored, make_message
from threadline.runtime.messages import to_core
from threadline.runtime.signals import signal_from_message, signal_to_message


def _message(message, *, user_input=False, **kw):
    sig = signal_from_message(message, **kw)
    if user_input:
        sig["userInput"] = True  # what ingress marks on the message of stream/generate
    return signal_to_message(sig, thread_id="t", resource_id="r")


def test_the_message_of_stream_is_a_plain_user_message_with_its_text_in_content():
    msg = _message("hi", user_input=True)
    assert msg["role"] == "user" and "type" not in msg
    assert msg["content"] == {"format": 2, "parts": [{"type": "text", "text": "hi"}], "content": "hi"}


def test_send_message_is_stored_as_a_user_signal_and_rendered_as_plain_text():
    msg = _message("hi")  # sendMessage/queueMessage: Mastra's signalToDBMessage stores role signal
    assert msg["role"] == "signal" and msg["type"] == "user" and is_user_authored(msg)
    assert msg["content"]["metadata"]["signal"]["type"] == "user" and "content" not in msg["content"]
    assert to_core([msg]) == [{"role": "user", "content": "hi"}]


def test_a_reactive_signal_is_not_user_authored_and_renders_as_markup():
    msg = _message({"contents": "build failed"}, kind="reactive", tag_name="ci")
    assert msg["role"] == "signal" and not is_user_authored(msg)
    assert to_core([msg]) == [{"role": "user", "content": "<ci>build failed</ci>"}]


def test_provider_options_are_stored_as_provider_metadata_and_still_sent():
    options = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}
    msg = _message({"contents": "hi", "providerOptions": options}, user_input=True)
    assert msg["content"]["providerMetadata"] == options and "metadata" not in msg["content"]
    assert to_core([msg])[0]["providerOptions"] == options


def test_as_stored_stamps_parts_but_tool_invocations_and_sets_the_text():
    msg = make_message("assistant", [
        {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c", "toolName": "t",
                                                       "args": {}, "result": 1}},
        {"type": "step-start", "createdAt": 5}, {"type": "text", "text": "Done"}, {"type": "data-x", "data": 1}])
    as_stored(msg, 99)
    parts = msg["content"]["parts"]
    assert [p.get("createdAt") for p in parts] == [None, 5, 99, 99]
    assert msg["content"]["content"] == "Done"
    signal = _message("hi")
    as_stored(signal, 99)  # a signal keeps its text in the parts only
    assert "content" not in signal["content"] and signal["content"]["parts"][0]["createdAt"] == 99


def test_a_history_cut_starting_with_the_assistant_gets_a_user_placeholder_first():
    from threadline.runtime.messages import user_first

    cut = [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "U"}]
    assert user_first(cut) == [cut[0], {"role": "user", "content": "."}, *cut[1:]]
    assert user_first(cut[2:]) == cut[2:] and user_first(cut[:1]) == cut[:1]
