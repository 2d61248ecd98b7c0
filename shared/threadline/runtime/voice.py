"""Voice (Mastra's Agent ``voice`` and ``CompositeVoice``; decision 74):
text to speech (``speak``) and speech to text (``listen``) through litellm's speech and
transcription calls.

Agent option::

    voice=Voice(speak_model="openai/tts-1", listen_model="openai/whisper-1", speaker="alloy")
    voice={"speak": {"model": "openai/tts-1", "speaker": "alloy"}, "listen": {"model": "openai/whisper-1"}}

Voice calls are stateless (no run, thread or memory): a client reads the agent's voice
configuration from the ``agents`` table and calls the provider itself
(``await tl.agent(id).voice.speak(text)``, CLI ``threadline speak`` / ``listen``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from threadline.errors import ConfigurationError
from threadline.events.json_types import JSONObject


@dataclass(frozen=True, slots=True)
class Voice:
    """An agent's voice: the speech model (and its default speaker) and the transcription model."""

    speak_model: str | None = None
    listen_model: str | None = None
    speaker: str | None = None
    """The default voice of ``speak`` (OpenAI's ``alloy``, ``nova``, …)."""
    response_format: str = "mp3"
    """The audio format ``speak`` asks for (``mp3``, ``wav``, ``opus``, …)."""

    def to_json(self) -> JSONObject:
        return asdict(self)


def voice_config(value: object, *, where: str) -> Voice | None:
    """An agent's ``voice`` option as a :class:`Voice` (``None``: no voice).

    Raises:
        ConfigurationError: not a :class:`Voice` nor ``{speak: {model, speaker?}, listen: {model}}``.
    """
    if value is None or isinstance(value, Voice):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: a Voice(...) or {{'speak': {{'model', 'speaker'}}, 'listen': {{'model'}}}}")
    speak, listen = value.get("speak") or {}, value.get("listen") or {}
    if not isinstance(speak, Mapping) or not isinstance(listen, Mapping):
        raise ConfigurationError(f"{where}: speak and listen are mappings")
    found = Voice(speak_model=speak.get("model"), listen_model=listen.get("model"),
                  speaker=speak.get("speaker", speak.get("voice")),
                  response_format=speak.get("response_format", speak.get("responseFormat", "mp3")))
    for name in ("speak_model", "listen_model", "speaker"):
        if getattr(found, name) is not None and not isinstance(getattr(found, name), str):
            raise ConfigurationError(f"{where}: {name} must be a string")
    if found.speak_model is None and found.listen_model is None:
        raise ConfigurationError(f"{where}: neither a speak nor a listen model")
    return found


def voice_of(stored: Mapping[str, Any] | None) -> Voice | None:
    """The :class:`Voice` of an ``agents`` row's ``voice`` JSON."""
    return Voice(**{k: v for k, v in stored.items() if k in Voice.__slots__}) if stored else None


async def speak(voice: Voice | None, text: str, *, api_base: str | None, timeout_s: float,
                speaker: str | None = None, response_format: str | None = None) -> bytes:
    """Text to speech (``litellm.aspeech``): the audio bytes.

    Raises:
        ConfigurationError: the agent has no speech model.
        ModelCallError: the provider's call failed (classified as the worker's calls are).
    """
    if voice is None or not voice.speak_model:
        raise ConfigurationError("the agent has no voice to speak with (voice.speak_model)")
    import litellm

    from threadline.runtime.model.llm import call_kwargs, classify

    kwargs = _kwargs(call_kwargs(voice.speak_model, api_base=api_base, timeout_s=timeout_s))
    try:
        response = await litellm.aspeech(**kwargs, input=text, voice=speaker or voice.speaker or "alloy",
                                         response_format=response_format or voice.response_format)
    except Exception as exc:
        raise classify(exc) from exc
    return bytes(response.content)


async def listen(voice: Voice | None, audio: bytes, *, api_base: str | None, timeout_s: float,
                 filename: str = "audio.wav", language: str | None = None) -> str:
    """Speech to text (``litellm.atranscription``): the transcript.

    Raises:
        ConfigurationError: the agent has no transcription model.
        ModelCallError: the provider's call failed.
    """
    if voice is None or not voice.listen_model:
        raise ConfigurationError("the agent has no voice to listen with (voice.listen_model)")
    import litellm

    from threadline.runtime.model.llm import call_kwargs, classify

    kwargs = _kwargs(call_kwargs(voice.listen_model, api_base=api_base, timeout_s=timeout_s))
    if language:
        kwargs["language"] = language
    try:
        response = await litellm.atranscription(**kwargs, file=(filename, audio))
    except Exception as exc:
        raise classify(exc) from exc
    return str(getattr(response, "text", "") or "")


def _kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.pop("num_retries", None)  # a chat-completion argument
    return kwargs
