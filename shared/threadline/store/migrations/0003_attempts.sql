-- depends: 0002_abort
-- Re-execution after a crash: whether the current step already had an attempt started.
ALTER TABLE runs ADD COLUMN step_started boolean NOT NULL DEFAULT false;
