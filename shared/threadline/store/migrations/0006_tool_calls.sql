-- depends: 0005_notifications
-- Tool side effects once: the (processed) result of every tool call that ran, by tool call id.
CREATE TABLE tool_calls (
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    tool_name    text NOT NULL,
    result       jsonb,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_call_id)
);
