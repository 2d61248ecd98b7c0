-- depends: 0004_state_lanes
-- The notification inbox (Mastra's sendNotificationSignal; docs/decisions.md §9-11).
CREATE TABLE notifications (
    id                   text PRIMARY KEY,
    thread_id            text NOT NULL,
    resource_id          text NOT NULL,
    agent_id             text NOT NULL,
    source               text NOT NULL,
    kind                 text NOT NULL,
    priority             text NOT NULL CHECK (priority IN ('low', 'medium', 'high', 'urgent')),
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'delivered', 'seen', 'dismissed', 'archived', 'discarded', 'failed')),
    summary              text NOT NULL,
    payload              jsonb,
    dedupe_key           text,
    coalesce_key         text,
    coalesced_count      integer NOT NULL DEFAULT 1,
    attributes           jsonb NOT NULL DEFAULT '{}'::jsonb,
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb,
    deliver_at           timestamptz,
    summary_at           timestamptz,
    summarized           boolean NOT NULL DEFAULT false,
    delivery_reason      text,
    delivery_attempts    integer NOT NULL DEFAULT 0,
    last_delivery_attempt_at timestamptz,
    last_delivery_error  text,
    delivered_signal_id  text,
    summary_signal_id    text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    delivered_at         timestamptz,
    seen_at              timestamptz,
    dismissed_at         timestamptz,
    archived_at          timestamptz,
    discarded_at         timestamptz
);
CREATE INDEX notifications_thread ON notifications (thread_id, created_at);
CREATE INDEX notifications_due ON notifications ((least(deliver_at, summary_at))) WHERE status = 'pending';
CREATE UNIQUE INDEX notifications_dedupe ON notifications (thread_id, source, kind, dedupe_key)
    WHERE status = 'pending' AND dedupe_key IS NOT NULL;
