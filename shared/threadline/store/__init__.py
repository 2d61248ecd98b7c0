"""The Postgres store (asyncpg): pool lifecycle and one module per table group."""

from threadline.store.db import Database

__all__ = ["Database"]
