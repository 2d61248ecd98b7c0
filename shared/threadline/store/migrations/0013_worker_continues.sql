-- depends: 0012_model_rate_buckets
-- The worker that stored a step continues the run's next step itself (docs/decisions.md, 31-33):
-- it claims the next step in the statement that stores the finished one, fenced like a step the
-- orchestrator hands out. Two columns on runs:
--   continued_from   the step of the step task whose handling the current step continues (a
--                    redelivered copy of that task stands for the chain); NULL: the current
--                    step had a step task of its own.
--   results_applied  the step results the orchestrator applied: the next one it applies is the
--                    result of this step (a later one waits; the sweeper redelivers the gap).
ALTER TABLE runs ADD COLUMN continued_from integer;
ALTER TABLE runs ADD COLUMN results_applied integer NOT NULL DEFAULT 0;
-- before this migration only the orchestrator advanced a run's step, having applied every
-- earlier result
UPDATE runs SET results_applied = step;

-- threadline_begin_step of 0011, but a step task of a step that a worker continued (the run is
-- past it and continued_from names it) claims the run's current step: a worker killed in the
-- middle of a continued step has its step task redelivered, and that takes the step over as it
-- would take over a step of its own (heartbeat stood still or handed back).
CREATE OR REPLACE FUNCTION threadline_begin_step(p_run_id text, p_step integer, p_epoch bigint, p_owner text,
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
    v_step integer := p_step;
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
    IF r.step > p_step AND r.continued_from IS NOT NULL AND r.continued_from = p_step THEN
        v_step := r.step;  -- the task's step was continued by a worker: the task stands for the chain
    END IF;
    IF r.status <> 'running' OR r.epoch <> p_epoch OR r.step <> v_step OR r.steps_done > v_step THEN
        outcome := 'skipped';
        RETURN;
    END IF;
    -- the fence: the run still holds the thread at its epoch (renewed)
    UPDATE thread_leases l SET expires_at = now() + make_interval(secs => p_ttl_s), updated_at = now()
     WHERE l.thread_id = r.thread_id AND l.run_id = r.run_id AND l.epoch = r.epoch;
    IF NOT FOUND THEN
        -- an abort that committed while this waited for the lease row: its terminal chunks are owed
        -- (0011 answered 'stale' here, and nobody ended the aborted run's stream)
        SELECT * INTO r FROM runs WHERE run_id = p_run_id;
        outcome := CASE WHEN r.status = 'aborted' AND NOT r.terminal_emitted THEN 'aborted' ELSE 'stale' END;
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
     WHERE u.run_id = p_run_id AND u.epoch = p_epoch AND u.step = v_step AND u.steps_done = v_step
       AND u.status = 'running'
    RETURNING u.attempt, u.next_seq - p_seq_block INTO attempt, seq_base;
    IF NOT FOUND THEN
        outcome := 'stale';
        RETURN;
    END IF;
    step := v_step; next_seq := r.next_seq; state := r.state;
    restarted := r.step_started;
    IF v_step = 0 THEN  -- the thread's stored messages, oldest first, not this run's
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
      FROM signals s WHERE s.run_id = p_run_id AND s.status = 'pending' AND (v_step > 0 OR s.mode <> 'deliver');
    signals := sigs;
    UPDATE signals s SET drained_step = v_step
     WHERE s.id IN (SELECT x->>'id' FROM jsonb_array_elements(sigs) x) AND s.drained_step IS NULL;
    IF restarted THEN
        SELECT mo.output INTO recorded FROM model_outputs mo WHERE mo.run_id = p_run_id AND mo.step = v_step;
    END IF;
    outcome := 'claimed';
END $$;

-- threadline_save_step, then (the step's outcome was 'continue' and the orchestrator would
-- schedule the next step: the caller asked) the next step: advanced as the orchestrator advances
-- it (step + 1, attempt 1, not started; continued_from remembers the chain's step task) and
-- claimed by p_owner through threadline_begin_step, all in the statement's one transaction.
-- box: the step result's outbox id; outcome: begin_step's ('claimed' normally), or NULL when the
-- run could not be advanced (then the orchestrator schedules the next step on the result).
-- Raises SQLSTATE 'TLSTW' like threadline_save_step; nothing is written then.
CREATE FUNCTION threadline_save_step_continue(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
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
BEGIN
    box := threadline_save_step(p_run_id, p_epoch, p_step, p_attempt, p_ttl_s, p_messages, p_consumed, p_state,
                                p_next_seq, NULL, p_topic, p_key, p_headers, p_value);
    BEGIN  -- advanced and claimed, or neither (a run advanced but not claimed would have no step task)
        UPDATE runs u SET step = u.step + 1, attempt = 1, step_started = false,
               continued_from = coalesce(u.continued_from, p_step), updated_at = now()
         WHERE u.run_id = p_run_id AND u.epoch = p_epoch AND u.step = p_step AND u.steps_done = p_step + 1
           AND u.status = 'running';
        IF NOT FOUND THEN
            RETURN;
        END IF;
        SELECT b.outcome, b.resource_id, b.thread_id, b.agent_id, b.epoch, b.step, b.next_seq, b.options, b.state,
               b.heartbeat, b.attempt, b.seq_base, b.restarted, b.history, b.history_at, b.signals, b.recorded
          INTO outcome, resource_id, thread_id, agent_id, epoch, step, next_seq, options, state, heartbeat, attempt,
               seq_base, restarted, history, history_at, signals, recorded
          FROM threadline_begin_step(p_run_id, p_step + 1, p_epoch, p_owner, p_ttl_s, NULL, p_seq_block, 0) b;
        IF outcome IS DISTINCT FROM 'claimed' THEN
            RAISE EXCEPTION 'next step of run % not claimed: %', p_run_id, outcome USING ERRCODE = 'TLNCL';
        END IF;
    EXCEPTION WHEN SQLSTATE 'TLNCL' THEN
        outcome := NULL;  -- the advance is rolled back with the block; the orchestrator schedules the step
    END;
END $$;
