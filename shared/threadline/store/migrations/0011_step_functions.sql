-- depends: 0010_run_recoveries
-- One round trip to begin a step and one to end it (bench/results/HISTORY.md, "Latency budget"): the
-- processor-worker's claim and load, and its store of what the step produced, as two functions.
-- Each runs in the statement's own transaction and takes its locks in the order the rest of the
-- code does (the thread lease first, then the run row). threadline.store.steps calls them.

-- Claim the run's current step and load everything it reads.
--   outcome: 'claimed' | 'aborted' (aborted while its task was in flight; terminal chunks owed)
--            | 'skipped' (stale or duplicate task) | 'stale' (the run no longer holds the thread,
--            or the step is no longer this worker's) | 'busy' (another live worker has it;
--            heartbeat = what was seen).
-- The run's columns come back for every outcome but 'skipped'; the rest only when claimed.
CREATE FUNCTION threadline_begin_step(p_run_id text, p_step integer, p_epoch bigint, p_owner text,
                                      p_ttl_s double precision, p_takeover timestamptz,
                                      p_seq_block bigint, p_history_limit integer,
                                      OUT outcome text, OUT resource_id text, OUT thread_id text,
                                      OUT agent_id text, OUT epoch bigint, OUT step integer,
                                      OUT next_seq bigint, OUT options jsonb, OUT state jsonb,
                                      OUT heartbeat timestamptz, OUT attempt integer, OUT seq_base bigint,
                                      OUT restarted boolean, OUT history jsonb, OUT history_at timestamptz[],
                                      OUT signals jsonb, OUT recorded jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    r runs%ROWTYPE;
    sigs jsonb;
BEGIN
    SELECT * INTO r FROM runs WHERE run_id = p_run_id;
    IF NOT FOUND THEN
        outcome := 'skipped';
        RETURN;
    END IF;
    resource_id := r.resource_id; thread_id := r.thread_id; agent_id := r.agent_id; epoch := r.epoch;
    step := r.step; next_seq := r.next_seq; options := r.options; state := r.state;
    IF r.status = 'aborted' AND NOT r.terminal_emitted THEN
        outcome := 'aborted';
        RETURN;
    END IF;
    IF r.status <> 'running' OR r.epoch <> p_epoch OR r.step <> p_step OR r.steps_done > p_step THEN
        outcome := 'skipped';
        RETURN;
    END IF;
    -- the fence: the run still holds the thread at its epoch (renewed)
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
     WHERE l.thread_id = r.thread_id AND l.run_id = r.run_id AND l.epoch = r.epoch;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    SELECT * INTO r FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF r.step_started AND r.step_owner IS NOT NULL AND r.step_owner <> p_owner
            AND r.step_heartbeat IS NOT NULL AND r.step_heartbeat IS DISTINCT FROM p_takeover THEN
        outcome := 'busy';
        heartbeat := r.step_heartbeat;
        RETURN;
    END IF;
    UPDATE runs u SET attempt = CASE WHEN u.step_started THEN u.attempt + 1 ELSE u.attempt END,
           step_started = true, next_seq = u.next_seq + p_seq_block, step_owner = p_owner,
           step_heartbeat = now(), updated_at = now()
     WHERE u.run_id = p_run_id AND u.epoch = p_epoch AND u.step = p_step AND u.steps_done = p_step
       AND u.status = 'running'
    RETURNING u.attempt, u.next_seq - p_seq_block INTO attempt, seq_base;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    restarted := r.step_started;
    IF p_step = 0 THEN  -- the thread's stored messages, oldest first, not this run's
        SELECT coalesce(jsonb_agg(jsonb_build_object('id', m.id, 'role', m.role, 'type', m.type,
                                                     'content', m.content, 'thread_id', m.thread_id,
                                                     'resource_id', m.resource_id) ORDER BY m.position), '[]'),
               coalesce(array_agg(m.created_at ORDER BY m.position), '{}')
          INTO history, history_at
          FROM (SELECT * FROM messages WHERE messages.thread_id = r.thread_id
                   AND (messages.run_id IS NULL OR messages.run_id <> p_run_id)
                 ORDER BY position DESC LIMIT p_history_limit) m;
    END IF;
    -- signals addressed to the run, in arrival order; the first step answers what woke the run,
    -- deliveries join at the next boundary
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', s.id, 'payload', s.payload) ORDER BY s.seq), '[]')
      INTO sigs
      FROM signals s WHERE s.run_id = p_run_id AND s.status = 'pending' AND (p_step > 0 OR s.mode <> 'deliver');
    signals := sigs;
    UPDATE signals s SET drained_step = p_step
     WHERE s.id IN (SELECT x->>'id' FROM jsonb_array_elements(sigs) x) AND s.drained_step IS NULL;
    IF restarted THEN
        SELECT mo.output INTO recorded FROM model_outputs mo WHERE mo.run_id = p_run_id AND mo.step = p_step;
    END IF;
    outcome := 'claimed';
END $$;

-- Store what a step produced, fenced by the lease epoch and the attempt, with its result in the
-- outbox; returns the outbox id. p_messages: [{id, role, type, content}] in list order (the
-- run's input/response messages; this run's rows not in it are deleted); p_consumed: the signal
-- ids the step consumed, NULL = every signal still pending for the run; p_final: NULL, or
-- {status, finish_reason, error, text, usage, tripwire} when the run ends.
-- Raises SQLSTATE 'TLSTW' (stale writer) when the run no longer holds the thread or a later
-- attempt of the step took over; nothing is written then.
CREATE FUNCTION threadline_save_step(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
                                     p_ttl_s double precision, p_messages jsonb, p_consumed text[],
                                     p_state jsonb, p_next_seq bigint, p_final jsonb,
                                     p_topic text, p_key text, p_headers jsonb, p_value bytea)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    r runs%ROWTYPE;
    box bigint;
BEGIN
    SELECT * INTO r FROM runs WHERE run_id = p_run_id;
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
     WHERE l.thread_id = r.thread_id AND l.run_id = p_run_id AND l.epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale writer: run % epoch %', p_run_id, p_epoch USING ERRCODE = 'TLSTW';
    END IF;
    SELECT * INTO r FROM runs WHERE run_id = p_run_id FOR UPDATE;
    IF r.attempt IS DISTINCT FROM p_attempt THEN
        RAISE EXCEPTION 'stale attempt: run % attempt %', p_run_id, p_attempt USING ERRCODE = 'TLSTW';
    END IF;
    INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content)
    SELECT m->>'id', r.thread_id, r.resource_id, p_run_id, m->>'role', m->>'type', m->'content'
      FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS x(m, i) ORDER BY i
    ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, role = EXCLUDED.role, updated_at = now()
     WHERE messages.run_id = EXCLUDED.run_id AND messages.content IS DISTINCT FROM EXCLUDED.content;
    DELETE FROM messages WHERE messages.run_id = p_run_id
       AND NOT (id IN (SELECT m->>'id' FROM jsonb_array_elements(p_messages) m));
    UPDATE signals SET status = 'consumed', consumed_by_run = p_run_id, consumed_at = now()
     WHERE status = 'pending'
       AND (CASE WHEN p_consumed IS NULL THEN signals.run_id = p_run_id ELSE signals.id = ANY(p_consumed) END);
    UPDATE runs SET state = p_state, next_seq = p_next_seq, steps_done = p_step + 1, updated_at = now(),
           status = coalesce(p_final->>'status', status),
           finish_reason = coalesce(p_final->>'finish_reason', finish_reason),
           text = coalesce(p_final->>'text', text),
           usage = coalesce(nullif(p_final->'usage', 'null'::jsonb), usage),
           error = coalesce(nullif(p_final->'error', 'null'::jsonb), error),
           tripwire = coalesce(nullif(p_final->'tripwire', 'null'::jsonb), tripwire),
           tripwire_processor_id = coalesce(p_final->'tripwire'->>'processorId', tripwire_processor_id),
           finished_at = CASE WHEN p_final->>'status' IS NULL THEN finished_at ELSE now() END
     WHERE run_id = p_run_id AND epoch = p_epoch;
    INSERT INTO outbox (topic, key, headers, value) VALUES (p_topic, p_key, p_headers, p_value)
    RETURNING id INTO box;
    RETURN box;
END $$;
