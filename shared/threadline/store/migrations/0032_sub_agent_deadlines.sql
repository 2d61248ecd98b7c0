-- depends: 0029_editor_versions
-- Sub-agent calls past their deadline (docs/decisions.md, 218): every sweep of each orchestrator
-- looks for the calls whose child run still runs; a partial index keeps that look off the
-- ended calls, which accumulate. An expand migration (decision 113): nothing of the previous
-- release reads or writes differently.
CREATE INDEX IF NOT EXISTS sub_agent_calls_waiting ON sub_agent_calls (created_at) WHERE status = 'running';
