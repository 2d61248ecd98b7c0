"""The suite-wide pairing check (decision 23): the fake model server this session's services call
refuses a history with an unanswered tool call and counts it; the autouse fixture of conftest.py
fails any test that leaves the count above 0, unless the test is marked ``unpaired_history``."""

from __future__ import annotations

import httpx
import pytest

from threadline.testing.pairing import PAIRING_MESSAGE


@pytest.mark.unpaired_history
def test_an_unpaired_history_is_refused_and_counted(model_server, model):
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "k1", "type": "function", "function": {"name": "charge", "arguments": "{}"}}]}
    body = {"model": "threadline-pairing", "messages": [{"role": "user", "content": "hi"}, call,
                                                       {"role": "user", "content": "again"}]}
    refused = httpx.post(model_server.api_base + "/chat/completions", json=body, timeout=10)
    assert refused.status_code == 400 and PAIRING_MESSAGE in refused.json()["error"]["message"]
    assert model.pairing()["count"] == 1  # the fixture would fail this test without its marker
