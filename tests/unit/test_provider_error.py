"""A failed model call as Mastra reports it (docs/decisions.md#model-error-payload)."""

from __future__ import annotations

import httpx
import openai
import pytest

from threadline.runtime.model.provider_error import bare_message, provider_error

pytestmark = pytest.mark.unit


def test_litellms_prefixes_are_taken_off_the_providers_message() -> None:
    assert bare_message("litellm.BadRequestError: OpenAIException - bad request") == "bad request"
    assert bare_message("litellm.MidStreamFallbackError: litellm.APIConnectionError: APIConnectionError: "
                        "OpenAIException - The server had an error.") == "The server had an error."
    assert bare_message("the model finished with reason other") == "the model finished with reason other"


def test_an_http_refusal_carries_the_api_call_errors_fields() -> None:
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    response = httpx.Response(400, json={"error": {"message": "bad request", "type": "invalid_request_error"}},
                              request=request)
    wrapped = RuntimeError("litellm.BadRequestError: OpenAIException - bad request")
    wrapped.__cause__ = openai.BadRequestError("bad request", response=response, body=None)
    got = provider_error(wrapped, retryable=False, request_body={"model": "m", "stream": True})
    assert got is not None
    assert got["name"] == "AI_APICallError" and got["url"] == "http://model.test/v1/chat/completions"
    assert (got["statusCode"], got["isRetryable"], got["requestBodyValues"]) == (400, False, {"model": "m", "stream": True})
    assert got["data"] == {"error": {"message": "bad request", "type": "invalid_request_error"}}
    assert got["responseBody"] == response.text and got["responseHeaders"]["content-type"] == "application/json"


def test_an_error_event_in_the_stream_carries_its_own_fields() -> None:
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    event = openai.APIError("The server had an error.", request=request,
                            body={"message": "The server had an error.", "type": "server_error", "param": None,
                                  "code": None})
    assert provider_error(event, retryable=True, request_body=None) == {
        "name": "Error", "type": "server_error", "param": None, "code": None}


def test_a_refused_connection_has_nothing_from_the_provider() -> None:
    assert provider_error(ConnectionRefusedError(), retryable=True, request_body=None) is None


def test_an_error_after_the_stream_opened_is_never_an_http_refusal() -> None:
    fake = httpx.Response(500, request=httpx.Request("POST", "https://openai.com/v1/"))  # as litellm makes one up
    wrapped = RuntimeError("litellm.MidStreamFallbackError: The server had an error.")
    wrapped.__cause__ = openai.APIError("The server had an error.", request=fake.request,
                                        body={"message": "The server had an error.", "type": "server_error"})
    wrapped.response = fake  # type: ignore[attr-defined]  # where litellm keeps it
    assert provider_error(wrapped, retryable=True, request_body=None, opened=True)["name"] == "Error"  # type: ignore[index]  # not None here
    assert provider_error(wrapped, retryable=True, request_body=None)["name"] == "AI_APICallError"  # type: ignore[index]  # not None here
