"""The processor-worker's step store on PostgreSQL: one statement (one round trip) to begin a step
and one to end it, the same claims and fences as before, and bounded connection use — a step that
has to wait for a connection waits, it is never failed nor re-executed.

On ``own_cluster``: the step results published here would otherwise reach the session's running
orchestrator, which advances the run (its next step claimed: ``next_seq`` moved on by a block)
while a test reads it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import structlog.testing

from tests.integration.pg import leased_run
from threadline.errors import StaleWriterError
from threadline.flows.publish import Outbox
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer
from threadline.runtime.step.ports import Busy, Claimed, Continue, Finish, Skipped, StepRecord
from threadline.store.db import Database, PoolTimeoutError
from threadline.topics import Topics
from threadline.worker.keepalive import KeepAlive
from threadline.worker.step_store import PgStepStore

OWNER = "worker-a:1:x"


class CountingDb:
    """A :class:`Database` that counts the statements sent on its connections (asyncpg's query
    logger: one entry per statement; with a pool of one, every statement is on one connection)
    and the most connections held at once."""

    def __init__(self, db: Database) -> None:
        self.db, self.statements, self.held, self.most_held = db, 0, 0, 0

    @property
    def max_size(self) -> int:
        return self.db.max_size

    def _log(self, query: Any) -> None:
        self.statements += 1

    @contextlib.asynccontextmanager
    async def connection(self, *, patient: bool = False):
        async with self.db.connection(patient=patient) as conn:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
            conn.add_query_logger(self._log)
            try:
                yield conn
            finally:
                conn.remove_query_logger(self._log)
                self.held -= 1

    async def execute(self, *args: Any) -> str:
        return await self.db.execute(*args)


async def _run(db: Database, *, step: int = 0, signals: tuple[str, ...] = (), agent: str = "agent") -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    r = {"run_id": f"run-ss-{tag}", "thread_id": f"th-ss-{tag}", "resource_id": "res-ss"}
    async with db.connection() as conn:
        await leased_run(conn, **r, agent_id=agent, step=step, steps_done=step)
        for i, mode in enumerate(signals):
            await conn.execute(
                "INSERT INTO signals (id, thread_id, resource_id, type, mode, status, run_id, payload) "
                "VALUES ($1, $2, $3, 'user', $4, 'pending', $5, $6)", f"sig-{tag}-{i}", r["thread_id"],
                r["resource_id"], mode, r["run_id"], {"id": f"sig-{tag}-{i}", "contents": mode})
    return r


async def _val(db: Database, query: str, *args: Any) -> Any:
    row = await db.fetchrow(query, *args)
    return None if row is None else row[0]


def _msg(mid: str, role: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": role, "content": {"format": 2, "parts": [{"type": "text", "text": text}]}}


@contextlib.asynccontextmanager
async def _store(own_cluster, db: Any, **kw: Any):
    topics = Topics(own_cluster.prefix)
    admin = TopicAdmin(own_cluster.bootstrap)
    await admin.start()
    try:
        await admin.ensure([topics.step_results])
    finally:
        await admin.stop()
    async with Producer(own_cluster.bootstrap) as producer:
        yield PgStepStore(db=db, outbox=Outbox(db, producer), topics=topics, owner=OWNER, lease_ttl_s=60, **kw)


async def test_begin_is_one_statement_and_loads_what_the_step_reads(own_cluster):
    async with Database(own_cluster.dsn, max_size=1) as db:
        r = await _run(db, signals=("wake", "deliver"))
        warm = await _run(db)
        old = f"msg-old-{uuid.uuid4().hex[:8]}"
        await db.execute("INSERT INTO messages (id, thread_id, resource_id, run_id, role, content) "
                         "VALUES ($1, $2, $3, 'earlier-run', 'user', $4)", old, r["thread_id"], r["resource_id"],
                         _msg(old, "user", "hello")["content"])
        counting = CountingDb(db)
        store = PgStepStore(db=counting, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60)
        await store.begin(warm["run_id"], step=0, epoch=3)  # asyncpg learns the result's types once per connection
        counting.statements = 0
        begun = await store.begin(r["run_id"], step=0, epoch=3)
        assert counting.statements == 1
        assert isinstance(begun, Claimed)
        assert (begun.inputs.attempt, begun.inputs.seq_base, begun.inputs.restarted) == (1, 0, False)
        created = await _val(db, "SELECT created_at FROM messages WHERE id = $1", old)
        assert begun.inputs.history == [{"id": old, "role": "user", "content": _msg(old, "user", "hello")["content"],
                                         "createdAt": created.isoformat(), "threadId": r["thread_id"],
                                         "resourceId": r["resource_id"]}]
        assert [s.payload["contents"] for s in begun.inputs.signals] == ["wake"]  # deliveries join at step 1
        drained = await db.fetch("SELECT mode, drained_step FROM signals WHERE run_id = $1 ORDER BY seq", r["run_id"])
        assert [(d["mode"], d["drained_step"]) for d in drained] == [("wake", 0), ("deliver", None)]
        run = await db.fetchrow("SELECT step_started, step_owner, next_seq FROM runs WHERE run_id = $1", r["run_id"])
        assert (run["step_started"], run["step_owner"], run["next_seq"]) == (True, OWNER, 1_000_000)
        # the same task again: this worker owns the attempt, so it is re-executed under attempt 2
        again = await store.begin(r["run_id"], step=0, epoch=3)
        assert isinstance(again, Claimed) and again.inputs.restarted and again.inputs.attempt == 2
        assert isinstance(await store.begin(r["run_id"], step=1, epoch=3), Skipped)
        assert isinstance(await store.begin(r["run_id"], step=0, epoch=2), Skipped)
        assert begun.inputs.overrides == {}  # none stored for its agent


async def test_step_0s_claim_reads_the_agents_editor_overrides_in_the_same_statement(own_cluster):
    """Decision 95: the stored editor overrides come with step 0's claim, no statement of their own."""
    agent = f"agent-ov-{uuid.uuid4().hex[:8]}"
    stored = {"instructions": "Answer in French.", "tools": {"add": {"description": "sum two numbers"}}}
    async with Database(own_cluster.dsn, max_size=1) as db:
        await db.execute("INSERT INTO agent_overrides (agent_id, overrides) VALUES ($1, $2)", agent, stored)
        first, later = await _run(db, agent=agent), await _run(db, step=1, agent=agent)
        counting = CountingDb(db)
        store = PgStepStore(db=counting, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60)
        await store.begin((await _run(db))["run_id"], step=0, epoch=3)  # asyncpg learns the result's types
        counting.statements = 0
        begun = await store.begin(first["run_id"], step=0, epoch=3)
        assert counting.statements == 1
        assert isinstance(begun, Claimed) and begun.inputs.overrides == stored
        step1 = await store.begin(later["run_id"], step=1, epoch=3)
        assert isinstance(step1, Claimed) and step1.inputs.overrides is None  # read once, at step 0


