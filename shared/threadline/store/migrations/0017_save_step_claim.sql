-- depends: 0016_chunk_topics
-- threadline_save_step_continue (0013) in one pass (docs/decisions.md, 49): the same fence, the
-- same rows written and the same row returned, in 8 statements instead of about 17 and without
-- the nested threadline_begin_step call and its subtransaction (the EXCEPTION block). What it
-- folds, given that the advance and the claim run in this transaction under the run's row lock:
--   * one lease renewal (begin_step renewed the row this function had just renewed);
--   * one read of the run (FOR UPDATE), of the columns it needs, instead of four reads of the row;
--   * one UPDATE of the run that stores the step and, when the orchestrator would advance the run
--     (running, at p_step, this epoch), advances it (step + 1, continued_from) and claims it for
--     p_owner (attempt 1, started, heartbeat now, next_seq + p_seq_block) instead of three;
--   * begin_step's checks on the advanced row all hold by construction (running, this epoch, the
--     step just advanced to, not started so not busy, the lease renewed above): its outcome is
--     always 'claimed', never restarted, no history (step > 0) and nothing recorded.
-- Outcome NULL (box only) when the run could not be advanced, as in 0013. Raises SQLSTATE
-- 'TLSTW' like threadline_save_step; nothing is written then. threadline_save_step_continue stays
-- (THREADLINE_SAVE_CLAIM_LEAN=0 selects it; a worker of the previous release calls it).
CREATE FUNCTION threadline_save_step_claim(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
                                           p_ttl_s double precision, p_messages jsonb, p_consumed text[],
                                           p_state jsonb, p_next_seq bigint, p_topic text, p_key text,
                                           p_headers jsonb, p_value bytea, p_owner text, p_seq_block bigint,
                                           OUT box bigint, OUT outcome text, OUT resource_id text,
                                           OUT thread_id text, OUT agent_id text, OUT epoch bigint,
                                           OUT step integer, OUT next_seq bigint, OUT options jsonb,
                                           OUT state jsonb, OUT heartbeat timestamptz, OUT attempt integer,
                                           OUT seq_base bigint, OUT restarted boolean, OUT history jsonb,
                                           OUT history_at timestamptz[], OUT signals jsonb, OUT recorded jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_thread text; v_resource text; v_agent text; v_epoch bigint; v_step integer; v_attempt integer;
    v_status text; v_options jsonb;
    adv boolean;
    sigs jsonb;
BEGIN
    -- the fence: the run still holds the thread at p_epoch (renewed); lease row first, then the run's
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
      FROM runs x
     WHERE x.run_id = p_run_id AND l.thread_id = x.thread_id AND l.run_id = p_run_id AND l.epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale writer: run % epoch %', p_run_id, p_epoch USING ERRCODE = 'TLSTW';
    END IF;
    SELECT x.thread_id, x.resource_id, x.agent_id, x.epoch, x.step, x.attempt, x.status, x.options
      INTO v_thread, v_resource, v_agent, v_epoch, v_step, v_attempt, v_status, v_options
      FROM runs x WHERE x.run_id = p_run_id FOR UPDATE;
    IF v_attempt IS DISTINCT FROM p_attempt THEN
        RAISE EXCEPTION 'stale attempt: run % attempt %', p_run_id, p_attempt USING ERRCODE = 'TLSTW';
    END IF;
    INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content)
    SELECT m->>'id', v_thread, v_resource, p_run_id, m->>'role', m->>'type', m->'content'
      FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS x(m, i) ORDER BY i
    ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, role = EXCLUDED.role, updated_at = now()
     WHERE messages.run_id = EXCLUDED.run_id AND messages.content IS DISTINCT FROM EXCLUDED.content;
    DELETE FROM messages WHERE messages.run_id = p_run_id
       AND NOT (id IN (SELECT m->>'id' FROM jsonb_array_elements(p_messages) m));
    UPDATE signals SET status = 'consumed', consumed_by_run = p_run_id, consumed_at = now()
     WHERE status = 'pending'
       AND (CASE WHEN p_consumed IS NULL THEN signals.run_id = p_run_id ELSE signals.id = ANY(p_consumed) END);
    adv := v_status = 'running' AND v_epoch = p_epoch AND v_step = p_step;
    UPDATE runs u SET state = p_state, steps_done = p_step + 1, updated_at = now(),
           next_seq = CASE WHEN adv THEN p_next_seq + p_seq_block ELSE p_next_seq END,
           step = CASE WHEN adv THEN p_step + 1 ELSE u.step END,
           attempt = CASE WHEN adv THEN 1 ELSE u.attempt END,
           step_started = CASE WHEN adv THEN true ELSE u.step_started END,
           continued_from = CASE WHEN adv THEN coalesce(u.continued_from, p_step) ELSE u.continued_from END,
           step_owner = CASE WHEN adv THEN p_owner ELSE u.step_owner END,
           step_heartbeat = CASE WHEN adv THEN now() ELSE u.step_heartbeat END
     WHERE u.run_id = p_run_id AND u.epoch = p_epoch;
    INSERT INTO outbox (topic, key, headers, value) VALUES (p_topic, p_key, p_headers, p_value)
    RETURNING id INTO box;
    IF NOT adv THEN
        RETURN;  -- stored, not advanced: the orchestrator schedules the next step on the result
    END IF;
    -- the next step's signals, as threadline_begin_step drains them at a step > 0
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', s.id, 'payload', s.payload) ORDER BY s.seq), '[]')
      INTO sigs
      FROM signals s WHERE s.run_id = p_run_id AND s.status = 'pending';
    IF sigs <> '[]'::jsonb THEN
        UPDATE signals s SET drained_step = p_step + 1
         WHERE s.id IN (SELECT x->>'id' FROM jsonb_array_elements(sigs) x) AND s.drained_step IS NULL;
    END IF;
    outcome := 'claimed'; resource_id := v_resource; thread_id := v_thread; agent_id := v_agent;
    epoch := v_epoch; step := p_step + 1; next_seq := p_next_seq; options := v_options; state := p_state;
    attempt := 1; seq_base := p_next_seq; restarted := false; signals := sigs;
END $$;
