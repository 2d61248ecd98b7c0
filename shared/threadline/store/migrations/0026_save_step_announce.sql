-- depends: 0025_record_output
-- A continued step announced by the worker that stores it (decision 103). This migration created
-- threadline_save_step_announce (0017's save and claim, and the stored step announced in place of
-- its result); migration 0027_one_save.sql replaced it with threadline_save_step, whose header
-- says how it announces. What stays from here: the index that answers "does an unpublished
-- lifecycle row of this key wait" in one probe however long the thread's outbox history.
CREATE INDEX outbox_unpublished_key ON outbox (key, id) WHERE published_at IS NULL;
