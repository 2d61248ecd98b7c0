"""``threadline speak`` / ``threadline listen``: an agent's voice from a shell (decision 74)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from threadline.cli_common import _fail, _print, _run
from threadline.config import get_settings

AgentOpt = Annotated[str, typer.Option("--agent", "-a", envvar="THREADLINE_AGENT", help="agent id")]


def register(app: typer.Typer) -> None:
    """Add ``speak`` and ``listen`` to the CLI's app."""
    app.command()(speak)
    app.command()(listen)


def speak(text: Annotated[str, typer.Argument(help="what to say ('-': stdin)")],
          out: Annotated[str, typer.Option("--out", "-o", help="audio file to write ('-': stdout)")],
          agent: AgentOpt = "support-agent",
          speaker: Annotated[str | None, typer.Option(help="the voice (default: the agent's)")] = None,
          audio_format: Annotated[str | None, typer.Option("--format", help="mp3, wav, opus, …")] = None) -> None:
    """Text to speech with the agent's voice; prints {"agent", "bytes", "out"}."""


    said = sys.stdin.read() if text == "-" else text
    spoken: list[bytes] = []

    async def main() -> None:
        from threadline.client import ThreadlineClient
        from threadline.errors import ConfigurationError, ModelCallError

        async with ThreadlineClient(get_settings()) as tl:
            try:
                spoken.append(await tl.agent(agent).voice.speak(said, {"speaker": speaker,
                                                                       "response_format": audio_format}))
            except (LookupError, ConfigurationError, ModelCallError) as exc:
                _fail(str(exc))

    _run(main())
    if out == "-":
        sys.stdout.buffer.write(spoken[0])
        return
    Path(out).write_bytes(spoken[0])
    _print({"agent": agent, "bytes": len(spoken[0]), "out": out})


def listen(audio: Annotated[str, typer.Argument(help="audio file to transcribe ('-': stdin)")],
           agent: AgentOpt = "support-agent",
           language: Annotated[str | None, typer.Option(help="ISO-639-1 language of the audio")] = None) -> None:
    """Speech to text with the agent's voice; prints {"agent", "text"}."""


    data = sys.stdin.buffer.read() if audio == "-" else Path(audio).read_bytes()
    name = "audio.wav" if audio == "-" else Path(audio).name

    async def main() -> None:
        from threadline.client import ThreadlineClient
        from threadline.errors import ConfigurationError, ModelCallError

        async with ThreadlineClient(get_settings()) as tl:
            try:
                text = await tl.agent(agent).voice.listen(data, {"filename": name, "language": language})
            except (LookupError, ConfigurationError, ModelCallError) as exc:
                _fail(str(exc))
        _print({"agent": agent, "text": text})

    _run(main())
