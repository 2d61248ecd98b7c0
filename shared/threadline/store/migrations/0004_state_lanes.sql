-- depends: 0003_attempts
-- State-signal lanes per thread (Mastra's sendStateSignal; docs/signals.md): the current cache key and mode, versions.
CREATE TABLE state_lanes (
    thread_id               text NOT NULL,
    lane_id                 text NOT NULL,
    current_cache_key       text NOT NULL,
    current_mode            text NOT NULL CHECK (current_mode IN ('snapshot', 'delta')),
    version                 integer NOT NULL,
    last_signal_id          text NOT NULL,
    last_snapshot_signal_id text,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, lane_id)
);
