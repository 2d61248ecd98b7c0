"""``client.agent("support-agent")``: Mastra's Agent methods on one agent, so Mastra code ports
line for line::

    support = tl.agent("support-agent")
    sub = await support.subscribe_to_thread({"resourceId": "user-123", "threadId": "thread-abc"})
    result = await support.send_message("Use the latest customer note too.", {
        "resourceId": "user-123", "threadId": "thread-abc", "ifIdle": {"streamOptions": {"maxSteps": 3}}})
    accepted = await result.accepted
    if accepted.action == "wake":
        await accepted.output.consume_stream()
    answer = await support.generate("What did we decide?", {"memory": {"resource": "user-123",
                                                                       "thread": "thread-abc"}})

Options are one dict as in Mastra (camelCase or snake_case keys), or keyword arguments
(``resource_id=…, thread_id=…``); both may be combined, keywords win.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypedDict

from threadline.client.run_output import RunOutput
from threadline.events import Notified, RunResult
from threadline.events.json_types import JSONObject
from threadline.events.options import split_caller_options
from threadline.events.rows import AgentDetails

if TYPE_CHECKING:
    from threadline.client.results import SendResult
    from threadline.client.transport import Subscription
    from threadline.config import Settings
    from threadline.runtime.voice import Voice

_KEYS = {"resourceId": "resource_id", "threadId": "thread_id", "runId": "run_id", "ifActive": "if_active",
         "ifIdle": "if_idle", "streamOptions": "stream_options", "fromBeginning": "from_beginning",
         "hideSignals": "hide_signals", "timeoutS": "timeout_s"}


def _snake(options: Mapping[str, object] | None, kw: Mapping[str, object]) -> dict[str, object]:
    """Mastra's option names (``resourceId``, ``ifIdle.streamOptions``) as Python's; ``kw`` wins."""
    out = {_KEYS.get(k, k): v for k, v in (options or {}).items()}
    for branch in ("if_active", "if_idle"):
        nested = out.get(branch)
        if isinstance(nested, Mapping):
            out[branch] = {_KEYS.get(k, k): v for k, v in nested.items()}
    out.update({k: v for k, v in kw.items() if v is not None})
    return out


class Target(TypedDict):
    """The thread a call is about."""

    resource_id: str
    thread_id: str


def _target(opts: dict[str, object]) -> Target:
    """``resource_id`` / ``thread_id`` of the options (a ``TypeError`` when one is missing or
    not a string)."""
    missing = [k for k in ("resource_id", "thread_id") if not opts.get(k)]
    if missing:
        raise TypeError(f"options need resourceId and threadId (missing: {', '.join(missing)})")
    resource_id, thread_id = opts.pop("resource_id"), opts.pop("thread_id")
    if not isinstance(resource_id, str) or not isinstance(thread_id, str):
        raise TypeError("resourceId and threadId are strings")
    return {"resource_id": resource_id, "thread_id": thread_id}


def _memory(opts: dict[str, object]) -> tuple[Target, dict[str, object] | None]:
    """``generate`` / ``stream`` options: ``memory: {resource, thread: id | {id, title, metadata}}``
    (or ``resource_id`` / ``thread_id``) → the target and the thread row's ``{title, metadata}``.
    A ``TypeError`` when ``memory`` is not a mapping."""
    memory = opts.pop("memory", None) or {}
    if not isinstance(memory, Mapping):
        raise TypeError("options.memory is a mapping {resource, thread, options?}")
    thread_row: dict[str, object] | None = None
    if isinstance(memory.get("options"), Mapping):  # Mastra's per-call memory options: {lastMessages, readOnly}
        opts["memory_options"] = dict(memory["options"])
    if memory:
        thread = memory.get("thread")
        if isinstance(thread, Mapping):
            thread_row = {k: thread[k] for k in ("title", "metadata") if thread.get(k) is not None} or None
            thread = thread.get("id")
        opts.setdefault("resource_id", memory.get("resource"))
        opts.setdefault("thread_id", thread)
    return _target(opts), thread_row


class AgentClient(Protocol):
    """What a handle asks of its client, :class:`~threadline.client.ThreadlineClient` (its
    methods, keyword arguments as theirs): a Protocol, so this module does not import the
    client's, which imports this one for ``agent(id)``."""

    @property
    def settings(self) -> Settings | None: ...
    @property
    def send_message(self) -> Callable[..., Awaitable[SendResult]]: ...
    @property
    def queue_message(self) -> Callable[..., Awaitable[SendResult]]: ...
    @property
    def send_signal(self) -> Callable[..., Awaitable[SendResult]]: ...
    @property
    def send_state_signal(self) -> Callable[..., Awaitable[SendResult]]: ...
    @property
    def send_notification_signal(self) -> Callable[..., Awaitable[Notified]]: ...
    @property
    def subscribe_to_thread(self) -> Callable[..., Awaitable[Subscription]]: ...
    @property
    def generate(self) -> Callable[..., Awaitable[RunResult]]: ...
    @property
    def stream(self) -> Callable[..., Awaitable[SendResult]]: ...
    @property
    def run_output(self) -> Callable[..., RunOutput]: ...
    @property
    def agent_details(self) -> Callable[[str], Awaitable[AgentDetails | None]]: ...


