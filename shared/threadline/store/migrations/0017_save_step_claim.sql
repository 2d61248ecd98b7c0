-- depends: 0016_chunk_topics
-- The step stored and the next one claimed in one pass (docs/decisions.md, 49): this migration
-- created threadline_save_step_claim, the one-pass form of 0013's threadline_save_step_continue.
-- Migration 0027_one_save.sql replaced both with threadline_save_step, which writes the same in
-- the same pass.
SELECT 1;
