-- depends: 0010_run_recoveries
-- One round trip to begin a step and one to end it (bench/results/HISTORY.md, "Latency budget"): the
-- processor-worker's claim and load, and its store of what the step produced, as two functions,
-- threadline_begin_step and threadline_save_step. Both are defined in migration
-- 0027_one_save.sql, their one text (this migration created their first versions; a database
-- that applied it has the first threadline_begin_step replaced there, and its first
-- threadline_save_step, of other parameters, dropped by contract/0028_retired_saves.sql).
SELECT 1;
