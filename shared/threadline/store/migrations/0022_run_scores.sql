-- depends: 0020_agents
-- Scores of finished runs (an agent's scorers, decision 71): one row per (run, scorer) the sampling
-- chose, inserted 'pending' by the notification-scheduler when it reads the run's run_finished;
-- claimed for claim_s by one scheduler instance, then stored once ('done' or 'failed').
CREATE TABLE run_scores (
    run_id        text NOT NULL,
    scorer        text NOT NULL,
    agent_id      text NOT NULL,
    resource_id   text NOT NULL,
    thread_id     text NOT NULL,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    score         double precision,
    reason        text,
    error         jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    scored_at     timestamptz,
    PRIMARY KEY (run_id, scorer)
);
CREATE INDEX run_scores_pending ON run_scores (created_at) WHERE status = 'pending';

-- An agent's voice configuration ({speak_model, listen_model, speaker, response_format}), read by
-- clients that speak or listen (decision 74); NULL: the agent has no voice.
ALTER TABLE agents ADD COLUMN voice jsonb;
