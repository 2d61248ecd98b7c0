"""``llm_stream.sse_json`` decodes a body exactly as the openai SDK's ``AsyncStream`` does,
wherever the transport splits the bytes: line ends (LF, CRLF, CR, a CRLF split across reads),
comments, multi-line data, event/id/retry fields, ``[DONE]``, in-band errors, and a last event
without its blank line."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai._streaming import SSEDecoder

from threadline.runtime.model import llm_stream


class FakeResponse:
    """Enough of an httpx response for both decoders: the body in the given pieces."""

    http_version = "HTTP/2"
    request = None

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.closed = False

    async def aiter_bytes(self):
        for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        self.closed = True


class FakeClient:
    def _make_sse_decoder(self) -> SSEDecoder:
        return SSEDecoder()

    def _process_response_data(self, *, data: Any, cast_to: Any, response: Any) -> Any:
        return data


async def _collect(stream: Any) -> tuple[list[Any], str | None]:
    out: list[Any] = []
    try:
        async for item in stream:
            out.append(item)
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the exception's type and text
        return out, f"{type(exc).__name__}: {getattr(exc, 'body', None) or exc}"
    return out, None


async def _sdk(pieces: list[bytes]):
    stream = openai.AsyncStream(cast_to=dict, response=FakeResponse(pieces), client=FakeClient())  # type: ignore[arg-type]  # a stand-in client
    return await _collect(stream)


async def _ours(pieces: list[bytes]):
    return await _collect(llm_stream.sse_json(FakeResponse(pieces)))


def _chunk(text: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


BODIES = {
    "lf": f"data: {_chunk('a')}\n\ndata: {_chunk('b')}\n\ndata: [DONE]\n\n",
    "crlf": f"data: {_chunk('a')}\r\n\r\ndata: {_chunk('b')}\r\n\r\ndata: [DONE]\r\n\r\n",
    "cr": f"data: {_chunk('a')}\r\rdata: {_chunk('b')}\r\r",
    "comments-and-fields": f": hello\n\nevent: message\nid: 7\nretry: 100\ndata: {_chunk('a')}\n\n"
                           f"data:{_chunk('no space')}\n\n: bye\n\n",
    "multi-line-data": 'data: {"choices":\ndata: [], "x": 1}\n\n',
    "sticky-id-then-blank": f"id: 1\ndata: {_chunk('a')}\n\n\n\n",
    "empty-event-name": f"event:\ndata: {_chunk('a')}\n\n",
    "bare-data-line": "data\n\n",
    "thread-event": f'event: thread.run\ndata: {{"id": "r"}}\n\ndata: {_chunk("a")}\n\n',
    "in-band-error": f'data: {_chunk("a")}\n\ndata: {{"error": {{"message": "slow down", "code": 429}}}}\n\n',
    "error-without-message": 'data: {"error": {"code": 500}}\n\n',
    "not-json": "data: {nope\n\n",
    "not-an-object": "data: 42\n\ndata: [1, 2]\n\n",
    "nan": 'data: {"x": NaN}\n\n',
    "unterminated-last-event": f"data: {_chunk('a')}\n\ndata: {_chunk('b')}",
    "after-done": f"data: {_chunk('a')}\n\ndata: [DONE]\n\ndata: {_chunk('ignored')}\n\n",
    "utf8": f"data: {json.dumps({'t': 'héllo ✓ 👋'}, ensure_ascii=False)}\n\n",
}


@pytest.mark.parametrize("name", sorted(BODIES))
async def test_decodes_like_the_sdk_at_every_split(name: str) -> None:
    body = BODIES[name].encode()
    whole = await _sdk([body])
    assert await _ours([body]) == whole
    for cut in range(1, len(body)):
        pieces = [body[:cut], body[cut:]]
        assert await _ours(pieces) == whole, (name, cut)
    assert await _ours([body[i:i + 1] for i in range(len(body))]) == whole  # one byte per read


async def test_an_in_band_error_is_the_sdks_api_error() -> None:
    body = b'data: {"error": {"message": "slow down", "code": 429}}\n\n'
    with pytest.raises(openai.APIError) as info:
        async for _ in llm_stream.sse_json(FakeResponse([body])):
            pass
    assert info.value.body == {"message": "slow down", "code": 429} and info.value.message == "slow down"
