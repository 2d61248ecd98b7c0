"""Structured logging (structlog) with secret redaction.

Every service calls :func:`configure` once. Bind ``run_id``, ``thread_key`` and ``step`` with
``structlog.contextvars.bound_contextvars`` so every line of a step carries them. Values under
keys that look like credentials, and strings that look like provider keys, are redacted.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SECRET_KEYS = re.compile(r"(api[_-]?key|secret|password|token|authorization|dsn)", re.I)
_SECRET_VALUES = re.compile(r"(sk-[A-Za-z0-9_-]{8,}|://[^:/@\s]+:[^@\s]+@)")


def _redact_value(value: object) -> object:
    if isinstance(value, str):
        return _SECRET_VALUES.sub(lambda m: "://***:***@" if m.group(0).startswith("://") else "sk-***", value)
    return value


def redact(_: object, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: blank credential-like keys and provider-key-like values."""
    for key in list(event):
        if _SECRET_KEYS.search(key) and key != "event":
            event[key] = "***"
        else:
            event[key] = _redact_value(event[key])
    return event


def configure(*, level: str = "INFO", json: bool = False, service: str | None = None) -> None:
    """Configure structlog and the stdlib root logger for this process."""
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(message)s")
    for noisy in ("aiokafka", "LiteLLM", "litellm", "httpx", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        cache_logger_on_first_use=True,
    )
    if service:
        structlog.contextvars.bind_contextvars(service=service)


def _library_default() -> None:
    """Until ``configure`` runs (services do), a library user sees only warnings, on stderr."""
    if not structlog.is_configured():
        structlog.configure(
            processors=[structlog.processors.add_log_level, redact, structlog.dev.ConsoleRenderer(colors=False)],
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr))


_library_default()


def get_logger(name: str | None = None) -> Any:
    """Return a structlog logger (``name`` is bound as ``logger``)."""
    return structlog.get_logger(logger_name=name) if name else structlog.get_logger()
