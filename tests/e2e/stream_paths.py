"""Helpers of the stream-normalisation cases (docs/cases.md, B07–B09): raw SSE bodies for the
fake model server, and running the steps on one processor-worker started with chosen settings —
e.g. the litellm-wrapper switch ``THREADLINE_LITELLM_NOOP_CALLBACK=1`` (a no-op litellm callback,
so the worker reads every model stream through litellm's ``CustomStreamWrapper``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from threadline.testing.harness import ServiceSet

WRAPPER_ENV = {"THREADLINE_LITELLM_NOOP_CALLBACK": "1"}
"""The harness switch: the processor-worker reads model streams through litellm's wrapper."""
PATHS = {"direct": {}, "wrapper": WRAPPER_ENV}
"""The two ways a processor-worker reads a model stream, as the environment that selects each."""


def event(obj: dict[str, Any]) -> str:
    """One SSE event of an OpenAI ``chat.completion.chunk`` (id, object, model filled in)."""
    return "data: " + json.dumps({"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1,
                                  "model": "m", **obj}) + "\n\n"


def delta(fields: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A chunk of one choice with ``fields`` as its delta."""
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}], **extra}


def raw(*chunks: dict[str, Any] | str, done: bool = True) -> dict[str, Any]:
    """An ``FM`` script answering with exactly these SSE events (then ``[DONE]``)."""
    body = "".join(c if isinstance(c, str) else event(c) for c in chunks)
    return {"raw": body + ("data: [DONE]\n\n" if done else ""), "content_type": "text/event-stream"}


START_S = 240
"""How long a processor-worker may take to start (the test machine is shared and can be slow)."""


@contextlib.contextmanager
def only_worker(services: ServiceSet, instances: tuple[str, ...] = ("processor_worker-b",),
                **env: str) -> Iterator[None]:
    """Run the steps on ``instances`` (processor-workers started with ``env``) instead of
    ``processor_worker-1``, which is started again afterwards."""
    services.stop("processor_worker-1")
    try:
        for instance in instances:
            services.start("processor_worker", instance, timeout_s=START_S, **env)
        yield
    finally:
        for instance in instances:
            if instance in services.procs:
                services.stop(instance)
        services.start("processor_worker", "processor_worker-1", timeout_s=START_S)


@contextlib.contextmanager
def on_path(services: ServiceSet, path: str, instance: str) -> Iterator[str]:
    """Steps read model streams by ``path`` (a key of :data:`PATHS`): ``direct`` is the suite's
    own ``processor_worker-1``; ``wrapper`` is ``instance`` started with the switch in its place."""
    if path == "direct":
        yield path
        return
    with only_worker(services, (instance,), **PATHS[path]):
        yield path
