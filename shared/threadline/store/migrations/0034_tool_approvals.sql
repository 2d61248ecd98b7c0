-- depends: 0029_editor_versions 0023_sub_agents
-- Tool approval (Mastra's requireApproval / requireToolApproval, decisions 225-227). A step whose
-- model called a tool that needs a person's approval records one tool_approvals row per such call
-- (the worker, in the transaction that stores the step) and ends 'suspended', as a step calling a
-- sub-agent does: the orchestrator marks the run waiting (runs.waiting_children), its lease kept
-- without expiry and no worker holding it. An approve or decline command sets the row's status
-- once (a second answer changes nothing) and, when no call of the step is still pending, schedules
-- the next step, which runs an approved tool or tells the model it was declined.
CREATE TABLE tool_approvals (
    run_id       text NOT NULL,
    tool_call_id text NOT NULL,
    step         integer NOT NULL,
    tool_name    text NOT NULL,
    args         jsonb,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'declined')),
    reason       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz,
    PRIMARY KEY (run_id, tool_call_id)
);
CREATE INDEX tool_approvals_pending ON tool_approvals (run_id, step) WHERE status = 'pending';
