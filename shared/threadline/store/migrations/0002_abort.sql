-- depends: 0001_initial
-- Aborting runs: who emitted the run's terminal chunks (abort + finish), claimed once.
ALTER TABLE runs ADD COLUMN terminal_emitted boolean NOT NULL DEFAULT false;
-- The step that drained a signal into its run (still 'pending' until the step is stored).
ALTER TABLE signals ADD COLUMN drained_step integer;
