"""The use cases: each reads through :mod:`threadline.store`, decides with a pure rule of
:mod:`threadline.orchestration` (or :mod:`threadline.inbox`), writes in one transaction and
publishes after commit through the outbox (:mod:`threadline.flows.publish`). The services call
these; the store below them holds only SQL."""
