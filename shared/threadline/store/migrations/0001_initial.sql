-- Threadline schema v1: threads, messages, runs, the per-thread lease with its fencing epoch,
-- signals, processed-event ids and the transactional outbox.

CREATE TABLE threads (
    thread_id   text PRIMARY KEY,            -- a thread belongs to exactly one resource
    resource_id text NOT NULL,
    title       text,
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX threads_resource ON threads (resource_id);

-- Mastra's MastraDBMessage: content = {format: 2, parts: [...], content?, metadata?}
CREATE TABLE messages (
    id          text PRIMARY KEY,
    position    bigserial NOT NULL,          -- order within the thread (insertion order)
    thread_id   text NOT NULL REFERENCES threads (thread_id),
    resource_id text NOT NULL,
    run_id      text,
    role        text NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'signal', 'tool')),
    type        text,
    content     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_thread ON messages (thread_id, position);
CREATE INDEX messages_run ON messages (run_id);

-- One row per thread: who holds it (run_id NULL = idle) and the fencing epoch every write checks.
CREATE TABLE thread_leases (
    thread_id   text PRIMARY KEY,
    resource_id text NOT NULL,
    run_id      text,
    epoch       bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    run_id          text PRIMARY KEY,
    thread_id       text NOT NULL,
    resource_id     text NOT NULL,
    agent_id        text NOT NULL,
    kind            text NOT NULL DEFAULT 'stream' CHECK (kind IN ('stream', 'generate')),
    request_id      text,
    reply_to        text,
    status          text NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'finished', 'failed', 'aborted', 'tripwire')),
    epoch           bigint NOT NULL,
    step            integer NOT NULL DEFAULT 0,   -- the step being executed
    attempt         integer NOT NULL DEFAULT 1,
    steps_done      integer NOT NULL DEFAULT 0,
    options         jsonb NOT NULL DEFAULT '{}'::jsonb,
    state           jsonb NOT NULL DEFAULT '{}'::jsonb,  -- working state carried between steps
    next_seq        bigint NOT NULL DEFAULT 0,           -- next chunk seq of the run
    finish_reason   text,
    text            text,
    usage           jsonb,
    error           jsonb,
    tripwire        jsonb,
    tripwire_processor_id text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
CREATE INDEX runs_running ON runs (status) WHERE status = 'running';

-- Signals and user messages sent to a thread: delivered into a run, queued, persisted or discarded.
CREATE TABLE signals (
    id              text PRIMARY KEY,
    seq             bigserial NOT NULL,
    thread_id       text NOT NULL,
    resource_id     text NOT NULL,
    agent_id        text,
    type            text NOT NULL,            -- user | state | reactive | notification
    mode            text NOT NULL CHECK (mode IN ('wake', 'deliver', 'queue', 'persist', 'discard')),
    status          text NOT NULL CHECK (status IN ('pending', 'consumed', 'persisted', 'discarded')),
    run_id          text,                     -- the run it is addressed to
    consumed_by_run text,
    request_id      text,
    payload         jsonb NOT NULL,
    options         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    consumed_at     timestamptz
);
CREATE INDEX signals_run_pending ON signals (run_id, seq) WHERE status = 'pending';
CREATE INDEX signals_thread_pending ON signals (thread_id, seq) WHERE status = 'pending';

-- Idempotent consumers: an event id handled once per consumer; the reply is kept for redelivery.
CREATE TABLE processed_events (
    consumer     text NOT NULL,
    event_id     text NOT NULL,
    result       jsonb,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Transactional outbox: written with the effect, published after commit (and by the relay).
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    topic        text NOT NULL,
    key          text,
    headers      jsonb NOT NULL DEFAULT '[]'::jsonb,
    value        bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
