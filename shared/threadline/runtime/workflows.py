"""Durable workflows (Mastra's ``createWorkflow`` / ``createStep``; the Agent's
``workflows`` option): typed steps composed in sequence (``then``), in parallel (``parallel``) and
by condition (``branch``), callable by the model as the tool ``workflow-<key>``.

A workflow runs inside the tool call that starts it, on the worker. Every step's start and end are
recorded in a :class:`Journal` (on the worker: PostgreSQL, ``workflow_steps``, keyed by run, tool
call id and the step's path) before the next step starts. A re-executed tool call (the worker
died, the step was taken over) runs the workflow again from its input: a step recorded as done
(succeeded or failed) is not run again, its recorded output (or error) is used; a step recorded
``running`` (it was running when the crash came) runs again — the only repeat there is. A branch
records which of its steps it chose, so a re-execution takes the same path. Decisions 80–83.

Progress goes to the run's stream as ``data-workflow-*`` chunks (transient: not stored with the
response message): ``data-workflow-step-start``, ``data-workflow-step-result`` (``replayed``: the
step's recorded result was used) and ``data-workflow-finish``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from threadline._internal.faults import pause_point
from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError, StaleWriterError
from threadline.events.json_types import JSONValue
from threadline.runtime.tools import (
    DEFAULT,
    AbortSignal,
    CustomWriter,
    Tool,
    ToolContext,
    Unset,
    bounded,
    check_timeout,
    deadline_s,
    to_jsonable,
)
from threadline.runtime.workflow_journal import Entry, Journal, JournalFactory

Schema = type[BaseModel] | dict[str, Any] | None
"""A pydantic model class, a JSON Schema dict, or ``None`` (anything goes)."""


class WorkflowFencedError(StaleWriterError):
    """The journal refused a write: this worker no longer owns the run's step (another took it
    over). The step stops here (the tool runner does not turn this into a tool error)."""

    interrupts_step = True


class JournalUnavailableError(ConnectionError):
    """The journal could not be reached (PostgreSQL away longer than the retries): the step is
    handed back and re-executed, the finished workflow steps are not run again."""

    interrupts_step = True


class WorkflowStepError(RuntimeError):
    """A workflow step raised, or its input or output did not match its schema. The tool call of
    the workflow ends as a tool error naming the step (the agent continues)."""


def _check_schema(schema: object, where: str) -> Schema:
    if schema is None or (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return schema
    if isinstance(schema, dict):
        import jsonschema

        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(f"{where}: not a valid JSON Schema: {exc.message}") from exc
        return schema
    raise ConfigurationError(f"{where}: a schema must be a pydantic model class or a JSON Schema dict")


def validate(schema: Schema, value: object, what: str) -> object:
    """``value`` checked against ``schema``: a pydantic model instance for a model class, the
    value itself for a JSON Schema or ``None``. Raises ``ValueError`` naming ``what``."""
    if schema is None:
        return value
    if isinstance(schema, dict):
        import jsonschema

        error = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
        if error is not None:
            raise ValueError(f"{what}: {error.message}")
        return value
    if isinstance(value, schema):
        return value
    try:
        return schema.model_validate(value)
    except ValidationError as exc:
        raise ValueError(f"{what}: {exc.errors()[:3]}") from exc


@dataclass
class Step:
    """A typed step (Mastra's ``createStep``).

    Attributes:
        id: the step's id (``[a-zA-Z0-9_-]+``), unique in its workflow.
        execute: ``(input, context) -> output`` or ``(input) -> output``, plain or ``async`` (a
            plain one runs in a worker thread); ``input`` is an instance of ``input_schema`` (a
            dict for a JSON Schema), ``context`` a :class:`StepContext`. The output is brought to
            JSON by one rule (:mod:`threadline.runtime.json_form`; one with no JSON form fails
            the step) and must match ``output_schema``.
        input_schema, output_schema: pydantic model classes, JSON Schema dicts, or ``None``.
        description: what the step does.
        timeout_s: seconds the step may run before it fails with a ``ToolTimeoutError``
            (recorded ``failed``; no later step runs); ``DEFAULT``: the run's default tool
            timeout (``THREADLINE_TOOL_TIMEOUT_S``); ``None``: no deadline (decision 218).
    """

    id: str
    execute: Callable[..., object]
    input_schema: Schema = None
    output_schema: Schema = None
    description: str = ""
    timeout_s: float | Unset | None = DEFAULT

    def __post_init__(self) -> None:
        if not self.id or not all(c.isalnum() or c in "_-" for c in self.id):
            raise ConfigurationError(f"workflow step id {self.id!r} must match [a-zA-Z0-9_-]+")
        if not callable(self.execute):
            raise ConfigurationError(f"workflow step {self.id}: execute must be callable")
        self.input_schema = _check_schema(self.input_schema, f"step {self.id}: input_schema")
        self.output_schema = _check_schema(self.output_schema, f"step {self.id}: output_schema")
        check_timeout(self.timeout_s, f"workflow step {self.id}")
        self._takes_context = len(inspect.signature(self.execute).parameters) >= 2


def create_step(*, id: str, execute: Callable[..., object], input_schema: Schema = None,
                output_schema: Schema = None, description: str = "", timeout_s: float | Unset | None = DEFAULT) -> Step:
    """Mastra's ``createStep`` (``timeout_s``: Threadline's, see :class:`Step`)."""
    return Step(id=id, execute=execute, input_schema=input_schema, output_schema=output_schema,
                description=description, timeout_s=timeout_s)


Condition = Callable[[Any], Any]
"""A branch condition: ``(input) -> bool`` (plain or ``async``), given the branch's input."""


