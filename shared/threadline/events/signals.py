"""Thread signals: their types, construction, XML rendering for the model, and their transcript
messages.

A signal is a dict ``{id, type, tagName, contents, attributes, metadata, createdAt,
providerOptions?}`` (stored in ``signals.payload``). The model always sees a signal as a *user*
message: a ``user`` signal without attributes is its plain text; anything else is rendered
``<tag attr="v">contents</tag>`` with contents and values XML-escaped and tag/attribute names
validated, so no input can forge a tag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from threadline._internal.attrdict import AttrDict
from threadline.errors import InvalidEventError
from threadline.events.files import normalize_file_part
from threadline.events.messages import is_user_authored, make_message, now_iso
from threadline.ids import new_id

SIGNAL_TYPES = ("user", "state", "reactive", "notification")
LEGACY_TYPES = {"user-message": "user", "system-reminder": "reactive"}
DEFAULT_TAGS = {"user": "user", "state": "state", "reactive": "system-reminder",
                "notification": "notification"}
_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
NOTIFICATION_ATTRIBUTES = ("id", "source", "type", "kind", "priority", "status", "coalescedCount")
"""The attributes a notification signal gets from its record, in the order Mastra writes them
(after the caller's own): rendered in this order whatever order storage gave back (PostgreSQL
``jsonb`` keeps keys shortest first)."""
_RECORDED = ("id", "type", "tagName", "createdAt", "acceptedAt", "attributes", "metadata")


def normalize_type(kind: str) -> str:
    """Canonical signal type (legacy ``user-message`` → ``user``, ``system-reminder`` → ``reactive``).

    Raises:
        InvalidEventError: unknown type (code ``invalid_signal_type``).
    """
    kind = LEGACY_TYPES.get(kind, kind)
    if kind not in SIGNAL_TYPES:
        raise InvalidEventError(f"Invalid signal type: {kind}. Use a supported signal type and set "
                                "tag_name for custom XML tags.", code="invalid_signal_type")
    return kind


def escape_text(value: str) -> str:
    """``&``, ``<`` and ``>`` escaped."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_ATTR_WHITESPACE = str.maketrans({"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def escape_attr(value: str) -> str:
    """:func:`escape_text`, ``"`` and the line breaks and tabs escaped (as character references:
    a literal newline would end a line of the prompt inside the tag, and an XML reader turns it
    into a space)."""
    return escape_text(value).replace('"', "&quot;").translate(_ATTR_WHITESPACE)


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_markup(tag: str, attributes: Mapping[str, object] | None, contents: str) -> str:
    """``<tag k="v">contents</tag>``, or ``<tag k="v" />`` when ``contents`` is empty.

    Raises:
        InvalidEventError: a tag or attribute name that is not an XML name.
    """
    if not _XML_NAME.match(tag):
        raise InvalidEventError(f"Invalid signal XML tag name: {tag}", code="invalid_tag_name")
    attrs = ""
    for key, value in (attributes or {}).items():
        if value is None:
            continue
        if not _XML_NAME.match(str(key)):
            raise InvalidEventError(f"Invalid signal XML attribute name: {key}",
                                    code="invalid_attribute_name")
        attrs += f' {key}="{escape_attr(_stringify(value))}"'
    if not contents:
        return f"<{tag}{attrs} />"
    return f"<{tag}{attrs}>{escape_text(contents)}</{tag}>"


def contents_parts(contents: Any) -> list[dict[str, Any]]:
    """A signal's ``contents`` (string or text/file/image parts) as message parts (an image part
    is stored as a file part: :func:`threadline.events.files.normalize_file_part`).

    Raises:
        InvalidEventError: a part that is not a text, file or image part, or an unreadable file
            part (code ``invalid_parts``).
    """
    if isinstance(contents, str):
        return [{"type": "text", "text": contents}]
    parts: list[dict[str, Any]] = []
    for p in contents or []:
        if not isinstance(p, dict) or p.get("type") not in ("text", "file", "image"):
            raise InvalidEventError("message parts must be text or file parts ({type: 'text', text} or "
                                    "{type: 'file', data, mimeType}); a message is a string, such parts, or "
                                    "{contents, attributes, metadata}", code="invalid_parts")
        if p["type"] == "text" and not isinstance(p.get("text"), str):
            raise InvalidEventError("a text part needs a string 'text'", code="invalid_parts")
        parts.append(dict(p) if p["type"] == "text" else normalize_file_part(p))
    return parts or [{"type": "text", "text": ""}]


