"""The notification inbox: delivery policies, rendering and digests (pure logic), and the records'
access API for applications (:mod:`threadline.store.inbox_access`: list, read and mark, used by the
client, the CLI and the agent tool). The scheduler's and ingress's writes are in
:mod:`threadline.flows.inbox`."""
