"""``threadline.store.arrival.arrive`` (decision 96): a request's event claim, its thread row and
its thread's lease lock in one statement, with the outcomes of the three statements it replaced."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.integration.pg import statements as logged
from threadline.events import ErrorReply, SendMessage
from threadline.flows.routing import route
from threadline.orchestration.routing import Inbound
from threadline.store import leases
from threadline.store.arrival import arrive
from threadline.store.db import Database
from threadline.topics import Topics


def _ids() -> tuple[str, str]:
    return f"req-ar-{uuid.uuid4().hex}", f"th-ar-{uuid.uuid4().hex[:8]}"


async def test_a_new_thread_is_claimed_created_and_locked_in_one_statement(own_cluster):
    event, thread = _ids()
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        async with conn.transaction(), logged(conn) as statements:
            arrival = await arrive(conn, event, "res-ar", thread, thread={"title": "T", "metadata": {"k": 1}})
        assert len(statements) == 1
        assert arrival.claimed and arrival.owned and arrival.lease is not None
        assert (arrival.lease.run_id, arrival.lease.epoch, arrival.lease.active) == (None, 0, False)
        row = await conn.fetchrow("SELECT resource_id, title, metadata FROM threads WHERE thread_id = $1", thread)
        assert (row["resource_id"], row["title"], row["metadata"]) == ("res-ar", "T", {"k": 1})
        assert await conn.fetchval("SELECT resource_id FROM thread_leases WHERE thread_id = $1", thread) == "res-ar"
        assert await conn.fetchval("SELECT count(*) FROM processed_events WHERE consumer = 'ingress' "
                                   "AND event_id = $1", event) == 1


async def test_a_claimed_event_does_nothing_else(own_cluster):
    event, thread = _ids()
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        await conn.execute("INSERT INTO processed_events (consumer, event_id) VALUES ('ingress', $1)", event)
        async with conn.transaction():
            arrival = await arrive(conn, event, "res-ar", thread)
        assert (arrival.claimed, arrival.owned, arrival.lease) == (False, False, None)
        assert await conn.fetchval("SELECT count(*) FROM threads WHERE thread_id = $1", thread) == 0
        assert await conn.fetchval("SELECT count(*) FROM thread_leases WHERE thread_id = $1", thread) == 0


async def test_a_refused_request_claims_its_event_and_creates_no_thread(own_cluster):
    event, thread = _ids()
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        async with conn.transaction():
            arrival = await arrive(conn, event, "res-ar", thread, open_thread=False)
        assert (arrival.claimed, arrival.owned, arrival.lease) == (True, False, None)
        assert await conn.fetchval("SELECT count(*) FROM threads WHERE thread_id = $1", thread) == 0
        assert await conn.fetchval("SELECT count(*) FROM thread_leases WHERE thread_id = $1", thread) == 0


async def test_another_resources_thread_is_neither_changed_nor_locked(own_cluster):
    """A request naming another resource's thread (with a title) leaves that thread as it was."""
    event, thread = _ids()
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        await conn.execute("INSERT INTO threads (thread_id, resource_id, title) VALUES ($1, 'res-other', 'mine')",
                           thread)
        async with conn.transaction():
            arrival = await arrive(conn, event, "res-ar", thread, thread={"title": "theirs"})
        assert (arrival.claimed, arrival.owned, arrival.lease) == (True, False, None)
        assert await conn.fetchval("SELECT count(*) FROM thread_leases WHERE thread_id = $1", thread) == 0
        # ingress answers the refusal and commits: the other resource's title must not be overwritten
        # (the three statements before decision 96 overwrote it)
        row = await conn.fetchrow("SELECT resource_id, title FROM threads WHERE thread_id = $1", thread)
        assert (row["resource_id"], row["title"]) == ("res-other", "mine")


async def test_a_second_arrival_waits_for_the_lock_then_sees_the_first_ones_run(own_cluster):
    _, thread = _ids()
    async with Database(own_cluster.dsn, max_size=2) as db, db.connection() as first, db.connection() as second:
        tx = first.transaction()
        await tx.start()
        arrival = await arrive(first, f"req-ar-{uuid.uuid4().hex}", "res-ar", thread)
        assert arrival.lease is not None
        await leases.take(first, arrival.lease, "run-ar-1", 60)

        async def other() -> Any:
            async with second.transaction():
                return await arrive(second, f"req-ar-{uuid.uuid4().hex}", "res-ar", thread)

        waiting = asyncio.create_task(other())
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the lease row (and the new thread's row) is locked by the first transaction
        await tx.commit()
        seen = await asyncio.wait_for(waiting, 5)
        assert seen.claimed and seen.owned and seen.lease is not None
        assert (seen.lease.run_id, seen.lease.epoch, seen.lease.active) == ("run-ar-1", 1, True)


async def test_routing_a_request_for_another_resources_thread_answers_an_error_and_keeps_its_title(own_cluster):
    """The refusal is answered (and committed) without writing the other resource's thread."""
    event, thread = _ids()
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        await conn.execute("INSERT INTO threads (thread_id, resource_id, title) VALUES ($1, 'res-other', 'mine')",
                           thread)
        req = Inbound(event_id=event, kind="stream", agent_id="agent", resource_id="res-ar", thread_id=thread,
                      body="hello", thread={"title": "theirs", "metadata": {"x": 1}})
        routed = await route(conn, req, topics=Topics(own_cluster.prefix), lease_ttl_s=60, agent_known=True)
        assert isinstance(routed.reply, ErrorReply) and routed.reply.code == "thread_owned_by_other_resource"
        row = await conn.fetchrow("SELECT title, metadata FROM threads WHERE thread_id = $1", thread)
        assert (row["title"], row["metadata"]) == ("mine", {})
        assert await conn.fetchval("SELECT count(*) FROM runs WHERE thread_id = $1", thread) == 0


async def test_a_message_after_a_runs_finish_names_the_run_that_answers_it(own_cluster):
    """The run's last step is stored (status finished, its finish may be on the stream) but the
    orchestrator has not released the lease yet: the message is queued as the next run's turn and
    the reply names that run, not the run that ended (CI of c567380: the demo got the ended run)."""
    event, thread = _ids()
    ended = f"run-ar-{uuid.uuid4().hex[:8]}"
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-ar')", thread)
        await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
                           "VALUES ($1, 'res-ar', $2, 2, now() + interval '1 minute')", thread, ended)
        await conn.execute("INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, status, steps_done) "
                           "VALUES ($1, $2, 'res-ar', 'agent', 2, 'finished', 1)", ended, thread)
        req = SendMessage(event_id=event, message="one more thing", agent_id="agent", resource_id="res-ar",
                          thread_id=thread)  # if_active: deliver, the default
        routed = await route(conn, req, topics=Topics(own_cluster.prefix), lease_ttl_s=60, agent_known=True)
        reply = routed.reply
        assert reply is not None and reply.run_id not in (None, ended)  # type: ignore[union-attr]
        sig = await conn.fetchrow("SELECT mode, run_id, options FROM signals WHERE thread_id = $1", thread)
        assert (sig["mode"], sig["run_id"], sig["options"]["run_id"]) == ("queue", None, reply.run_id)  # type: ignore[union-attr]
