-- depends: 0006_tool_calls
-- 1. The notification-scheduler's due-work channel (case C26): an inbox record that is pending and
-- due now, inserted or updated, sends NOTIFY threadline_inbox_due (payload: its thread id) at
-- commit. The scheduler LISTENs on a dedicated connection and catches up after a loss; its
-- timer still handles records that become due later.
CREATE FUNCTION threadline_inbox_due_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'pending' AND least(NEW.deliver_at, NEW.summary_at) <= now() THEN
        PERFORM pg_notify('threadline_inbox_due', NEW.thread_id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER notifications_due_notify
    AFTER INSERT OR UPDATE OF status, deliver_at, summary_at ON notifications
    FOR EACH ROW EXECUTE FUNCTION threadline_inbox_due_notify();

-- Big payloads by reference: a Kafka record body over max_record_bytes is
-- stored here and the record carries its id (header tl-payload-ref). Rows are immutable.
CREATE TABLE payloads (
    id         text PRIMARY KEY,
    topic      text,
    size       integer NOT NULL,
    body       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
