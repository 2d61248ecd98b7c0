-- depends: 0006_tool_calls
-- The inbox's `hold` action (docs/decisions.md §10): a held record stays pending and unscheduled until the
-- notification-scheduler re-asks the agent's delivery policy when the thread goes idle.
ALTER TABLE notifications ADD COLUMN held boolean NOT NULL DEFAULT false;
CREATE INDEX notifications_held ON notifications (thread_id) WHERE held AND status = 'pending';