def signal_from_message(message: Any, *, kind: str = "user", tag_name: str | None = None,
                        signal_id: str | None = None) -> dict[str, Any]:
    """Normalise a ``sendMessage`` input (string, parts, a pydantic model or ``{contents,
    attributes, metadata, provider_options | providerOptions}``) to a new signal dict (id ``signal_id``, or a new one).

    Raises:
        InvalidEventError: unknown type, bad tag or attribute name, bad parts.
    """
    if hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    body: dict[str, Any] = {"contents": message} if isinstance(message, str | list) else dict(message)
    kind = normalize_type(kind)
    tag = tag_name or DEFAULT_TAGS[kind]
    render_markup(tag, body.get("attributes"), "")  # validate names now, not at prompt time
    contents_parts(body.get("contents", ""))  # likewise the parts
    return {"id": signal_id or new_id("sig"), "type": kind, "tagName": tag, "contents": body.get("contents", ""),
            "attributes": dict(body.get("attributes") or {}), "metadata": dict(body.get("metadata") or {}),
            "createdAt": now_iso(),
            **({"providerOptions": options} if (options := body.get("provider_options") or body.get("providerOptions"))
               else {})}


def signal_to_message(signal: dict[str, Any], *, thread_id: str, resource_id: str) -> AttrDict:
    """The transcript message of a signal, as Mastra stores it.

    The message of ``stream``/``generate`` (``userInput`` set by ingress) is a user message: role
    ``user``, its text also in ``content.content``, no signal metadata (kept only when it has
    attributes, which the model's rendering needs). Any other signal (``sendMessage`` and
    ``queueMessage`` ones too) is role ``signal``, ``type`` its tag, with the signal in
    ``content.metadata.signal`` (its fields that are set: empty ``attributes`` / ``metadata`` are
    left out, as Mastra's ``signalToDBMessage`` does); ``providerOptions`` go to
    ``content.providerMetadata``, as there."""
    parts = contents_parts(signal["contents"])
    recorded = {k: signal[k] for k in _RECORDED if signal.get(k) not in (None, {})}
    user_input = bool(signal.get("userInput")) and signal["type"] == "user"
    plain = user_input and not recorded.get("attributes")
    role = "user" if user_input else "signal"
    msg = make_message(role, parts, id=signal["id"], thread_id=thread_id, resource_id=resource_id,
                       metadata=None if plain else {"signal": recorded},
                       type=None if role == "user" else signal["tagName"])
    if plain:
        msg["content"]["content"] = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
    if signal.get("providerOptions"):
        msg["content"]["providerMetadata"] = signal["providerOptions"]
    return msg


def _model_attributes(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A stored signal's attributes as the model sees them: ``None`` values left out; a
    notification's the caller's first, then the record's in Mastra's order."""
    attrs = {k: v for k, v in (meta.get("attributes") or {}).items() if v is not None}
    if meta.get("type") != "notification":
        return attrs
    return {**{k: v for k, v in attrs.items() if k not in NOTIFICATION_ATTRIBUTES},
            **{k: attrs[k] for k in NOTIFICATION_ATTRIBUTES if k in attrs}}


def render_for_model(msg: dict[str, Any]) -> str:
    """The user-role text the model sees for a stored user or signal message."""
    content = msg["content"]
    parts = content.get("parts") or []
    texts = [p.get("text", "") for p in parts if p.get("type") == "text"]
    meta = (content.get("metadata") or {}).get("signal") or {}
    attrs = _model_attributes(meta)
    if is_user_authored(msg) and not attrs:  # a user signal without attributes: its bare text
        text = "".join(texts)
        return text if text or not isinstance(content.get("content"), str) else content["content"]
    tag = meta.get("tagName") or msg.get("type") or ("user" if msg["role"] == "user" else "system-reminder")
    return render_markup(tag, attrs, "\n".join(texts))