class AgentHandle:
    """One agent of the cluster, seen from a client (Mastra's ``Agent`` methods).

    Every method publishes to ingress and returns what Mastra returns, in Python spelling:
    ``send_*`` / ``queue_message`` a :class:`~threadline.client.SendResult` (``accepted``,
    ``signal``, ``persisted``), ``generate`` the :class:`~threadline.events.RunResult`,
    ``stream`` a :class:`~threadline.client.RunOutput` of the run it starts.

    Raises (every method): ``TypeError`` when ``resourceId`` / ``threadId`` are missing;
    :class:`~threadline.client.client.BrokerUnavailableError` when the broker does not
    acknowledge the request in time.
    """

    def __init__(self, client: AgentClient, agent_id: str) -> None:
        self.client = client
        self.id = agent_id

    def __repr__(self) -> str:
        return f"AgentHandle(id={self.id!r})"

    async def details(self) -> AgentDetails:
        """``{id, name, description, metadata, dynamic_metadata, memory, voice}`` as the cluster serves it.

        Raises:
            LookupError: the cluster serves no agent with this id.
        """
        found = await self.client.agent_details(self.id)
        if found is None:
            raise LookupError(f"the cluster serves no agent {self.id!r}")
        return found

    async def get_metadata(self) -> JSONObject:
        """The agent's ``metadata`` (Mastra: for clients to sort and filter agents).

        Raises:
            LookupError: the cluster serves no agent with this id.
        """
        return (await self.details())["metadata"]

    async def send_message(self, message: object, options: Mapping[str, object] | None = None, **kw: object) -> SendResult:
        """``sendMessage(message, {resourceId, threadId, runId?, ifActive?, ifIdle?})``."""
        opts = _snake(options, kw)
        return await self.client.send_message(message, agent_id=self.id, **_target(opts), **opts)

    async def queue_message(self, message: object, options: Mapping[str, object] | None = None, **kw: object) -> SendResult:
        """``queueMessage(message, {resourceId, threadId, ifIdle?})``."""
        opts = _snake(options, kw)
        return await self.client.queue_message(message, agent_id=self.id, **_target(opts), **opts)

    async def send_signal(self, signal: Mapping[str, object], options: Mapping[str, object] | None = None,
                          **kw: object) -> SendResult:
        """``sendSignal({type, contents, tagName?, attributes?, metadata?}, {resourceId, threadId, …})``."""
        opts = _snake(options, kw)
        return await self.client.send_signal(dict(signal), agent_id=self.id, **_target(opts), **opts)

    async def send_state_signal(self, state: Mapping[str, object], options: Mapping[str, object] | None = None,
                                **kw: object) -> SendResult:
        """``sendStateSignal({id, cacheKey, contents, mode?, value?|delta?}, {resourceId, threadId, …})``;
        returns once ingress answered; ``skipped`` True (``reason`` ``"unchanged"``, no ``signal``)
        when the lane's value is unchanged."""
        opts = _snake(options, kw)
        return await self.client.send_state_signal(dict(state), agent_id=self.id, **_target(opts), **opts)

    async def send_notification_signal(self, notification: Mapping[str, object] | list[dict[str, object]],
                                       options: Mapping[str, object] | None = None, **kw: object) -> Notified:
        """``sendNotificationSignal({source, kind, summary, priority?, …}, {resourceId, threadId, ifIdle?})``:
        the ``notified`` reply (per notification ``{record, decision, run_id?, signal?, accepted?}``)."""
        opts = _snake(options, kw)
        items = notification if isinstance(notification, list) else dict(notification)
        return await self.client.send_notification_signal(items, agent_id=self.id, **_target(opts), **opts)

    async def subscribe_to_thread(self, options: Mapping[str, object] | None = None,
                                  **kw: object) -> Subscription:
        """``subscribeToThread({resourceId, threadId})``: ``stream``, ``await active_run_id()``,
        ``await abort()``, ``await unsubscribe()``."""
        opts = _snake(options, kw)
        return await self.client.subscribe_to_thread(**_target(opts), **opts)

    async def generate(self, message: object, options: Mapping[str, object] | None = None, **kw: object) -> RunResult:
        """``generate(message, {memory: {resource, thread}, maxSteps?, …})``: waits for the run's result.

        Raises:
            RequestFailed: ingress refused the request.
            TimeoutError: no result within ``timeout_s`` (default 300).
        """
        opts = _snake(options, kw)
        target, thread = _memory(opts)
        timeout = opts.pop("timeout_s", 300.0)
        timeout_s = float(timeout) if isinstance(timeout, (int, float, str)) else 300.0
        return await self.client.generate(message, agent_id=self.id, options=opts, thread=thread,
                                          timeout_s=timeout_s, **target)

    async def stream(self, message: object, options: Mapping[str, object] | None = None, **kw: object) -> RunOutput:
        """``stream(message, {memory: {resource, thread}, …})``: the run's :class:`RunOutput`
        (``full_stream``, ``text_stream``, ``await text()``), once ingress has accepted the request.

        Raises:
            RequestFailed: ingress refused the request.
        """
        opts = _snake(options, kw)
        target, thread = _memory(opts)
        sent = await self.client.stream(message, agent_id=self.id, options=opts, thread=thread, **target)
        accepted = await sent.accepted
        if accepted.output is not None:
            output: RunOutput = accepted.output
            return output
        # the thread was busy: the request waits its turn as a run of its own (``deliver``)
        assert accepted.run_id is not None
        _, hide = split_caller_options(opts)
        return self.client.run_output(accepted.run_id, resource_id=target["resource_id"],
                                      thread_id=target["thread_id"], sent_at_ms=sent.sent_at_ms, hide_signals=hide)

    @property
    def voice(self) -> AgentVoice:
        """Mastra's ``agent.voice``: ``await voice.speak(text)`` / ``await voice.listen(audio)``."""
        return AgentVoice(self)


