"""Every use of litellm beyond its public top-level API (``litellm.acompletion``,
``litellm.get_llm_provider``, ``litellm.get_optional_params``, ``litellm.callbacks``, the
``litellm.exceptions`` classes…), and the one patch Threadline applies to litellm at import, in
one module: an upgrade of litellm is checked here first (``tests/unit/test_llm_direct_request.py``,
``test_llm_direct_stream.py`` and ``test_llm_cost_bypass.py`` fail when any of it moved or changed).

What is used, and why:

* ``litellm_core_utils.exception_mapping_utils.exception_type``: litellm's mapping of a provider
  error to its exception classes; the direct call (:mod:`.llm_direct`) and the raw and SDK stream
  readers (:mod:`.llm_stream`) raise what ``litellm.acompletion`` would, so
  :func:`threadline.runtime.model.llm.classify` sees the same exceptions on every path.
* ``litellm_core_utils.get_litellm_params.get_litellm_params``,
  ``llms.openai.chat.gpt_transformation.OpenAIGPTConfig`` (``transform_request``),
  ``llms.openai.common_utils`` (``BaseOpenAILLM``: the HTTP client litellm gives its openai
  clients; ``OpenAIError``, ``upstream_error_response``: how its handler wraps a failure) and
  ``utils.validate_and_fix_openai_messages`` / ``_tools`` / ``validate_chat_completion_tool_choice``:
  the direct call builds the very body, client and errors litellm's openai path would (decision 87).
* ``integrations.custom_logger.CustomLogger``: the base of :class:`NoopCallback` (the worker's test
  switch that forces litellm's stream wrapper).
* The private callback lists ``_async_success_callback``, ``_async_failure_callback``,
  ``_async_input_callback`` (beside the public ones): a callback set on any of them must route
  the call through litellm (:func:`callbacks_configured`).
* The patch: ``litellm_core_utils.litellm_logging.Logging.response_cost_calculator`` wrapped to
  skip the cost of a just-opened ``CustomStreamWrapper`` (always 0 or ``None``, ~1 ms of CPU per
  call; bench/results/HISTORY.md, "The model call"), only inside :func:`no_open_cost_estimate` and only
  when no callback is configured.

What breaks on an upgrade: a moved or renamed import fails at import (the worker does not start;
the tests above fail); a changed signature or body layout of ``transform_request``,
``get_litellm_params`` or ``exception_type`` shows as a parity failure of the direct call
(``THREADLINE_MODEL_DIRECT=0`` sends every call through ``litellm.acompletion`` meanwhile); a
renamed ``response_cost_calculator`` leaves the patch uninstalled (:data:`OPEN_COST_BYPASS` is
False, calls cost ~1 ms more, nothing else changes); a new private callback list is missed by
:func:`callbacks_configured` (add it to ``_CALLBACK_LISTS``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.exception_mapping_utils import exception_type
from litellm.litellm_core_utils.get_litellm_params import get_litellm_params
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from litellm.llms.openai.common_utils import BaseOpenAILLM, OpenAIError, upstream_error_response
from litellm.utils import (
    validate_and_fix_openai_messages,
    validate_and_fix_openai_tools,
    validate_chat_completion_tool_choice,
)

__all__ = ["OPEN_COST_BYPASS", "BaseOpenAILLM", "NoopCallback", "OpenAIError", "OpenAIGPTConfig",
           "callbacks_configured", "exception_type", "get_litellm_params", "no_open_cost_estimate",
           "upstream_error_response", "validate_and_fix_openai_messages", "validate_and_fix_openai_tools",
           "validate_chat_completion_tool_choice"]

_CALLBACK_LISTS = ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
                   "_async_failure_callback", "input_callback", "_async_input_callback", "service_callback")


def callbacks_configured() -> bool:
    """Is any litellm callback set (Langfuse, a custom logger, …)? Then every call goes through
    litellm's wrapper, which reports the call's success or failure to them."""
    return any(getattr(litellm, name, None) for name in _CALLBACK_LISTS)


class NoopCallback(CustomLogger):
    """A litellm callback that does nothing: its presence alone routes streams through the wrapper."""


_SKIP_OPEN_COST: contextvars.ContextVar[bool] = contextvars.ContextVar("threadline_skip_open_cost", default=False)


@contextlib.contextmanager
def no_open_cost_estimate() -> Iterator[None]:
    """Around ``litellm.acompletion(stream=True)``: unless a litellm callback is configured, skip
    the cost litellm computes for the stream it returns as soon as it opens.

    litellm prices the just-opened ``CustomStreamWrapper`` for its ``_hidden_params`` (proxy
    response headers); the wrapper holds no usage yet, so the figure is ``0.0`` (a model in
    litellm's price map) or ``None``, and computing it costs ~1 ms of CPU per call (model-info
    and pricing lookups; bench/results/HISTORY.md, "The model call"). Skipped, the wrapper's
    ``response_cost`` is ``None``, as litellm leaves it for a bare provider stream. The cost of the
    finished call, which callbacks receive, is computed elsewhere and not touched: with a
    callback configured nothing is skipped at all. Only calls inside this context are affected
    (a context variable), not other litellm calls of the process.
    """
    token = _SKIP_OPEN_COST.set(not callbacks_configured())
    try:
        yield
    finally:
        _SKIP_OPEN_COST.reset(token)


def _install_open_cost_bypass() -> bool:
    """The import-time patch: wrap litellm's ``Logging.response_cost_calculator`` so it answers ``None`` for a
    ``CustomStreamWrapper`` inside :func:`no_open_cost_estimate`. Returns whether it is installed
    (False, and nothing changed, if this litellm has no such method)."""
    try:
        from litellm.litellm_core_utils.litellm_logging import Logging
        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
    except ImportError:  # pragma: no cover - depends on the installed litellm
        return False
    original = getattr(Logging, "response_cost_calculator", None)
    if original is None or getattr(original, "threadline_bypass", False):
        return original is not None

    @functools.wraps(original)
    def response_cost_calculator(self: object, result: object = None, *args: object, **kwargs: object) -> Any:
        if _SKIP_OPEN_COST.get() and isinstance(result, CustomStreamWrapper):
            return None
        return original(self, result, *args, **kwargs)

    response_cost_calculator.threadline_bypass = True  # type: ignore[attr-defined]  # marks the wrapper, once
    Logging.response_cost_calculator = response_cost_calculator  # type: ignore[method-assign]  # the bypass itself
    return True


OPEN_COST_BYPASS = _install_open_cost_bypass()


