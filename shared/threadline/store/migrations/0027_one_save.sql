-- depends: 0026_save_step_announce
-- The step's two statements, each defined here once (docs/decisions.md, 106): the claim
-- (threadline_begin_step, as 0013 left it; 0011 and 0013 defined it before and no longer carry
-- its text) and the save (threadline_save_step, which replaces 0011's threadline_save_step,
-- 0013's threadline_save_step_continue, 0017's threadline_save_step_claim and 0026's
-- threadline_save_step_announce; those migrations no longer carry them). An expand migration
-- (docs/decisions.md, 113): a database upgraded from 0026 keeps the four, which a worker of the
-- previous release still calls while the release rolls out; the contract migration
-- contract/0028_retired_saves.sql drops them once none runs.
-- Each runs in the statement's own transaction and takes its locks in the order the rest of the
-- code does (the thread lease first, then the run row, decision 60). threadline.store.steps
-- calls them.

-- Claim the run's current step and load everything it reads.
--   outcome: 'claimed' | 'aborted' (aborted while its task was in flight; terminal chunks owed)
--            | 'skipped' (stale or duplicate task) | 'stale' (the run no longer holds the thread,
--            or the step is no longer this worker's) | 'busy' (another live worker has it;
--            heartbeat = what was seen).
-- The run's columns come back for every outcome but 'skipped'; the rest only when claimed.
-- A step task of a step that a worker continued (the run is past it and continued_from names
-- it) claims the run's current step: a worker killed in the middle of a continued step has its
-- step task redelivered, and that takes the step over as it would take over a step of its own
-- (heartbeat stood still or handed back; decision 32).
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