class SpeakOptions(TypedDict, total=False):
    """``voice.speak`` options (Mastra's camelCase ``responseFormat`` too)."""

    speaker: str | None
    response_format: str | None
    responseFormat: str | None


class ListenOptions(TypedDict, total=False):
    """``voice.listen`` options."""

    filename: str
    """Its extension names the format (default ``audio.wav``)."""
    language: str | None
    """ISO-639-1."""


class AgentVoice:
    """One agent's voice, seen from a client (decision 74): the agent's voice configuration is read
    from the cluster (``details()["voice"]``), and the speech / transcription call is made from
    this process through litellm (credentials and ``THREADLINE_MODEL_API_BASE`` from its
    environment); no run, thread or memory is involved."""

    def __init__(self, agent: AgentHandle) -> None:
        self._agent = agent

    def _settings(self) -> Settings:
        """The client's settings; a client over HTTP has none: the process's environment's
        (``THREADLINE_MODEL_API_BASE``, provider keys)."""
        from threadline.config import get_settings

        return self._agent.client.settings or get_settings()

    async def _config(self) -> Voice | None:
        from threadline.runtime.voice import voice_of

        return voice_of((await self._agent.details()).get("voice"))

    async def speak(self, text: str, options: SpeakOptions | None = None) -> bytes:
        """Text to speech: the audio bytes (``options``: ``speaker``, ``response_format`` /
        ``responseFormat``).

        Raises:
            LookupError: no such agent. ConfigurationError: the agent has no speech model.
            ModelCallError: the provider's call failed.
        """
        from threadline.runtime.voice import speak

        opts: SpeakOptions = options or {}
        settings = self._settings()
        return await speak(await self._config(), text, api_base=settings.model_api_base,
                           timeout_s=settings.model_timeout_s, speaker=opts.get("speaker"),
                           response_format=opts.get("response_format", opts.get("responseFormat")))

    async def listen(self, audio: bytes, options: ListenOptions | None = None) -> str:
        """Speech to text: the transcript (``options``: ``filename`` (its extension names the
        format, default ``audio.wav``), ``language``).

        Raises:
            LookupError: no such agent. ConfigurationError: the agent has no transcription model.
            ModelCallError: the provider's call failed.
        """
        from threadline.runtime.voice import listen

        opts: ListenOptions = options or {}
        settings = self._settings()
        return await listen(await self._config(), audio, api_base=settings.model_api_base,
                            timeout_s=settings.model_timeout_s, filename=opts.get("filename", "audio.wav"),
                            language=opts.get("language"))
