-- depends: 0013_worker_continues
-- Per-thread chunk topics and their retention (docs/decisions.md 40-42). One row per chunk topic
-- that some service created; the row is the lock that orders "use the topic" against "delete it":
--   state 'live'      the topic exists (or is being created by whoever inserted the row);
--                     used_at: the last time a producer (worker, ingress, scheduler) took it
--   state 'deleting'  the idle-topic sweep claimed it (used_at: when); producers wait until the
--                     row is gone, then insert a new one and create the topic again
-- A topic without a row (made before this migration, or by a client subscribing to a thread that
-- never ran) is registered by its first producer and is never deleted before that.
CREATE TABLE chunk_topics (
    topic       text PRIMARY KEY,
    resource_id text NOT NULL,
    thread_id   text NOT NULL,
    state       text NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'deleting')),
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chunk_topics_used ON chunk_topics (state, used_at);