async def test_begin_waits_for_a_live_owner_and_takes_over_a_still_heartbeat(own_cluster):
    async with Database(own_cluster.dsn, max_size=2) as db:
        r = await _run(db)
        beat = await _val(db, "UPDATE runs SET step_started = true, step_owner = 'worker-b:2:y', "
                                 "step_heartbeat = now() WHERE run_id = $1 RETURNING step_heartbeat", r["run_id"])
        await db.execute("INSERT INTO model_outputs (run_id, step, attempt, output) VALUES ($1, 0, 1, $2)",
                         r["run_id"], {"chunks": [], "usage": None, "finish_reason": "stop"})
        store = PgStepStore(db=db, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60)
        busy = await store.begin(r["run_id"], step=0, epoch=3)
        assert isinstance(busy, Busy) and busy.heartbeat == beat
        taken = await store.begin(r["run_id"], step=0, epoch=3, takeover_from=busy.heartbeat)
        assert isinstance(taken, Claimed) and taken.inputs.restarted and taken.inputs.attempt == 2
        assert taken.inputs.recorded == {"chunks": [], "usage": None, "finish_reason": "stop"}
        # the lease moved on: the step is no longer this run's to execute
        await db.execute("UPDATE runs SET step_started = false WHERE run_id = $1", r["run_id"])
        await db.execute("UPDATE thread_leases SET epoch = 4 WHERE thread_id = $1", r["thread_id"])
        assert isinstance(await store.begin(r["run_id"], step=0, epoch=3), Skipped)


