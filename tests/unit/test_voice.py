"""Voice configuration and the fake server's audio round trip (decision 74)."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime import Agent
from threadline.runtime.voice import Voice, listen, speak, voice_config, voice_of
from threadline.testing.model_server import start_in_thread
from threadline.testing.model_server_audio import fake_wav, wav_text


def test_voice_shapes():
    found = voice_config({"speak": {"model": "openai/tts-1", "voice": "nova"}, "listen": {"model": "openai/whisper-1"}},
                         where="x")
    assert found == Voice(speak_model="openai/tts-1", listen_model="openai/whisper-1", speaker="nova")
    assert voice_of(found.to_json()) == found and voice_of(None) is None
    for bad in ({}, {"speak": "tts"}, {"speak": {"model": 3}}, "openai/tts-1"):
        with pytest.raises(ConfigurationError):
            Agent(id="a", voice=bad)


def test_the_fake_wav_carries_its_text():
    assert wav_text(fake_wav("héllo")) == "héllo" and wav_text(b"ID3 not a wav") is None


async def test_speak_and_listen_against_the_fake_server():
    srv = start_in_thread()
    try:
        voice = Voice(speak_model="openai/threadline-tts", listen_model="openai/threadline-stt")
        audio = await speak(voice, "round trip", api_base=srv.api_base, timeout_s=10)
        assert await listen(voice, audio, api_base=srv.api_base, timeout_s=10, language="en") == "round trip"
        (said, heard) = srv.store.journal
        assert said["body"]["voice"] == "alloy" and heard["body"]["language"] == "en"
        with pytest.raises(ConfigurationError):
            await listen(Voice(speak_model="openai/threadline-tts"), audio, api_base=srv.api_base, timeout_s=10)
    finally:
        srv.stop()
