"""The notification inbox's pure logic: delivery policies, rendering and digests. The records'
access API for applications is :mod:`threadline.store.inbox_access` (list, read and mark, used by
the client, the CLI and the agent tool :mod:`threadline.flows.inbox_tool`); the scheduler's and
ingress's transactions are :mod:`threadline.flows.inbox`."""