async def test_save_is_one_statement_and_fenced(own_cluster):
    async with Database(own_cluster.dsn, max_size=1) as db:
        r = await _run(db, signals=("wake", "deliver"))
        counting = CountingDb(db)
        async with _store(own_cluster, counting) as store:
            warm = await store.begin((await _run(db))["run_id"], step=0, epoch=3)
            assert isinstance(warm, Claimed)  # the connection's first save reads the statement's types
            await store.save(StepRecord(run=warm.run, attempt=1, outcome=Continue("tool-calls"), entries=[],
                                        consumed=None, state={}, next_seq=7, usage={}))
            begun = await store.begin(r["run_id"], step=0, epoch=3)
            assert isinstance(begun, Claimed)
            tag = uuid.uuid4().hex[:8]
            entries = [(_msg(f"u-{tag}", "user", "hi"), "input"), (_msg(f"a-{tag}", "assistant", "yo"), "response"),
                       (_msg(f"s-{tag}", "system", "sys"), "input"), (_msg(f"m-{tag}", "user", "old"), "memory")]
            record = StepRecord(run=begun.run, attempt=begun.inputs.attempt, outcome=Continue("tool-calls"),
                                entries=entries, consumed=None, state={"steps": [1]}, next_seq=7, text="yo",
                                usage={"totalTokens": 3})
            counting.statements = 0
            await store.save(record)
            assert counting.statements == 1  # the result is published from memory, not read back
            rows = await db.fetch("SELECT id FROM messages WHERE run_id = $1 ORDER BY position", r["run_id"])
            assert [x["id"] for x in rows] == [f"u-{tag}", f"a-{tag}"]
            run = await db.fetchrow("SELECT steps_done, next_seq, state, status FROM runs WHERE run_id = $1",
                                    r["run_id"])
            assert (run["steps_done"], run["next_seq"], run["state"], run["status"]) == (1, 7, {"steps": [1]},
                                                                                       "running")
            statuses = await db.fetch("SELECT status FROM signals WHERE run_id = $1", r["run_id"])
            assert {s["status"] for s in statuses} == {"consumed"}  # consumed=None: all that was pending
            for _ in range(100):  # marked published by the batched marker
                if await _val(db, "SELECT published_at IS NOT NULL FROM outbox WHERE key LIKE $1",
                                     f"%{r['thread_id']}"):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("step result never marked published")
            # a later attempt took the step over: this attempt's save is fenced out, nothing written
            await db.execute("UPDATE runs SET attempt = 2, steps_done = 0 WHERE run_id = $1", r["run_id"])
            with pytest.raises(StaleWriterError):
                await store.save(record)
            assert await _val(db, "SELECT steps_done FROM runs WHERE run_id = $1", r["run_id"]) == 0
            await db.execute("UPDATE runs SET attempt = 1 WHERE run_id = $1", r["run_id"])
            await db.execute("UPDATE thread_leases SET epoch = 4 WHERE thread_id = $1", r["thread_id"])
            with pytest.raises(StaleWriterError):  # the run lost the thread
                await store.save(record)


async def test_steps_waiting_for_a_connection_are_delayed_never_failed_nor_re_executed(own_cluster):
    # a pool of 2 with a 10 ms acquire timeout, and 4 step slots: most acquires time out at first
    async with Database(own_cluster.dsn, max_size=2) as db:
        runs = [await _run(db) for _ in range(40)]
        db._acquire_timeout_s = 0.01  # after the pool connected (create_pool uses it as the connect timeout)
        with pytest.raises(PoolTimeoutError):  # what an impatient step operation met
            async with db.connection(), db.connection(), db.connection():
                pass
        counting = CountingDb(db)
        store = PgStepStore(db=counting, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60, connections=4)
        begun = await asyncio.gather(*(store.begin(r["run_id"], step=0, epoch=3) for r in runs))
        assert all(isinstance(b, Claimed) for b in begun)
        attempts = await db.fetch("SELECT attempt FROM runs WHERE run_id = ANY($1::text[])",
                                  [r["run_id"] for r in runs])
        assert sorted(a["attempt"] for a in attempts) == [1] * 40


async def test_a_worker_holds_no_more_connections_than_its_step_slots(own_cluster):
    async with Database(own_cluster.dsn, max_size=10) as db:
        runs = [await _run(db) for _ in range(40)]
        counting = CountingDb(db)
        store = PgStepStore(db=counting, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60)
        begun = await asyncio.gather(*(store.begin(r["run_id"], step=0, epoch=3) for r in runs))
        assert all(isinstance(b, Claimed) for b in begun)
        assert 1 <= counting.most_held <= 10 - 3  # the pool less the connections left to the rest of the worker


