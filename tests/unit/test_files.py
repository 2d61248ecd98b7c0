"""File and image parts (threadline.events.files): checked at the door, sent in litellm's shape."""

from __future__ import annotations

import base64

import pytest

from threadline.errors import InvalidEventError
from threadline.events.files import normalize_file_part, to_model_block
from threadline.events.signals import contents_parts

B64 = base64.b64encode(b"bytes of a file").decode()


@pytest.mark.parametrize("part", [
    {"type": "image", "image": "%%%", "mediaType": "image/png"},
    {"type": "file", "data": "", "mimeType": "image/png"},
    {"type": "file", "data": B64},
    {"type": "file", "data": B64, "mimeType": "png"},
    {"type": "file", "data": "data:image/png;base64,@@@"},
    {"type": "file", "data": 42, "mimeType": "image/png"},
])
def test_unreadable_parts_are_refused_with_a_reason(part) -> None:
    with pytest.raises(InvalidEventError) as info:
        contents_parts([part])
    assert info.value.code == "invalid_parts" and "unreadable file part" in str(info.value)


def test_image_parts_are_stored_as_file_parts() -> None:
    assert normalize_file_part({"type": "image", "image": "https://x.y/a.png"}) == {
        "type": "file", "data": "https://x.y/a.png", "mimeType": "image/*"}
    assert normalize_file_part({"type": "file", "data": f"data:application/pdf;base64,{B64}"})["mimeType"] == \
        "application/pdf"


@pytest.mark.parametrize(("part", "block"), [
    ({"data": B64, "mimeType": "image/png"}, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}),
    ({"data": "https://x.y/a.png", "mimeType": "image/png"}, {"type": "image_url", "image_url": {"url": "https://x.y/a.png"}}),
    ({"data": B64, "mimeType": "audio/wav"}, {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}}),
    ({"data": B64, "mimeType": "application/pdf", "filename": "t.pdf"},
     {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{B64}", "filename": "t.pdf"}}),
    ({"data": "gs://b/t.pdf", "mimeType": "application/pdf"},
     {"type": "file", "file": {"file_id": "gs://b/t.pdf", "format": "application/pdf"}}),
])
def test_model_blocks(part, block) -> None:
    assert to_model_block({"type": "file", **part}) == block
