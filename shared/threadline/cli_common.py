"""What every ``threadline`` command shares: one JSON line per reply or error, and the guard that
turns bad input, refusals and an unreachable Kafka or PostgreSQL into an error line and an exit code
(2; 3 when no reply came in time), never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Coroutine, Iterator

import orjson
import typer

from threadline.config import get_settings

__all__ = ["Unreachable", "_fail", "_guard", "_print", "_run"]


def _print(obj: object) -> None:
    if hasattr(obj, "dump"):
        obj = obj.dump()
    sys.stdout.write(orjson.dumps(obj, default=str).decode() + "\n")
    sys.stdout.flush()


def _fail(message: str, code: int = 1) -> None:
    _print({"type": "error", "message": message})
    raise typer.Exit(code)


class Unreachable(Exception):  # noqa: N818 - reads as the condition it reports
    """A store the command needs could not be reached (``code``, one-line ``message``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _pg_address() -> str:
    """host:port of the configured PostgreSQL, of each server with a standby (never the user or
    password of the DSN)."""
    from threadline.store.dsn import describe

    try:
        return describe(get_settings().pg_dsn)
    except ValueError:
        return "(unparsable THREADLINE_PG_DSN)"


@contextlib.contextmanager
def _reaching_postgres() -> Iterator[None]:
    """Turn a failed PostgreSQL connection into :class:`Unreachable` naming the address."""
    import asyncpg
    import psycopg

    try:
        yield
    except (OSError, asyncpg.exceptions.PostgresConnectionError, asyncpg.InterfaceError,
            asyncpg.exceptions.InvalidAuthorizationSpecificationError, psycopg.OperationalError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unreachable("postgres_unavailable", f"cannot reach PostgreSQL at {_pg_address()} "
                                                  f"(is the cluster up? `make up`): {reason}") from None


def _broker_error(message: str) -> dict[str, str]:
    return {"type": "error", "code": "broker_unavailable",
            "message": f"{message.splitlines()[0]} (is the cluster up? `make up`)"}


@contextlib.contextmanager
def _guard() -> Iterator[None]:
    """Bad input, refusals and an unreachable Kafka or PostgreSQL print one error line (JSON) and
    exit 2 (3: no reply in time), never a traceback."""
    from aiokafka.errors import KafkaConnectionError
    from pydantic import ValidationError

    from threadline.client.client import BrokerUnavailableError, RequestFailed

    try:
        with _reaching_postgres():
            yield
    except RequestFailed as exc:
        _print(exc.reply)
        raise typer.Exit(2) from None
    except BrokerUnavailableError as exc:
        _print(_broker_error(str(exc)))
        raise typer.Exit(2) from None
    except KafkaConnectionError:
        _print(_broker_error(f"cannot reach the Kafka broker at {get_settings().kafka_bootstrap}"))
        raise typer.Exit(2) from None
    except Unreachable as exc:
        _print({"type": "error", "code": exc.code, "message": str(exc)})
        raise typer.Exit(2) from None
    except ValidationError as exc:
        _print({"type": "error", "code": "validation_failed",
                "message": "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])})
        raise typer.Exit(2) from None
    except (ValueError, orjson.JSONDecodeError) as exc:
        _print({"type": "error", "code": "invalid_argument", "message": str(exc)})
        raise typer.Exit(2) from None
    except TimeoutError:
        _fail("no reply from ingress (is the cluster up? `make up`)", 3)


def _run(coro: Coroutine[object, object, object]) -> None:
    """Run a command's coroutine under :func:`_guard`."""
    with _guard():
        asyncio.run(coro)
