-- depends: 0023_sub_agents 0024_workflow_steps
-- A tool step's write before its tools run, in one call (decision 88): record the model's
-- completed output of the step's attempt, confirm that attempt still owns the step (its
-- heartbeat refreshed, as a heartbeat does) and return the run's tool calls among p_call_ids
-- that already ran. Locks the lease row first, then the run's (decision 60).
-- Raises SQLSTATE 'TLSTW' (stale writer) when the run no longer holds the thread at p_epoch,
-- is no longer running, or another attempt or worker owns the step; nothing is written then.
CREATE FUNCTION threadline_record_output(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
                                         p_owner text, p_ttl_s double precision, p_output jsonb,
                                         p_call_ids text[])
RETURNS TABLE (call_id text, call_result jsonb, call_error text) LANGUAGE plpgsql AS $$
DECLARE
    r runs%ROWTYPE;
BEGIN
    SELECT * INTO r FROM runs WHERE run_id = p_run_id;
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
     WHERE l.thread_id = r.thread_id AND l.run_id = p_run_id AND l.epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale writer: run % epoch %', p_run_id, p_epoch USING ERRCODE = 'TLSTW';
    END IF;
    SELECT * INTO r FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF r.status <> 'running' OR r.attempt IS DISTINCT FROM p_attempt OR r.step_owner IS DISTINCT FROM p_owner THEN
        RAISE EXCEPTION 'stale attempt: run % attempt %', p_run_id, p_attempt USING ERRCODE = 'TLSTW';
    END IF;
    UPDATE runs SET step_heartbeat = now() WHERE run_id = p_run_id;
    INSERT INTO model_outputs (run_id, step, attempt, output) VALUES (p_run_id, p_step, p_attempt, p_output)
    ON CONFLICT (run_id, step) DO UPDATE SET attempt = EXCLUDED.attempt, output = EXCLUDED.output,
                                             created_at = now();
    RETURN QUERY SELECT t.tool_call_id, t.result, t.error FROM tool_calls t
                  WHERE t.run_id = p_run_id AND t.tool_call_id = ANY(p_call_ids);
END $$;
