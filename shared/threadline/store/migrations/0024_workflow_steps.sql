-- depends: 0022_run_scores
-- Durable workflows (docs/workflows.md, decisions 80-83): one row per workflow step of a tool call
-- (path: "<element index>/<step id>", or "<index>/:branch" for a branch's choice), written before
-- the next step starts. status 'running' (started by attempt, not ended), 'success' / 'failed'
-- (ended: never run again; output or error reused). runs counts the executions started.
CREATE TABLE workflow_steps (
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    path         text NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'success', 'failed')),
    attempt      integer NOT NULL,
    runs         integer NOT NULL DEFAULT 0,
    output       jsonb,
    error        text,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_call_id, path)
);
