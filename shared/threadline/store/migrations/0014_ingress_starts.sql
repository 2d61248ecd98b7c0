-- depends: 0013_worker_continues
-- Ingress starts a fresh run itself (docs/decisions.md, 34-36): in the transaction that wakes the
-- thread and creates the run it schedules step 0 by the orchestrator's rule and publishes the step
-- task; the orchestrator only announces the start. One column on runs:
--   start_announced  thread_active / run_started were announced (by the orchestrator). false only
--                    for a run ingress scheduled, until the orchestrator's first transaction on the
--                    run (the StartRun it is told with, or a step result / abort / recovery that
--                    overtook it) announces the start before anything else about the run.
ALTER TABLE runs ADD COLUMN start_announced boolean NOT NULL DEFAULT true;
