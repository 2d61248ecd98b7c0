-- depends: 0020_agents
-- Editor overrides (docs/gateway.md, decisions 62 and 68): what each agent's code lets the editor
-- change and the code's own values (written by ingress at start-up, for the gateway and Studio),
-- and the stored overrides (written through the gateway, read by the worker at a run's step 0).
ALTER TABLE agents
    ADD COLUMN editor       jsonb,   -- {"instructions": bool, "tools": {"description": bool}}
    ADD COLUMN instructions text,    -- the code's instructions as text; NULL: a function of the request context
    ADD COLUMN tools        jsonb;   -- {tool_id: description}; NULL: a function of the request context

CREATE TABLE agent_overrides (
    agent_id   text PRIMARY KEY,
    overrides  jsonb NOT NULL DEFAULT '{}'::jsonb,  -- {"instructions"?: str, "tools"?: {id: {"description": str}}}
    updated_by text,                                 -- who saved them: "api_key" / "jwt" / "open", never a secret
    updated_at timestamptz NOT NULL DEFAULT now()
);
