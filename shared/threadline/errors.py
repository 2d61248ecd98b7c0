"""Threadline's errors, split by who must act.

    ThreadlineError
    ├── ConfigurationError      a developer's mistake, raised at startup or when an agent is built
    ├── InvalidEventError       bad input on the wire: answered with an error reply and dead-lettered
    │   └── UnknownEventError   unknown event type or a newer schema version than we speak
    ├── NotConnectedError       a resource used before it was started (null object)
    ├── StaleWriterError        a write fenced off by a newer lease epoch
    ├── ToolCallError           a tool call ended for a reason of Threadline's: the call's tool-error
    │   ├── NotSerialisableError  its result has no JSON form; carries ``type_name`` and ``path``
    │   └── ToolTimeoutError      it ran past its deadline; carries ``what`` and ``timeout_s``
    └── RunError                a run failed; carries ``run_id`` and ``thread_key``
        └── ModelCallError      the model call failed; carries the mapped ``kind``

``TripWire`` (in ``threadline.runtime.processor``) is a control signal, not a failure, and does
not derive from ``ThreadlineError``.
"""

from __future__ import annotations

from typing import Any


class ThreadlineError(Exception):
    """Root of every error Threadline raises on purpose."""


class ConfigurationError(ThreadlineError, ValueError):
    """An agent, processor or setting is wrong; fix the code or the configuration."""


class InvalidEventError(ThreadlineError, ValueError):
    """An event failed validation. ``code`` is a stable machine-readable reason."""

    def __init__(self, message: str, *, code: str = "invalid_event") -> None:
        super().__init__(message)
        self.code = code


class UnknownEventError(InvalidEventError):
    """An event type or schema version this service does not speak."""


class NotConnectedError(ThreadlineError, RuntimeError):
    """A producer, consumer or store was used before ``start()`` or after ``stop()``."""


class StaleWriterError(ThreadlineError):
    """A run's write was rejected because its lease epoch is no longer current."""

    def __init__(self, run_id: str, epoch: int) -> None:
        super().__init__(f"stale writer: run {run_id} epoch {epoch} no longer holds the thread")
        self.run_id = run_id
        self.epoch = epoch


class ToolCallError(ThreadlineError):
    """A tool call ended for a reason of Threadline's rather than the tool's own: the call ends as
    a ``tool-error`` with this message (the model reads it; the run goes on). Deterministic: the
    tool is never run again for it."""


class NotSerialisableError(ToolCallError, TypeError):
    """A value user code handed back (a tool's or a workflow step's result, a data chunk) has no
    JSON form under the rule of :func:`threadline.runtime.json_form.json_form`.

    ``what`` names the value (``"result"``), ``type_name`` the offending type, ``path`` where it
    sits (``$`` is the value itself, ``$.a[0]`` inside it)."""

    def __init__(self, *, what: str, type_name: str, path: str) -> None:
        super().__init__(f"{what} not JSON-serialisable: {type_name} at {path}")
        self.what = what
        self.type_name = type_name
        self.path = path


class ToolTimeoutError(ToolCallError):
    """A tool call (or a workflow step) ran past its deadline of ``timeout_s`` seconds; ``what``
    names it (``"tool hang"``, ``"step s2"``). Not a ``TimeoutError``: that is a transient fault
    (:mod:`threadline.transient`), and this one must never be retried."""

    def __init__(self, *, what: str, timeout_s: float) -> None:
        super().__init__(f"{what} timed out after {timeout_s:g} s")
        self.what = what
        self.timeout_s = timeout_s


class RunError(ThreadlineError):
    """A run failed."""

    def __init__(self, message: str, *, run_id: str | None = None, thread_key: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.thread_key = thread_key


class ModelCallError(RunError):
    """The model call failed. ``kind`` is one of ``threadline.runtime.model.llm.ERROR_KINDS``.

    ``retry_after_s`` is the provider's ``Retry-After`` (seconds) when it sent one; ``streamed``
    is true when the model had streamed output before failing; ``model`` names the model.
    """

    def __init__(self, message: str, *, kind: str, status_code: int | None = None,
                 retry_after_s: float | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.retryable = retryable
        self.streamed = False
        self.model: str | None = None
        self.provider: dict[str, Any] | None = None
        """What the provider said of the failure, as Mastra's error carries it (``name``, ``url``,
        ``statusCode``, ``responseHeaders``, ``responseBody``, ``data``…; ``None``: nothing known)."""
