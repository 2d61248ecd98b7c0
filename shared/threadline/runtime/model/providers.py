"""Model strings (``provider/model``, as Mastra names them) → litellm's model names and
credentials (docs/models.md, "Model strings").

Mastra's provider ids are not always litellm's (``google/gemini-2.5-pro`` is litellm's
``gemini/gemini-2.5-pro``), nor are its environment variables (``GOOGLE_API_KEY`` or
``GOOGLE_GENERATIVE_AI_API_KEY``, where litellm reads ``GEMINI_API_KEY``). :func:`route` maps
both, and a missing key becomes an ``authentication`` error that names the variable to set, before
any request is made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from threadline.errors import ModelCallError


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider of the model-string table."""

    litellm: str
    """litellm's provider prefix."""
    env: tuple[str, ...]
    """Environment variables holding the API key, in the order they are read."""


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("openai", ("OPENAI_API_KEY",)),
    "anthropic": Provider("anthropic", ("ANTHROPIC_API_KEY",)),
    "google": Provider("gemini", ("GOOGLE_GENERATIVE_AI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY")),
    "gemini": Provider("gemini", ("GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY", "GOOGLE_API_KEY")),
    "groq": Provider("groq", ("GROQ_API_KEY",)),
    "mistral": Provider("mistral", ("MISTRAL_API_KEY",)),
    "xai": Provider("xai", ("XAI_API_KEY",)),
    "deepseek": Provider("deepseek", ("DEEPSEEK_API_KEY",)),
    "openrouter": Provider("openrouter", ("OPENROUTER_API_KEY",)),
}
"""Mastra provider id → litellm prefix and key variables. Other prefixes go to litellm unchanged
(litellm then finds its own credentials)."""


@dataclass(frozen=True, slots=True)
class Route:
    """How one model string is called."""

    model: str
    """litellm's model name (``gemini/gemini-2.5-pro``)."""
    api_key: str | None
    """The key found in the environment (``None``: litellm's own lookup)."""
    provider: str | None
    """Mastra's provider id, when the table knows it."""


def provider_of(model: str) -> str | None:
    """The provider id of ``provider/model`` (``None`` without a slash)."""
    return model.split("/", 1)[0] if "/" in model else None


def key_hint(model: str) -> str | None:
    """"set OPENAI_API_KEY" (or the alternatives) for a provider of the table, else ``None``."""
    known = PROVIDERS.get(provider_of(model) or "")
    return f"set {' or '.join(known.env)}" if known else None


def route(model: str, env: Mapping[str, str] | None = None) -> Route:
    """The litellm model name and API key of ``model``.

    Raises:
        ModelCallError: kind ``authentication`` when the provider is in :data:`PROVIDERS` and
            none of its key variables is set (the message names them).
    """
    environ = os.environ if env is None else env
    prefix = provider_of(model)
    known = PROVIDERS.get(prefix or "")
    if known is None or prefix is None:
        return Route(model, None, None)
    key = next((environ[name] for name in known.env if environ.get(name)), None)
    if key is None:
        raise ModelCallError(f"no API key for provider {prefix!r} (model {model}): {key_hint(model)}",
                             kind="authentication", status_code=401, retryable=False)
    return Route(f"{known.litellm}/{model.split('/', 1)[1]}", key, prefix)