-- Store what a step produced and apply the worker's plan for it, in one statement. The plan is
-- decided in Python (threadline.orchestration.runs.plan_save, the orchestrator's rules); this
-- function holds no rule of its own: it writes, and checks that the row is still the one the
-- plan assumed (compare-and-set guards) before each optional part.
--   The fence (always): the run holds the thread at p_epoch (the lease renewed by p_ttl_s) and
--     p_attempt is the step's current attempt; else SQLSTATE 'TLSTW' (stale writer) and nothing
--     is written.
--   The store (always): p_messages [{id, role, type, content}] in list order (the run's
--     input/response messages; this run's rows not in it are deleted); p_consumed: the signal
--     ids the step consumed, NULL = every signal still pending for the run; p_state, p_next_seq,
--     steps_done = p_step + 1; p_final: NULL, or {status, finish_reason, error, text, usage,
--     tripwire} when the run ends.
--   p_claim NULL, or {owner, seq_block}: the run's next step claimed for owner (step + 1,
--     attempt 1, started, heartbeat now, next_seq + seq_block, continued_from keeping the
--     chain's first step) — guard: the run is running at p_epoch at p_step. claimed says
--     whether it was; next_signals: the run's pending signals, drained by the claimed step.
--   p_announce NULL, or {applied, topic, headers, start_rows, own}: the stored step announced
--     instead of its result queued (p_life: the lifecycle records, the run's start's first
--     start_rows of them, then step_finished) — guards: the next step was claimed above, the run's
--     results_applied = applied, and no lifecycle row of p_key that is not in own (the caller's
--     own, published in order by it) waits to be published. results_applied moves to
--     p_step + 1; the start's records are queued only while start_announced is false (the plan
--     gives the records for both values of the one column the worker cannot know), and it is set.
--     announced: the outbox ids queued.
--   box: the step result's outbox id (p_topic, p_key, p_headers, p_value), NULL when announced.
CREATE FUNCTION threadline_save_step(p_run_id text, p_epoch bigint, p_step integer, p_attempt integer,
                                     p_ttl_s double precision, p_messages jsonb, p_consumed text[],
                                     p_state jsonb, p_next_seq bigint, p_final jsonb,
                                     p_topic text, p_key text, p_headers jsonb, p_value bytea,
                                     p_claim jsonb, p_announce jsonb, p_life bytea[],
                                     OUT box bigint, OUT claimed boolean, OUT next_signals jsonb,
                                     OUT announced bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_thread text; v_resource text; v_epoch bigint; v_step integer; v_attempt integer; v_status text;
    v_applied integer; v_started boolean;
    ann boolean := false;
    seq_block bigint := coalesce((p_claim->>'seq_block')::bigint, 0);
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
    SELECT x.thread_id, x.resource_id, x.epoch, x.step, x.attempt, x.status, x.results_applied, x.start_announced
      INTO v_thread, v_resource, v_epoch, v_step, v_attempt, v_status, v_applied, v_started
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
    claimed := p_claim IS NOT NULL AND v_status = 'running' AND v_epoch = p_epoch AND v_step = p_step;
    IF claimed AND p_announce IS NOT NULL AND v_applied IS NOT DISTINCT FROM (p_announce->>'applied')::integer THEN
        ann := NOT EXISTS (SELECT 1 FROM outbox o WHERE o.key = p_key AND o.published_at IS NULL
                             AND o.topic = p_announce->>'topic'
                             AND NOT (o.id = ANY(ARRAY(SELECT jsonb_array_elements_text(p_announce->'own')::bigint))));
    END IF;
    UPDATE runs u SET state = p_state, steps_done = p_step + 1, updated_at = now(),
           next_seq = p_next_seq + CASE WHEN claimed THEN seq_block ELSE 0 END,
           step = CASE WHEN claimed THEN p_step + 1 ELSE u.step END,
           attempt = CASE WHEN claimed THEN 1 ELSE u.attempt END,
           step_started = CASE WHEN claimed THEN true ELSE u.step_started END,
           continued_from = CASE WHEN claimed THEN coalesce(u.continued_from, p_step) ELSE u.continued_from END,
           step_owner = CASE WHEN claimed THEN p_claim->>'owner' ELSE u.step_owner END,
           step_heartbeat = CASE WHEN claimed THEN now() ELSE u.step_heartbeat END,
           results_applied = CASE WHEN ann THEN p_step + 1 ELSE u.results_applied END,
           start_announced = CASE WHEN ann THEN true ELSE u.start_announced END,
           status = coalesce(p_final->>'status', u.status),
           finish_reason = coalesce(p_final->>'finish_reason', u.finish_reason),
           text = coalesce(p_final->>'text', u.text),
           usage = coalesce(nullif(p_final->'usage', 'null'::jsonb), u.usage),
           error = coalesce(nullif(p_final->'error', 'null'::jsonb), u.error),
           tripwire = coalesce(nullif(p_final->'tripwire', 'null'::jsonb), u.tripwire),
           tripwire_processor_id = coalesce(p_final->'tripwire'->>'processorId', u.tripwire_processor_id),
           finished_at = CASE WHEN p_final->>'status' IS NULL THEN u.finished_at ELSE now() END
     WHERE u.run_id = p_run_id AND u.epoch = p_epoch;
    IF ann THEN
        announced := '{}';
        FOR k IN CASE WHEN v_started THEN (p_announce->>'start_rows')::integer + 1 ELSE 1 END
                 .. coalesce(array_length(p_life, 1), 0) LOOP
            INSERT INTO outbox (topic, key, headers, value)
            VALUES (p_announce->>'topic', p_key, p_announce->'headers'->(k - 1), p_life[k])
            RETURNING id INTO bid;
            announced := announced || bid;
        END LOOP;
    ELSE
        INSERT INTO outbox (topic, key, headers, value) VALUES (p_topic, p_key, p_headers, p_value)
        RETURNING id INTO box;
    END IF;
    IF claimed THEN  -- the next step's signals, as threadline_begin_step drains them at a step > 0
        SELECT coalesce(jsonb_agg(jsonb_build_object('id', s.id, 'payload', s.payload) ORDER BY s.seq), '[]')
          INTO next_signals
          FROM signals s WHERE s.run_id = p_run_id AND s.status = 'pending';
        IF next_signals <> '[]'::jsonb THEN
            UPDATE signals s SET drained_step = p_step + 1
             WHERE s.id IN (SELECT x->>'id' FROM jsonb_array_elements(next_signals) x) AND s.drained_step IS NULL;
        END IF;
    END IF;
END $$;
