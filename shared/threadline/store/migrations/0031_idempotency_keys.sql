-- depends: 0029_editor_versions
-- HTTP writes named by an Idempotency-Key (docs/decisions.md, 213): one row per (resource, key),
-- the fingerprint of the first request's method, path and body, the ingress request id every
-- retry re-sends (ingress answers a known id from processed_events), and the first answer once
-- the gateway gave one. Rows live 24 hours (threadline.store.idempotency.KEEP_S).
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    fingerprint  text        NOT NULL,
    request_id   text        NOT NULL,
    status       integer,
    answer       jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_created ON idempotency_keys (created_at);