@dataclass(frozen=True, slots=True)
class Node:
    """One element of a workflow's graph: ``kind`` is ``"then"`` (one step), ``"parallel"`` (all
    its steps, each given the same input) or ``"branch"`` (the steps whose condition holds)."""

    kind: str
    steps: tuple[Step, ...]
    conditions: tuple[Condition, ...] = ()


class Workflow:
    """A workflow (Mastra's ``createWorkflow``): ``Workflow(id=..., input_schema=...,
    output_schema=...).then(a).parallel([b, c]).branch([(cond, d), (cond2, e)]).then(f).commit()``.

    Data flows as in Mastra: ``then(s)`` gives ``s`` the previous output (the workflow's input
    first); ``parallel`` gives every step the previous output and outputs ``{step_id: output}``;
    ``branch`` runs every step whose condition holds on the previous output (in the order given)
    and outputs ``{step_id: output}`` of those that ran. The workflow's output is the last
    element's, checked against ``output_schema``.

    Raises:
        ConfigurationError: a bad id or schema, a step id used twice, an empty ``parallel`` or
            ``branch``, a change after :meth:`commit`, running an uncommitted or empty workflow.
    """

    def __init__(self, *, id: str, input_schema: Schema = None, output_schema: Schema = None,
                 description: str = "") -> None:
        if not id or not all(c.isalnum() or c in "_-" for c in id):
            raise ConfigurationError(f"workflow id {id!r} must match [a-zA-Z0-9_-]+")
        self.id = id
        self.description = description
        self.input_schema = _check_schema(input_schema, f"workflow {id}: input_schema")
        self.output_schema = _check_schema(output_schema, f"workflow {id}: output_schema")
        self.nodes: list[Node] = []
        self.committed = False

    def _add(self, node: Node) -> Workflow:
        if self.committed:
            raise ConfigurationError(f"workflow {self.id}: committed, no step can be added")
        if not node.steps:
            raise ConfigurationError(f"workflow {self.id}: {node.kind} needs at least one step")
        seen = {s.id for n in self.nodes for s in n.steps}
        for s in node.steps:
            if not isinstance(s, Step):
                raise ConfigurationError(f"workflow {self.id}: steps must be Step instances, got {type(s).__name__}")
            if s.id in seen:
                raise ConfigurationError(f"workflow {self.id}: step id {s.id!r} used twice")
            seen.add(s.id)
        self.nodes.append(node)
        return self

    def then(self, step: Step) -> Workflow:
        """Run ``step`` on the previous output."""
        return self._add(Node("then", (step,)))

    def parallel(self, steps: list[Step]) -> Workflow:
        """Run ``steps`` at once, each on the previous output; output ``{step_id: output}``."""
        return self._add(Node("parallel", tuple(steps)))

    def branch(self, branches: list[tuple[Condition, Step]] | list[list[Any]]) -> Workflow:
        """Run each step whose condition holds on the previous output; output ``{step_id: output}``."""
        pairs = [tuple(b) for b in branches]
        if any(len(p) != 2 or not callable(p[0]) for p in pairs):
            raise ConfigurationError(f"workflow {self.id}: branch takes [(condition, step), ...]")
        return self._add(Node("branch", tuple(p[1] for p in pairs), tuple(p[0] for p in pairs)))

    def commit(self) -> Workflow:
        """Freeze the graph (Mastra's ``.commit()``)."""
        if not self.nodes:
            raise ConfigurationError(f"workflow {self.id}: no steps")
        self.committed = True
        return self

    def __repr__(self) -> str:
        return f"Workflow(id={self.id!r}, nodes={[(n.kind, [s.id for s in n.steps]) for n in self.nodes]})"


