-- depends: 0016_chunk_topics
-- The agents the cluster serves, as clients may read them (docs/agents.md): written by every ingress
-- instance at start-up from the agents module; read by ThreadlineClient.agent(id).details().
CREATE TABLE agents (
    agent_id    text PRIMARY KEY,
    name        text NOT NULL,
    description text,
    metadata    jsonb,                       -- NULL: a function of the request context
    memory      jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
