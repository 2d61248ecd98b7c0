-- depends: 0012_model_rate_buckets
-- The worker that stored a step continues the run's next step itself (docs/decisions.md, 31-33):
-- it claims the next step in the statement that stores the finished one, fenced like a step the
-- orchestrator hands out. Two columns on runs:
--   continued_from   the step of the step task whose handling the current step continues (a
--                    redelivered copy of that task stands for the chain); NULL: the current
--                    step had a step task of its own.
--   results_applied  the step results the orchestrator applied: the next one it applies is the
--                    result of this step (a later one waits; the sweeper redelivers the gap).
ALTER TABLE runs ADD COLUMN continued_from integer;
ALTER TABLE runs ADD COLUMN results_applied integer NOT NULL DEFAULT 0;
-- before this migration only the orchestrator advanced a run's step, having applied every
-- earlier result
UPDATE runs SET results_applied = step;

-- This migration also redefined threadline_begin_step (a step task of a step that a worker
-- continued claims the run's current step) and created threadline_save_step_continue (the step
-- stored and the next one claimed); migration 0027_one_save.sql holds the current
-- threadline_begin_step and the one save, threadline_save_step, that replaced the second.
