-- depends: 0009_model_outputs
-- The run-orchestrator's sweeper (threadline.recovery): every run it found stuck and drove on,
-- with the reason. Each row is a bug elsewhere that the sweeper covered; the count per run
-- bounds how often a run is recovered before it is failed.
CREATE TABLE run_recoveries (
    id          bigserial PRIMARY KEY,
    run_id      text NOT NULL,
    step        integer NOT NULL,
    attempt     integer NOT NULL,
    action      text NOT NULL,
    reason      text NOT NULL,
    instance    text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_recoveries_run ON run_recoveries (run_id);

-- The sweeper finds a run's stored step result again by its thread key.
CREATE INDEX outbox_key ON outbox (key, id);

-- The sweeper lists the leases held by runs that already ended in the store.
CREATE INDEX thread_leases_held ON thread_leases (run_id) WHERE run_id IS NOT NULL;
