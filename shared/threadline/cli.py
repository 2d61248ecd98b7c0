"""``threadline`` command line: drive a thread from a shell.

    threadline send-message --resource R --thread T "text"      prints the accepted reply (JSON)
    threadline send-message --resource R --thread T - < msg.txt  the text from stdin (or --file PATH)
    threadline subscribe --resource R --thread T [--from-beginning] [--until-finish]
    threadline thread --resource R --thread T                   the stored messages (JSON lines)
    threadline migrate [--contract]                              apply the Postgres migrations
    threadline serve ingress                                     run one instance of a service
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import Annotated

import orjson
import typer

from threadline.cli_common import _fail, _guard, _print, _run
from threadline.cli_voice import register as _register_voice
from threadline.config import get_settings
from threadline.events.chunk_types import ChunkKind

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Drive Threadline threads from a shell.")


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context, version: Annotated[bool, typer.Option("--version", is_eager=True,
                                                help="print the installed version and exit")] = False) -> None:
    """Drive Threadline threads from a shell."""
    if version:
        from importlib.metadata import version as installed

        sys.stdout.write(f"threadline {installed('threadline')}\n")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


Resource = Annotated[str, typer.Option("--resource", "-r", help="resource id (owner of the thread)")]
Thread = Annotated[str, typer.Option("--thread", "-t", help="thread id")]
AgentOpt = Annotated[str, typer.Option("--agent", "-a", envvar="THREADLINE_AGENT",
                                       help="agent id")]


TextArg = Annotated[str | None, typer.Argument(help="the text; - reads it from stdin")]
FileOpt = Annotated[str | None, typer.Option("--file", "-f", help="read the text from this file instead")]


def _text(text: str | None, path: str | None) -> str:
    """The text of a command: the argument, stdin for ``-``, or the file ``--file`` names
    (UTF-8; for texts too long for a command line).

    Raises:
        typer.BadParameter: both or neither given, or the file cannot be read.
    """
    if text is not None and path is not None:
        raise typer.BadParameter("give the text as an argument or with --file, not both")
    if text is None and path is None:
        raise typer.BadParameter("no text: give it as an argument, - to read stdin, or --file PATH")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise typer.BadParameter(f"--file {path}: {exc}") from None
    if text == "-":
        return sys.stdin.read()
    return text or ""


def _attrs(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--attr takes key=value, got {pair!r}")
        out[key] = value
    return out


async def _send(kind: str, text: object, resource: str, thread: str, agent: str, **kw: object) -> None:
    from threadline.client.client import ThreadlineClient

    async with ThreadlineClient() as tl:
        method = getattr(tl, kind)
        result = await method(text, resource_id=resource, thread_id=thread, agent_id=agent, **kw)
        _print(await result.accepted)
        if result.persisted is not None:
            _print(await result.persisted)


@app.command("send-message")
def send_message(resource: Resource, thread: Thread, text: TextArg = None, file: FileOpt = None,
                 agent: AgentOpt = "support-agent",
                 if_active: Annotated[str, typer.Option(help="deliver|persist|discard")] = "deliver",
                 if_idle: Annotated[str, typer.Option(help="wake|persist|discard")] = "wake",
                 max_steps: Annotated[int | None, typer.Option(help="max_steps of a woken run")] = None) -> None:
    """Send a user message to a thread (Mastra's ``sendMessage``); print the accepted reply."""
    idle: dict[str, object] = {"behavior": if_idle}
    if max_steps is not None:
        idle["stream_options"] = {"max_steps": max_steps}
    _run(_send("send_message", _text(text, file), resource, thread, agent, if_active={"behavior": if_active},
                      if_idle=idle))


@app.command("send-signal")
def send_signal(resource: Resource, thread: Thread, contents: TextArg = None, file: FileOpt = None,
                agent: AgentOpt = "support-agent",
                type: Annotated[str, typer.Option("--type", help="user|state|reactive|notification")] = "reactive",
                tag_name: Annotated[str | None, typer.Option("--tag-name", help="XML tag the model sees")] = None,
                attribute: Annotated[list[str] | None, typer.Option("--attr", help="k=v, repeatable")] = None,
                if_active: Annotated[str, typer.Option(help="deliver|persist|discard")] = "deliver",
                if_idle: Annotated[str, typer.Option(help="wake|persist|discard")] = "wake") -> None:
    """Send a signal to a thread (Mastra's ``sendSignal``); print the accepted reply."""
    signal = {"type": type, "contents": _text(contents, file), "attributes": _attrs(attribute)}
    if tag_name:
        signal["tag_name"] = tag_name
    _run(_send("send_signal", signal, resource, thread, agent, if_active={"behavior": if_active},
                      if_idle={"behavior": if_idle}))


@app.command("send-state-signal")
def send_state_signal(contents: str, resource: Resource, thread: Thread, agent: AgentOpt = "support-agent",
                      lane: Annotated[str, typer.Option("--id", help="state lane, e.g. browser")] = "state",
                      cache_key: Annotated[str, typer.Option("--cache-key", help="producer's key of this value")] = "",
                      mode: Annotated[str, typer.Option(help="snapshot|delta")] = "snapshot",
                      value: Annotated[str | None, typer.Option(help="JSON value (snapshot) or delta")] = None,
                      if_idle: Annotated[str, typer.Option(help="wake|persist|discard")] = "wake") -> None:
    """Send a state signal (Mastra's ``sendStateSignal``); prints the accepted or skipped reply."""
    state: dict[str, object] = {"id": lane, "cache_key": cache_key or contents, "contents": contents, "mode": mode}
    if value is not None:
        try:
            state["value" if mode == "snapshot" else "delta"] = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise typer.BadParameter(f"--value must be JSON: {exc}") from None
    _run(_send("send_state_signal", state, resource, thread, agent, if_idle={"behavior": if_idle}))


@app.command()
def notify(summary: str, resource: Resource, thread: Thread, agent: AgentOpt = "support-agent",
           source: Annotated[str, typer.Option(help="e.g. github")] = "cli",
           kind: Annotated[str, typer.Option(help="e.g. ci-status")] = "note",
           priority: Annotated[str, typer.Option(help="low|medium|high|urgent")] = "medium",
           dedupe_key: Annotated[str | None, typer.Option("--dedupe-key")] = None,
           coalesce_key: Annotated[str | None, typer.Option("--coalesce-key")] = None) -> None:
    """Send a notification to the thread's inbox (Mastra's ``sendNotificationSignal``)."""

    async def main() -> None:
        from threadline.client.client import ThreadlineClient

        note = {"source": source, "kind": kind, "summary": summary, "priority": priority,
                "dedupe_key": dedupe_key, "coalesce_key": coalesce_key}
        async with ThreadlineClient() as tl:
            _print(await tl.send_notification_signal({k: v for k, v in note.items() if v is not None},
                                                     resource_id=resource, thread_id=thread, agent_id=agent))

    _run(main())


STATUSES = ("pending", "delivered", "seen", "dismissed", "archived", "discarded", "failed")
"""The statuses of an inbox record."""


@app.command()
def inbox(resource: Resource, thread: Thread,
          status: Annotated[str | None, typer.Option(help="|".join(STATUSES))] = None,
          mark: Annotated[str | None, typer.Option(help="seen|dismissed|archived: applied to --id")] = None,
          read: Annotated[bool, typer.Option("--read", help="print the --id record with its payload")] = False,
          record_id: Annotated[str | None, typer.Option("--id", help="record id for --mark / --read")] = None) -> None:
    """List the thread's inbox records (JSON lines), read one (with its payload), or mark one
    seen / dismissed / archived."""

    async def main() -> None:
        from threadline.store import inbox_access as access
        from threadline.store.db import connect

        if status is not None and status not in STATUSES:
            _fail(f"--status takes {'|'.join(STATUSES)}, not {status!r}")
        if mark is not None and mark not in access.MARKS:
            _fail(f"--mark takes {'|'.join(access.MARKS)}, not {mark!r}")
        if (mark or read) and not record_id:
            _fail("--mark and --read need --id")
        record = record_id or ""  # checked just above whenever it is used
        where = {"resource_id": resource, "thread_id": thread}
        settings = get_settings()  # also behind a transaction-pooling PgBouncer (statement cache off)
        conn = await connect(settings.pg_dsn, statement_cache=settings.pg_use_statement_cache)
        try:
            if mark or read:
                found = await (access.mark(conn, record_id=record, status=mark, **where) if mark
                               else access.read_record(conn, record_id=record, **where))
                if found is None:
                    _fail(f"no record {record_id!r} in thread {thread!r} of resource {resource!r}")
                # the marked (or read) record, with its payload when --read
                _print(found if not (mark and read) else await access.read_record(conn, record_id=record, **where))
                return
            for r in await access.list_records(conn, status=status, **where):
                _print(r)
        finally:
            await conn.close()

    _run(main())


@app.command("queue-message")
def queue_message(resource: Resource, thread: Thread, text: TextArg = None, file: FileOpt = None,
                  agent: AgentOpt = "support-agent") -> None:
    """Queue a user message as the thread's next turn (Mastra's ``queueMessage``)."""
    _run(_send("queue_message", _text(text, file), resource, thread, agent))


@app.command()
def abort(resource: Resource, thread: Thread,
          run_id: Annotated[str | None, typer.Option("--run-id", help="only this run")] = None) -> None:
    """Abort the thread's active run; queued messages still run (Mastra's ``subscription.abort()``)."""

    async def main() -> None:
        from threadline.client.client import ThreadlineClient

        async with ThreadlineClient() as tl:
            _print({"type": "aborted", "aborted": await tl.abort(resource_id=resource, thread_id=thread,
                                                                run_id=run_id)})

    _run(main())


RunIdOpt = Annotated[str, typer.Option("--run-id", help="the run holding the call")]
CallOpt = Annotated[str, typer.Option("--tool-call-id", help="the held call (its tool-call-approval chunk's toolCallId)")]


@app.command("approve-tool-call")
def approve_tool_call(resource: Resource, thread: Thread, run_id: RunIdOpt, tool_call_id: CallOpt) -> None:
    """Approve a tool call the run holds for approval: the tool runs once, the run goes on
    (Mastra's ``approveToolCall``). Prints ``{"type": "resolved", "resolved", "status"}``."""
    _run(_answer_call(resource, thread, run_id, tool_call_id, approved=True, reason=None))


@app.command("decline-tool-call")
def decline_tool_call(resource: Resource, thread: Thread, run_id: RunIdOpt, tool_call_id: CallOpt,
                      reason: Annotated[str | None, typer.Option(help="what the model reads")] = None) -> None:
    """Decline a held tool call: it never runs, the model reads the reason (Mastra's ``declineToolCall``)."""
    _run(_answer_call(resource, thread, run_id, tool_call_id, approved=False, reason=reason))


async def _answer_call(resource: str, thread: str, run_id: str, tool_call_id: str, *, approved: bool,
                       reason: str | None) -> None:
    from threadline.client.client import ThreadlineClient

    async with ThreadlineClient() as tl:
        where = {"resource_id": resource, "thread_id": thread, "run_id": run_id, "tool_call_id": tool_call_id}
        answer = (await tl.approve_tool_call(**where) if approved else await tl.decline_tool_call(**where, reason=reason))
    _print(answer.model_dump(include={"type", "resolved", "status", "run_id", "tool_call_id"}))


@app.command()
def subscribe(resource: Resource, thread: Thread,
              from_beginning: Annotated[bool, typer.Option("--from-beginning")] = False,
              from_offset: Annotated[int | None, typer.Option("--from-offset")] = None,
              until_finish: Annotated[bool, typer.Option("--until-finish",
                                                         help="exit after the first finish chunk")] = False,
              timeout: Annotated[float, typer.Option(help="give up after this many seconds (0 = never)")] = 0) -> None:
    """Print the thread's chunks as JSON lines (Mastra's ``subscribeToThread``)."""

    async def main() -> None:
        from threadline.client.client import ThreadlineClient

        async with ThreadlineClient() as tl:
            sub = await tl.subscribe_to_thread(resource, thread, from_beginning=from_beginning,
                                               from_offset=from_offset)
            sys.stderr.write(orjson.dumps({"type": "subscribed", "topic": sub.topic}).decode() + "\n")
            sys.stderr.flush()
            try:
                async def pump() -> None:
                    async for chunk in sub.stream:
                        _print(chunk)
                        if until_finish and chunk["type"] == ChunkKind.FINISH:
                            return
                await (asyncio.wait_for(pump(), timeout) if timeout else pump())
            except TimeoutError:
                raise typer.Exit(3) from None  # --timeout passed: no error line, exit 3
            finally:
                await sub.unsubscribe()

    with contextlib.suppress(KeyboardInterrupt):
        _run(main())


@app.command("thread")
def show_thread(resource: Resource, thread: Thread) -> None:
    """Print the thread's stored messages (from Postgres) as JSON lines."""

    async def main() -> None:
        from threadline.store import queries
        from threadline.store.db import connect

        settings = get_settings()
        conn = await connect(settings.pg_dsn, statement_cache=settings.pg_use_statement_cache)
        try:
            if await queries.thread_owner(conn, thread) != resource:
                _fail(f"no thread {thread!r} for resource {resource!r}")
            for m in await queries.list_messages(conn, resource_id=resource, thread_id=thread):
                _print({"id": m["id"], "runId": m["run_id"], "role": m["role"], "type": m["type"],
                        "content": m["content"], "createdAt": m["created_at"]})
        finally:
            await conn.close()

    _run(main())


@app.command()
def scores(run_id: Annotated[str, typer.Argument(help="the run whose scores to print")]) -> None:
    """Print a finished run's stored scores (its agent's scorers, decision 71) as JSON lines."""

    async def main() -> None:
        from threadline.store.db import connect
        from threadline.store.scores import list_scores

        settings = get_settings()
        conn = await connect(settings.pg_dsn, statement_cache=settings.pg_use_statement_cache)
        try:
            for row in await list_scores(conn, run_id):
                _print(row)
        finally:
            await conn.close()

    _run(main())


@app.command()
def topics(chunks_only: Annotated[bool, typer.Option("--chunks", help="only chunk topics (per-thread, shared)")] = False) -> None:
    """List this cluster's topics (Kafka admin API), one JSON line each."""

    async def main() -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        settings = get_settings()
        from threadline.kafka.security import client_kwargs

        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, **client_kwargs(settings))
        await admin.start()
        try:
            names = sorted(await admin.list_topics())
        finally:
            await admin.close()
        prefix = f"{settings.topic_prefix}.chunks" if chunks_only else f"{settings.topic_prefix}."
        for name in names:  # "<prefix>.chunks": the per-thread "<prefix>.chunks.…" and "<prefix>.chunks-shared"
            if name.startswith(prefix):
                _print({"topic": name})

    _run(main())


