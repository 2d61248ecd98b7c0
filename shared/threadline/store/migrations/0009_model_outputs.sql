-- depends: 0006_tool_calls
-- Replay on re-execution: the model's completed output of a step (its raw chunks: text and
-- tool calls, with usage and finish reason), recorded before the step's tools run. A step
-- re-executed after a crash replays it instead of calling the model again, so the tool call
-- ids are the same and the recorded tool results (tool_calls) are reused.
CREATE TABLE model_outputs (
    run_id      text NOT NULL,
    step        integer NOT NULL,
    attempt     integer NOT NULL,
    output      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step)
);

-- One live execution per step: the executing worker's token and its heartbeat. Another worker
-- that receives the same step task (a rebalance redelivered it) re-executes it only once the
-- heartbeat has stood still for a while (the owner died), never beside a live owner.
ALTER TABLE runs ADD COLUMN step_owner text;
ALTER TABLE runs ADD COLUMN step_heartbeat timestamptz;
