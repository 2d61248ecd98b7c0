-- depends: 0022_run_scores 0021_agent_editor
-- Durable sub-agents (Mastra's Agent option agents, decisions 76-79). A parent step that calls a sub-agent
-- tool records one sub_agent_calls row per call (the worker, before it stores the step); the
-- orchestrator applying the step's 'suspended' result creates each child run (its own thread,
-- runs.parent_run_id) and marks the parent waiting; the child's end stores its outcome as the
-- parent's tool result (tool_calls, first record wins) and, when no call of the parent step is
-- outstanding, schedules the parent's next step.
CREATE TABLE sub_agent_calls (
    parent_run_id   text NOT NULL,
    tool_call_id    text NOT NULL,
    parent_step     integer NOT NULL,
    tool_name       text NOT NULL,
    agent_id        text NOT NULL,
    child_run_id    text NOT NULL UNIQUE,
    child_thread_id text NOT NULL,
    prompt          text NOT NULL,
    status          text NOT NULL DEFAULT 'requested' CHECK (status IN ('requested', 'running', 'done')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    PRIMARY KEY (parent_run_id, tool_call_id)
);

ALTER TABLE runs ADD COLUMN parent_run_id text;
ALTER TABLE runs ADD COLUMN parent_tool_call_id text;
-- the run's step is suspended until its sub-agent calls end (the sweeper leaves it alone)
ALTER TABLE runs ADD COLUMN waiting_children boolean NOT NULL DEFAULT false;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
