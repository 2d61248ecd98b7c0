"""An agent's voice speaks and listens through litellm's speech and
transcription calls (the fake model server answers both; decision 74), from the client and from
the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from threadline.client import ThreadlineClient
from threadline.errors import ConfigurationError, ModelCallError
from threadline.testing import model_script as ms


async def test_speak_and_listen_through_the_client(services, settings, model, model_server, cluster):
    local = settings.model_copy(update={"model_api_base": model_server.api_base})
    async with ThreadlineClient(local) as tl:
        voice = tl.agent("voiced").voice
        audio = await voice.speak("Your order ships today.")
        assert audio[:4] == b"RIFF" and audio[8:12] == b"WAVE"
        assert await voice.listen(audio) == "Your order ships today."
        await model.aqueue([ms.text("scripted transcript")], model="threadline-stt")
        assert await voice.listen(b"not audio at all", {"filename": "note.mp3"}) == "scripted transcript"
        await model.aqueue([ms.error(503, "speech is down")], model="threadline-tts")
        with pytest.raises(ModelCallError) as down:
            await voice.speak("again")
        with pytest.raises(ConfigurationError, match="no voice to listen"):
            await tl.agent("speaks-only").voice.listen(audio)
    assert down.value.kind == "service_unavailable"
    spoken = [r for r in await model.arequests(model="threadline-tts") if r["body"].get("input") == "Your order ships today."]
    assert spoken[0]["path"] == "/v1/audio/speech"
    assert (spoken[0]["body"]["voice"], spoken[0]["body"]["response_format"]) == ("nova", "wav")
    heard = await model.arequests(model="threadline-stt")
    assert [r["body"]["filename"] for r in heard[-2:]] == ["audio.wav", "note.mp3"]


def test_speak_and_listen_from_the_cli(services, tmp_path):
    out = tmp_path / "said.wav"

    def cli(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "threadline.cli", *args], env=services.env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    said = cli("speak", "--agent", "voiced", "Call me back at noon.", "--out", str(out))
    assert said == {"agent": "voiced", "bytes": out.stat().st_size, "out": str(out)} and said["bytes"] > 44
    assert cli("listen", "--agent", "voiced", str(out)) == {"agent": "voiced", "text": "Call me back at noon."}
    refused = subprocess.run([sys.executable, "-m", "threadline.cli", "listen", "--agent", "speaks-only", str(out)],
                             env=services.env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "no voice to listen" in refused.stdout