@app.command()
def schemas(out: Annotated[str, typer.Option(help="directory to write <name>.json into")] = "docs/schemas") -> None:
    """Write the JSON Schema of every public event (the contract) to ``out``."""
    from pathlib import Path

    from threadline.events.schemas import schemas as all_schemas

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, schema in all_schemas().items():
        (folder / f"{name}.json").write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    _print({"written": sorted(all_schemas()), "to": str(folder)})


@app.command()
def migrate(contract: Annotated[bool, typer.Option(
        "--contract", help="also drop what only the previous release used: once none of its processes runs")] = False,
) -> None:
    """Apply pending Postgres migrations: the expand ones (what every service start applies), and
    with ``--contract`` the contract ones too (docs/decisions.md, 113)."""
    from threadline.store.migrate import migrate as run_migrations

    with _guard():
        applied = run_migrations(get_settings().pg_dsn, contract=contract)
    _print({"applied": applied})


ServiceName = Annotated[str, typer.Argument(help="ingress, run_orchestrator, processor_worker or notification_scheduler")]


@app.command()
def serve(name: ServiceName) -> None:
    """Run one instance of a service until SIGTERM (the same as ``python -m threadline.services.<name>``).

    It reads its settings from the THREADLINE_* environment variables, like the services.
    """
    import runpy

    from threadline.services import ALL as NAMES

    module = name.replace("-", "_")
    if module not in NAMES:
        _fail(f"unknown service {name!r}; one of: {', '.join(NAMES)}", 2)
    runpy.run_module(f"threadline.services.{module}", run_name="__main__", alter_sys=True)


_register_voice(app)


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from threadline.logging import configure

    configure(level=os.environ.get("THREADLINE_CLI_LOG_LEVEL", "WARNING"))
    # a broker that cannot be reached is reported once, as the command's error line
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    app()


if __name__ == "__main__":
    main()