async def test_a_saved_step_is_no_longer_kept_alive(own_cluster):
    """A keep-alive beat that comes after the step's end is committed (but before the executor
    forgets the step) found the heartbeat fenced out by the ended run and warned "step taken over"
    for a step that simply finished: the store now hands the run back to the keep-alive as soon as
    the save commits."""
    async with Database(own_cluster.dsn, max_size=2) as db:
        r = await _run(db)
        ka = KeepAlive(db, OWNER, beat_s=3600, renew_every_s=3600, lease_ttl_s=120)
        try:
            async with _store(own_cluster, db, on_saved=ka.discard) as store:
                begun = await store.begin(r["run_id"], step=0, epoch=3)
                assert isinstance(begun, Claimed)
                ka.add(begun.run, SimpleNamespace(attempt=begun.inputs.attempt))
                await ka.beat(renew=True)  # in flight: beats and renews
                assert ka._steps[r["run_id"]].owned
                record = StepRecord(run=begun.run, attempt=begun.inputs.attempt, outcome=Finish("stop"),
                                    entries=[(_msg(f"a-{r['run_id']}", "assistant", "done"), "response")],
                                    consumed=None, state={}, next_seq=3, text="done", usage={"totalTokens": 1})
                await store.save(record)
                with structlog.testing.capture_logs() as logs:
                    await ka.beat(renew=True)  # the beat that used to race the end of the step
        finally:
            await ka.close()
        assert r["run_id"] not in ka._steps
        assert not [e for e in logs if e["log_level"] == "warning"], logs
        assert await _val(db, "SELECT status FROM runs WHERE run_id = $1", r["run_id"]) == "finished"


async def test_save_and_continue_is_one_statement_claiming_the_next_step_like_the_orchestrator(own_cluster):
    """``continues``: the step is stored and the run's next step claimed for this worker in the same
    statement, with the claim's own fences (attempt 1, started, owner, heartbeat, a block of
    sequence numbers) and the deliveries drained; a redelivered task of the stored step claims the
    continued step (decision 32); a fenced-out store claims nothing (decision 31)."""
    async with Database(own_cluster.dsn, max_size=1) as db:
        r = await _run(db, signals=("wake", "deliver"))
        warm = await _run(db)
        counting = CountingDb(db)
        async with _store(own_cluster, counting, continues=True) as store:
            for run_id in (warm["run_id"], r["run_id"]):
                begun = await store.begin(run_id, step=0, epoch=3)
                assert isinstance(begun, Claimed)
                record = StepRecord(run=begun.run, attempt=begun.inputs.attempt, outcome=Continue("tool-calls"),
                                    entries=[], consumed=[s.id for s in begun.inputs.signals], state={"steps": [1]},
                                    next_seq=7, usage={"totalTokens": 3})
                counting.statements = 0
                await store.save(record)
            assert counting.statements == 1  # store, advance and claim: one round trip
            nxt = store.take_next(r["run_id"])
            assert isinstance(nxt, Claimed) and store.take_next(r["run_id"]) is None
            assert (nxt.run.step, nxt.run.next_seq, nxt.run.state.steps) == (1, 7, [1])
            # the next step goes on with the stored step's own objects (decision 102); what was
            # stored stays as stored, for a step that cannot run and writes it back
            assert nxt.run.state.live and nxt.run.state.steps is record.state["steps"]
            record.state["steps"].append(2)
            assert nxt.run.stored() == {"steps": [1]} and nxt.run.stored() is not nxt.run.stored()
            assert (nxt.inputs.attempt, nxt.inputs.seq_base, nxt.inputs.restarted) == (1, 7, False)
            assert [s.payload["contents"] for s in nxt.inputs.signals] == ["deliver"]  # joins at the next step
            run = await db.fetchrow("SELECT step, steps_done, attempt, step_started, step_owner, next_seq, "
                                    "continued_from FROM runs WHERE run_id = $1", r["run_id"])
            assert dict(run) == {"step": 1, "steps_done": 1, "attempt": 1, "step_started": True, "step_owner": OWNER,
                                 "next_seq": 7 + 1_000_000, "continued_from": 0}
            # the task of step 0, redelivered to another worker while this one's heartbeat moves: busy
            other = PgStepStore(db=db, outbox=None, topics=Topics(own_cluster.prefix), owner="worker-b:2:y",  # type: ignore[arg-type]
                                lease_ttl_s=60)
            busy = await other.begin(r["run_id"], step=0, epoch=3)
            assert isinstance(busy, Busy)
            taken = await other.begin(r["run_id"], step=0, epoch=3, takeover_from=busy.heartbeat)
            assert isinstance(taken, Claimed) and taken.run.step == 1 and taken.inputs.attempt == 2
            assert taken.inputs.restarted
            # once the chain ended (the run finished in the store), the task is a stale one
            await db.execute("UPDATE runs SET status = 'finished', steps_done = 2 WHERE run_id = $1", r["run_id"])
            assert isinstance(await other.begin(r["run_id"], step=0, epoch=3), Skipped)
            # a fenced-out store (the run lost the thread) claims nothing
            s = await _run(db)
            begun = await store.begin(s["run_id"], step=0, epoch=3)
            assert isinstance(begun, Claimed)
            await db.execute("UPDATE thread_leases SET epoch = 4 WHERE thread_id = $1", s["thread_id"])
            with pytest.raises(StaleWriterError):
                await store.save(StepRecord(run=begun.run, attempt=1, outcome=Continue("tool-calls"), entries=[],
                                            consumed=[], state={}, next_seq=2, usage={}))
            assert store.take_next(s["run_id"]) is None
            row = await db.fetchrow("SELECT step, steps_done FROM runs WHERE run_id = $1", s["run_id"])
            assert (row["step"], row["steps_done"]) == (0, 0)


