-- depends: 0025_record_output
-- A continued step announced by the worker that stores it (decision 103): 0017's
-- threadline_save_step_claim, and when the orchestrator would only announce the stored step
-- (threadline.orchestration.runs.on_step_result answering Announce on the row as this statement
-- leaves it) and no lifecycle record of the thread written by another process waits to be
-- published, the step is announced here: results_applied moves on and the lifecycle rows
-- (p_life: the run's unannounced start, then step_finished) go to the outbox instead of the step
-- result, so the orchestrator has nothing to do for the step. Otherwise exactly 0017: the step
-- result is queued and the orchestrator announces it.
--
-- Conditions of the announcement, on the row locked FOR UPDATE (decision 98's statement has the
-- same): the run advanced (running at p_epoch, at p_step; so continued_from <= p_step < step
-- afterwards, and not aborted) and results_applied = p_step (every earlier result applied). The
-- start: when start_announced is false, p_life's first p_start_rows values (thread_active,
-- run_started, as unannounced_start says) are queued before step_finished and start_announced is
-- set, as the orchestrator's transaction does for a result that overtook the run's StartRun.
-- The order: a key's lifecycle records leave in outbox id order, so the statement announces only
-- while no unpublished lifecycle row of the key exists but the caller's own (p_own: the ids of the
-- lifecycle rows it queued for the run and has not seen marked published; its publisher sends
-- them in order before these).
CREATE INDEX outbox_unpublished_key ON outbox (key, id) WHERE published_at IS NULL;

CREATE FUNCTION threadline_save_step_announce(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
                                              p_ttl_s double precision, p_messages jsonb, p_consumed text[],
                                              p_state jsonb, p_next_seq bigint, p_topic text, p_key text,
                                              p_headers jsonb, p_value bytea, p_owner text, p_seq_block bigint,
                                              p_life_topic text, p_life_headers jsonb, p_life bytea[],
                                              p_start_rows integer, p_own bigint[],
                                              OUT box bigint, OUT outcome text, OUT resource_id text,
                                              OUT thread_id text, OUT agent_id text, OUT epoch bigint,
                                              OUT step integer, OUT next_seq bigint, OUT options jsonb,
                                              OUT heartbeat timestamptz, OUT attempt integer,
                                              OUT seq_base bigint, OUT restarted boolean, OUT history jsonb,
                                              OUT history_at timestamptz[], OUT signals jsonb, OUT recorded jsonb,
                                              OUT announced bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_thread text; v_resource text; v_agent text; v_epoch bigint; v_step integer; v_attempt integer;
    v_status text; v_options jsonb; v_applied integer; v_started boolean;
    adv boolean; ann boolean;
    sigs jsonb;
    first integer;
    k integer;
    bid bigint;
BEGIN
    -- the fence: the run still holds the thread at p_epoch (renewed); lease row first, then the run's
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
      FROM runs x
     WHERE x.run_id = p_run_id AND l.thread_id = x.thread_id AND l.run_id = p_run_id AND l.epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale writer: run % epoch %', p_run_id, p_epoch USING ERRCODE = 'TLSTW';
    END IF;
    SELECT x.thread_id, x.resource_id, x.agent_id, x.epoch, x.step, x.attempt, x.status, x.options,
           x.results_applied, x.start_announced
      INTO v_thread, v_resource, v_agent, v_epoch, v_step, v_attempt, v_status, v_options, v_applied, v_started
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
    ann := adv AND p_life IS NOT NULL AND v_applied IS NOT DISTINCT FROM p_step
           AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.key = p_key AND o.published_at IS NULL
                           AND o.topic = p_life_topic AND NOT (o.id = ANY(coalesce(p_own, '{}'))));
    UPDATE runs u SET state = p_state, steps_done = p_step + 1, updated_at = now(),
           next_seq = CASE WHEN adv THEN p_next_seq + p_seq_block ELSE p_next_seq END,
           step = CASE WHEN adv THEN p_step + 1 ELSE u.step END,
           attempt = CASE WHEN adv THEN 1 ELSE u.attempt END,
           step_started = CASE WHEN adv THEN true ELSE u.step_started END,
           continued_from = CASE WHEN adv THEN coalesce(u.continued_from, p_step) ELSE u.continued_from END,
           step_owner = CASE WHEN adv THEN p_owner ELSE u.step_owner END,
           step_heartbeat = CASE WHEN adv THEN now() ELSE u.step_heartbeat END,
           results_applied = CASE WHEN ann THEN p_step + 1 ELSE u.results_applied END,
           start_announced = CASE WHEN ann THEN true ELSE u.start_announced END
     WHERE u.run_id = p_run_id AND u.epoch = p_epoch;
    IF ann THEN
        first := CASE WHEN v_started THEN p_start_rows + 1 ELSE 1 END;
        announced := '{}';
        FOR k IN first .. coalesce(array_length(p_life, 1), 0) LOOP
            INSERT INTO outbox (topic, key, headers, value) VALUES (p_life_topic, p_key, p_life_headers -> (k - 1), p_life[k])
            RETURNING id INTO bid;
            announced := announced || bid;
        END LOOP;
    ELSE
        INSERT INTO outbox (topic, key, headers, value) VALUES (p_topic, p_key, p_headers, p_value)
        RETURNING id INTO box;
    END IF;
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
    epoch := v_epoch; step := p_step + 1; next_seq := p_next_seq; options := v_options;
    attempt := 1; seq_base := p_next_seq; restarted := false; signals := sigs;
END $$;
