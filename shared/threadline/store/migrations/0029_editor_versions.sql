-- depends: 0027_one_save
-- Editor overrides carry a version (docs/decisions.md, 200): every save of an agent's row in
-- agent_overrides adds one, and a save names the version it was built on, checked in the same
-- statement that writes. An agent with no row is at version 0; rows stored before this migration
-- start at 1. An expand migration (decision 113): a gateway of the previous release writes
-- without the column (a new row takes the default, an update keeps the number), which this
-- release's gateways read as it is.
ALTER TABLE agent_overrides ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 1;