class RefusingOnceDb(CountingDb):
    """The first connection is refused, as while PostgreSQL restarts (chaos seed 1: a tool's result
    store met the restart, the step was handed back and its re-execution ran the tool again)."""

    refused = 0

    @contextlib.asynccontextmanager
    async def connection(self, *, patient: bool = False):
        if not self.refused:
            self.refused += 1
            raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
        async with self.db.connection(patient=patient) as conn:
            yield conn


async def test_a_tool_result_is_stored_through_a_postgres_restart_not_left_to_a_rerun(own_cluster):
    async with Database(own_cluster.dsn, max_size=2) as db:
        r = await _run(db)
        flaky = RefusingOnceDb(db)
        store = PgStepStore(db=flaky, outbox=None, topics=Topics(own_cluster.prefix), owner=OWNER,  # type: ignore[arg-type]
                            lease_ttl_s=60)
        run = SimpleNamespace(run_id=r["run_id"])
        with structlog.testing.capture_logs() as logs:
            await store.save_tool_result(run, "call-1", "chaos_effect", {"done": 1}, None)  # type: ignore[arg-type]
        assert flaky.refused == 1
        assert any(e["event"] == "retrying a tool result's store" for e in logs)
        assert await store.tool_results(run, ["call-1"]) == {"call-1": ({"done": 1}, None)}  # type: ignore[arg-type]


async def test_recording_a_tool_steps_output_is_one_statement_fenced_by_lease_attempt_and_owner(own_cluster):
    # decision 88: the record, the owner's confirmation and the calls that already ran, in one call
    async with Database(own_cluster.dsn, max_size=1) as db:
        r = await _run(db)
        counting = CountingDb(db)
        async with _store(own_cluster, counting) as store:
            begun = await store.begin(r["run_id"], step=0, epoch=3)
            assert isinstance(begun, Claimed)
            run, attempt = begun.run, begun.inputs.attempt
            await store.save_tool_result(run, "call-old", "noop", {"ok": 1}, None)
            await db.execute("UPDATE runs SET step_heartbeat = now() - interval '1 hour' WHERE run_id = $1",
                             r["run_id"])
            output = {"chunks": [{"type": "tool-call", "payload": {"toolCallId": "call-new"}}], "usage": None,
                      "finish_reason": "tool-calls"}
            counting.statements = 0
            done = await store.record_model_output(run, attempt, output, ["call-old", "call-new"])
            assert counting.statements == 1
            assert done == {"call-old": ({"ok": 1}, None)}
            assert await _val(db, "SELECT output FROM model_outputs WHERE run_id = $1 AND step = 0",
                              r["run_id"]) == output
            assert await _val(db, "SELECT step_heartbeat > now() - interval '1 minute' FROM runs WHERE run_id = $1",
                              r["run_id"])  # confirmed as a heartbeat does
            stale = {**output, "finish_reason": "stale"}
            await db.execute("UPDATE runs SET step_owner = 'worker-b:1:y' WHERE run_id = $1", r["run_id"])
            with pytest.raises(StaleWriterError):  # another worker took the step over
                await store.record_model_output(run, attempt, stale, [])
            await db.execute("UPDATE runs SET step_owner = $2, attempt = $3 WHERE run_id = $1", r["run_id"], OWNER,
                             attempt + 1)
            with pytest.raises(StaleWriterError):  # a later attempt of the step
                await store.record_model_output(run, attempt, stale, [])
            await db.execute("UPDATE runs SET attempt = $2 WHERE run_id = $1", r["run_id"], attempt)
            await db.execute("UPDATE thread_leases SET epoch = 4 WHERE thread_id = $1", r["thread_id"])
            with pytest.raises(StaleWriterError):  # the run lost the thread
                await store.record_model_output(run, attempt, stale, [])
            assert await _val(db, "SELECT output FROM model_outputs WHERE run_id = $1 AND step = 0",
                              r["run_id"]) == output  # nothing written by the fenced calls
