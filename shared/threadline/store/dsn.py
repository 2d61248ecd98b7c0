"""libpq connection URIs with one host or several (a primary and its standbys): pure functions.

A PostgreSQL with a standby is reached through a multi-host URI, as libpq, psycopg and asyncpg
all read it::

    postgresql://threadline:threadline@127.0.0.1:15432,127.0.0.1:15433/threadline?target_session_attrs=read-write

A new connection tries the hosts in order and keeps the first that accepts writes; so after a
failover the next connection a pool makes lands on the promoted standby (docs/operations.md,
"A PostgreSQL standby"). Nothing here opens a connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

DEFAULT_PORT = 5432
_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True, slots=True)
class PgAddress:
    """One server of a URI: ``host`` (a name, an IPv4 address, or an IPv6 one without brackets)
    and its TCP ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class _Parts:
    scheme: str
    userinfo: str
    """``user[:password]`` as written (still percent-encoded), or empty."""
    hostspec: str
    database: str
    query: str


def _split(dsn: str) -> _Parts:
    scheme = next((s for s in _SCHEMES if dsn.startswith(s)), None)
    if scheme is None:
        raise ValueError(f"not a postgresql:// URI: {dsn[:20]!r}…")
    rest = dsn[len(scheme):]
    rest, _, query = rest.partition("?")
    netloc, _, database = rest.partition("/")
    userinfo, at, hostspec = netloc.rpartition("@")
    return _Parts(scheme, userinfo if at else "", hostspec, database, query)


def _join(p: _Parts) -> str:
    user = f"{p.userinfo}@" if p.userinfo else ""
    return f"{p.scheme}{user}{p.hostspec}/{p.database}" + (f"?{p.query}" if p.query else "")


def _one(item: str) -> PgAddress:
    if item.startswith("["):
        host, _, port = item[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise ValueError(f"bad port in host {item!r}")
    return PgAddress(host or "localhost", int(port) if port else DEFAULT_PORT)


def addresses(dsn: str) -> tuple[PgAddress, ...]:
    """The servers ``dsn`` names, in the order a connection tries them.

    Reads the hosts of the authority (``h1:p1,h2:p2``) or, when the query names them, its
    ``host`` and ``port`` parameters (comma lists, as libpq takes them; one port for all hosts).

    Raises:
        ValueError: not a ``postgresql://`` URI, or a port that is not a number.
    """
    p = _split(dsn)
    params = dict(parse_qsl(p.query))
    if "host" in params:
        hosts = params["host"].split(",")
        ports = params.get("port", "").split(",") if params.get("port") else [str(DEFAULT_PORT)]
        if len(ports) == 1:
            ports = ports * len(hosts)
        if len(ports) != len(hosts):
            raise ValueError(f"{len(hosts)} hosts but {len(ports)} ports")
        return tuple(_one(f"[{h}]:{pt}" if ":" in h else f"{h}:{pt}") for h, pt in zip(hosts, ports, strict=True))
    if not p.hostspec:
        return (PgAddress("localhost", DEFAULT_PORT),)
    return tuple(_one(item) for item in p.hostspec.split(","))


def describe(dsn: str) -> str:
    """``host:port`` of every server of ``dsn``, comma-separated: for messages (never the user
    or password). Raises as :func:`addresses`."""
    return ",".join(str(a) for a in addresses(dsn))


def with_database(dsn: str, name: str) -> str:
    """``dsn`` naming database ``name`` instead, with the same hosts, user and parameters."""
    p = _split(dsn)
    return _join(_Parts(p.scheme, p.userinfo, p.hostspec, name, p.query))


def multi_host(servers: list[PgAddress], *, user: str, password: str, database: str,
               target_session_attrs: str = "read-write") -> str:
    """A URI naming every server of ``servers`` (tried in that order), keeping only the one that
    matches ``target_session_attrs`` (``read-write``: the primary)."""
    if not servers:
        raise ValueError("no server given")
    hostspec = ",".join(str(a) for a in servers)
    query = urlencode({"target_session_attrs": target_session_attrs})
    return f"postgresql://{user}:{password}@{hostspec}/{database}?{query}"


def yoyo_uri(dsn: str) -> str:
    """The URI yoyo-migrations reads (scheme ``postgresql+psycopg``). yoyo parses the authority
    itself and takes one host only, so a multi-host ``dsn`` gives its hosts and ports as the
    ``host`` and ``port`` parameters, which yoyo hands to psycopg (and libpq) as they are."""
    p = _split(dsn)
    scheme = "postgresql+psycopg://"
    if "," not in p.hostspec:
        return _join(_Parts(scheme, p.userinfo, p.hostspec, p.database, p.query))
    servers = addresses(dsn)
    params = [(k, v) for k, v in parse_qsl(p.query) if k not in ("host", "port")]
    params += [("host", ",".join(a.host for a in servers)), ("port", ",".join(str(a.port) for a in servers))]
    return _join(_Parts(scheme, p.userinfo, "", p.database, urlencode(params, safe=",")))