def create_workflow(*, id: str, input_schema: Schema = None, output_schema: Schema = None,
                    description: str = "") -> Workflow:
    """Mastra's ``createWorkflow``: a new :class:`Workflow` (chain ``.then/.parallel/.branch``, then
    ``.commit()``)."""
    return Workflow(id=id, input_schema=input_schema, output_schema=output_schema, description=description)


def step_path(index: int, step_id: str) -> str:
    """The journal key of a step: its element's index and its id (``"1/charge"``); a branch's
    choice is recorded under ``"<index>/:branch"``."""
    return f"{index}/{step_id}"


class MemoryJournal:
    """A journal in a dict (tests of the pure logic; a workflow run outside a worker)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.started: list[str] = []

    async def load(self) -> dict[str, Entry]:
        return dict(self.entries)

    async def start(self, path: str) -> None:
        self.started.append(path)
        self.entries[path] = Entry("running")

    async def end(self, path: str, status: str, output: object, error: str | None) -> None:
        self.entries[path] = Entry(status, output, error)


@dataclass
class StepContext:
    """What a running workflow step gets besides its input (Mastra's step ``execute`` arguments).

    Attributes:
        workflow_id, step_id, path: which step runs (``path``: its journal key).
        run_id, thread_id, resource_id, tool_call_id: the agent run and the workflow's tool call.
        idempotency_key: ``run_id:tool_call_id:path``, stable across re-executions; pass it to
            external systems that deduplicate (a step that was running at a crash runs again).
        init_data: the workflow's (validated) input.
        writer: the tool's writer (``await context.writer.custom({"type": "data-…", "data": …})``).
        request_context: the run's request context.
        abort_signal: set when the run is aborted.
    """

    workflow_id: str
    step_id: str
    path: str
    run_id: str
    thread_id: str
    resource_id: str
    tool_call_id: str
    idempotency_key: str
    init_data: object
    writer: CustomWriter
    request_context: dict[str, object] = field(default_factory=dict)
    abort_signal: AbortSignal | None = None
    results: dict[str, JSONValue] = field(default_factory=dict)

    def get_step_result(self, step_id: str) -> JSONValue:
        """The output of an earlier step of this workflow (``None`` if it did not run)."""
        return self.results.get(step_id)


@dataclass
class _Execution:
    workflow: Workflow
    ctx: ToolContext
    journal: Journal
    recorded: dict[str, Entry]
    init_data: object
    results: dict[str, JSONValue] = field(default_factory=dict)

    async def chunk(self, kind: str, **data: object) -> None:
        await self.ctx.writer.custom({"type": f"data-workflow-{kind}", "transient": True,
                                      "data": {"workflowId": self.workflow.id, "toolCallId": self.ctx.tool_call_id,
                                               **data}})

    async def step(self, index: int, step: Step, value: object) -> JSONValue:
        """Run (or replay) one step; return its output. Raises :class:`WorkflowStepError`."""
        path = step_path(index, step.id)
        done = self.recorded.get(path)
        if done is not None and done.status in ("success", "failed"):  # ran before a crash: never twice
            await self.chunk("step-result", stepId=step.id, path=path, status=done.status, replayed=True,
                             **({"output": done.output} if done.status == "success" else {"error": done.error}))
            if done.status == "failed":
                raise WorkflowStepError(f"workflow {self.workflow.id}: step {step.id} failed: {done.error}")
            self.results[step.id] = done.output
            return done.output
        await self.chunk("step-start", stepId=step.id, path=path)
        await self.journal.start(path)
        await pause_point("workflow_step_started", f"{self.ctx.thread_id}/{step.id}")
        try:
            parsed = validate(step.input_schema, value, f"step {step.id}: invalid input")
            sctx = StepContext(workflow_id=self.workflow.id, step_id=step.id, path=path, run_id=self.ctx.run_id,
                               thread_id=self.ctx.thread_id, resource_id=self.ctx.resource_id,
                               tool_call_id=self.ctx.tool_call_id,
                               idempotency_key=f"{self.ctx.idempotency_key}:{path}", init_data=self.init_data,
                               writer=self.ctx.writer, request_context=self.ctx.request_context,
                               abort_signal=self.ctx.abort_signal, results=self.results)
            out = await bounded(call_user(step.execute, parsed, sctx) if step._takes_context
                                else call_user(step.execute, parsed),
                                deadline_s(step.timeout_s, self.ctx.default_timeout_s), f"step {step.id}",
                                self.ctx.abort_signal)
            output = to_jsonable(validate(step.output_schema, to_jsonable(out), f"step {step.id}: invalid output"))
        except Exception as exc:
            if getattr(exc, "interrupts_step", False):
                raise
            error = f"{type(exc).__name__}: {exc}"
            await self.journal.end(path, "failed", None, error)
            await self.chunk("step-result", stepId=step.id, path=path, status="failed", error=error)
            raise WorkflowStepError(f"workflow {self.workflow.id}: step {step.id} failed: {error}") from exc
        await self.journal.end(path, "success", output, None)
        await self.chunk("step-result", stepId=step.id, path=path, status="success", output=output)
        self.results[step.id] = output
        return output

    async def choose(self, index: int, node: Node, value: object) -> list[Step]:
        """A branch's chosen steps: recorded ones, else the conditions evaluated and recorded."""
        path = f"{index}/:branch"
        done = self.recorded.get(path)
        if done is not None and done.status == "success":
            ids = set(done.output or [])
            return [s for s in node.steps if s.id in ids]
        chosen = []
        for cond, s in zip(node.conditions, node.steps, strict=True):
            try:
                holds = await call_user(cond, value)
            except Exception as exc:
                raise WorkflowStepError(f"workflow {self.workflow.id}: the condition of step {s.id} raised: "
                                        f"{type(exc).__name__}: {exc}") from exc
            if holds:
                chosen.append(s)
        await self.journal.end(path, "success", [s.id for s in chosen], None)
        return chosen


async def run_workflow(workflow: Workflow, value: object, ctx: ToolContext, journal: Journal) -> JSONValue:
    """Run ``workflow`` on ``value`` (its input) for the tool call ``ctx``, recording every step in
    ``journal`` and replaying what it recorded; return the output (checked against
    ``output_schema``, JSON-ready).

    Raises:
        ValueError: the input or the output does not match the workflow's schema.
        WorkflowStepError: a step failed (now or, recorded, before a crash).
        WorkflowFencedError, JournalUnavailableError: the step lost its owner or its journal.
    """
    if not workflow.committed:
        raise ConfigurationError(f"workflow {workflow.id}: not committed")
    init = to_jsonable(validate(workflow.input_schema, value, f"workflow {workflow.id}: invalid input"))
    run = _Execution(workflow, ctx, journal, await journal.load(), init)
    current: object = init
    try:
        for index, node in enumerate(workflow.nodes):
            if node.kind == "then":
                current = await run.step(index, node.steps[0], current)
                continue
            steps = list(node.steps) if node.kind == "parallel" else await run.choose(index, node, current)
            outs = await _all([run.step(index, s, current) for s in steps])
            current = {s.id: out for s, out in zip(steps, outs, strict=True)}
        output = to_jsonable(validate(workflow.output_schema, current, f"workflow {workflow.id}: invalid output"))
    except Exception as exc:
        if not getattr(exc, "interrupts_step", False):
            await run.chunk("finish", status="failed", error=str(exc))
        raise
    await run.chunk("finish", status="success", output=output)
    return output


async def _all(runs: list[Awaitable[Any]]) -> list[Any]:
    """Await every run (all of them finish or fail before this returns: each one's end is
    recorded); raise the first interruption, else the first failure, in the given order."""
    outs = await asyncio.gather(*runs, return_exceptions=True)
    errors = [o for o in outs if isinstance(o, BaseException)]
    for err in errors:
        if isinstance(err, asyncio.CancelledError) or getattr(err, "interrupts_step", False):
            raise err
    if errors:
        raise errors[0]
    return outs


def workflow_tool(key: str, workflow: Workflow) -> Tool:
    """The tool ``workflow-<key>`` that runs ``workflow`` (its arguments: the workflow's input).
    The journal comes from ``context.journal`` (the step's; a fresh :class:`MemoryJournal` when
    the tool runs where nothing is recorded)."""
    if not isinstance(workflow, Workflow):
        raise ConfigurationError(f"workflows[{key!r}] must be a Workflow, got {type(workflow).__name__}")
    if not workflow.committed:
        raise ConfigurationError(f"workflow {workflow.id}: call .commit() before giving it to an agent")

    async def execute(input: object, context: ToolContext) -> JSONValue:
        factory = getattr(context, "journal", None)
        journal = factory(context.tool_call_id) if factory is not None else MemoryJournal()
        return await run_workflow(workflow, input, context, journal)

    return Tool(id=f"workflow-{key}", description=workflow.description or f"Run the workflow {workflow.id}.",
                execute=execute, input_schema=workflow.input_schema, timeout_s=None)  # each step has its deadline


def workflow_tools(workflows: Mapping[str, Workflow] | None, where: str) -> dict[str, Tool]:
    """``{key: Workflow}`` as ``{"workflow-<key>": Tool}``.

    Raises:
        ConfigurationError: not a mapping, a value that is not a committed :class:`Workflow`.
    """
    if workflows is None:
        return {}
    if not isinstance(workflows, Mapping):
        raise ConfigurationError(f"{where}: workflows must be a dict {{key: Workflow}}")
    out = {}
    for key, wf in workflows.items():
        t = workflow_tool(str(key), wf)
        out[t.id] = t
    return out


def journal_factory(store: object, run: object, attempt: int) -> JournalFactory | None:
    """The step store's journal for ``run``'s step under ``attempt`` (``None`` for a store that
    records no workflows: they then run unrecorded)."""
    make: Callable[..., Journal] | None = getattr(store, "workflow_journal", None)
    if make is None:
        return None
    return lambda tool_call_id: make(run, attempt, tool_call_id)
