"""The Postgres store (asyncpg), SQL only: pool lifecycle, one module per table group, and
:mod:`~threadline.store.queries`, the read model. The use cases that read, decide, write and
publish around it are in :mod:`threadline.flows`."""

from threadline.store.db import Database

__all__ = ["Database"]
