"""Network partitions for tests: a process in its own network namespace, joined to the host by a
veth pair, cut off from chosen peers (Kafka, PostgreSQL, the model server…) and joined again.

Needs root and ``ip`` (iproute2); ``tc netem``, iptables and nft are not needed.

* :class:`Network` — the peers: one stable address each on the host's ``lo``
  (``10.231.255.<n>``), reachable from the host and from every namespace; a peer that only listens
  on loopback (the shared PostgreSQL, the model server) is exposed there by a :class:`Forwarder`;
  Kafka listens on its peer address itself (it advertises its address to clients, a forwarder
  cannot), e.g. ``KafkaCluster(host=network.address("kafka"))``.
* :class:`Namespace` — one namespace (``10.231.<i>.2`` inside, ``10.231.<i>.1`` on the host side),
  :meth:`Namespace.command` to run a process in it, :meth:`Namespace.cut` / :meth:`Namespace.rejoin`
  per peer, :meth:`Namespace.cut_for` for N seconds.
* :func:`cut_commands` / :func:`join_commands` — the pure part: the ``ip`` commands of each.

A cut is silent, as a real partition is: the namespace routes the peer's address to a gateway
that does not exist (a permanent neighbour entry with a MAC nobody has), so its packets leave and
vanish; a new connection hangs until its timeout, an open one retransmits into the void. The host
drops the peer's packets to the namespace (an ``ip rule … blackhole`` from the peer's address to the
namespace's). The namespace's other peers stay reachable. :meth:`Namespace.rejoin` restores the
route and deletes the rule; open TCP connections carry on if they have not timed out.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

PEER_NET = "10.231.255"
"""The peers' addresses: ``PEER_NET.<n>``, one ``/32`` each on the host's ``lo``."""
NS_NET = "10.231"
"""Namespace ``i`` (1..254) has the ``/29`` ``NS_NET.<i>.0``: host side ``.1``, inside ``.2``."""
NOWHERE_MAC = "02:00:00:00:0e:e7"
"""The MAC of the gateway a cut routes through: locally administered, on no interface."""


def ns_addresses(index: int) -> tuple[str, str, str]:
    """Namespace ``index``'s host-side, inside and nowhere-gateway addresses (no prefix length).

    Raises ``ValueError`` outside 1..254."""
    if not 1 <= index <= 254:
        raise ValueError(f"namespace index must be 1..254, got {index}")
    return f"{NS_NET}.{index}.1", f"{NS_NET}.{index}.2", f"{NS_NET}.{index}.3"


def free_index(used_addresses: Sequence[str]) -> int:
    """The lowest namespace index whose host-side address is not among ``used_addresses`` (the
    host's IPv4 addresses). Raises ``RuntimeError`` when all 254 are taken."""
    used = set(used_addresses)
    for i in range(1, 255):
        if ns_addresses(i)[0] not in used:
            return i
    raise RuntimeError("no free namespace index under 10.231.0.0/16")


def setup_commands(name: str, index: int) -> list[list[str]]:
    """The ``ip`` commands that create namespace ``name`` (index ``index``) and its veth pair
    ``<name>h`` (host) / ``<name>n`` (inside), both up, with no route to any peer yet."""
    host, inside, nowhere = ns_addresses(index)
    h, n = f"{name}h", f"{name}n"
    return [["ip", "netns", "add", name],
            ["ip", "link", "add", h, "type", "veth", "peer", "name", n],
            ["ip", "link", "set", n, "netns", name],
            ["ip", "addr", "add", f"{host}/29", "dev", h],
            ["ip", "link", "set", h, "up"],
            ["ip", "-n", name, "addr", "add", f"{inside}/29", "dev", n],
            ["ip", "-n", name, "link", "set", n, "up"],
            ["ip", "-n", name, "link", "set", "lo", "up"],
            ["ip", "-n", name, "neigh", "replace", nowhere, "lladdr", NOWHERE_MAC, "dev", n, "nud", "permanent"]]


def join_commands(name: str, index: int, peer: str, *, was_cut: bool) -> list[list[str]]:
    """The commands that route namespace ``name``'s traffic to ``peer`` (an address) over the veth
    (and, when ``was_cut``, delete the host's blackhole rule of :func:`cut_commands`)."""
    host, inside, _ = ns_addresses(index)
    out = [["ip", "-n", name, "route", "replace", f"{peer}/32", "via", host, "dev", f"{name}n"]]
    if was_cut:
        out.append(["ip", "rule", "del", "from", peer, "to", inside, "blackhole"])
    return out


def cut_commands(name: str, index: int, peer: str) -> list[list[str]]:
    """The commands that cut namespace ``name`` off from ``peer`` (an address), both ways, silently."""
    _, inside, nowhere = ns_addresses(index)
    return [["ip", "-n", name, "route", "replace", f"{peer}/32", "via", nowhere, "dev", f"{name}n"],
            ["ip", "rule", "add", "from", peer, "to", inside, "blackhole"]]


def _ip(*commands: Sequence[str], check: bool = True) -> None:
    for argv in commands:
        done = subprocess.run(list(argv), capture_output=True, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace').strip()}")


def host_addresses() -> list[str]:
    """The host namespace's IPv4 addresses."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, check=True, text=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


class Forwarder:
    """A TCP forwarder in a thread of the caller: accepts on ``listen`` (``(host, port)``, port 0 for
    any) and pipes each connection to ``target`` both ways; a peer's stand-in for a server that
    only listens on loopback. :meth:`close` stops accepting and closes every open pipe."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server(listen, reuse_port=False)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"forward-{self.address[1]}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((conn, upstream))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            for s in self._open:
                s.close()
            self._open.clear()


@dataclass
class Network:
    """The peers a namespace can be cut from: ``peers`` names them in order (``kafka`` gets
    ``10.231.255.1``, the next ``.2``…); :meth:`open` puts their addresses on the host's ``lo``.
    Use as a context manager (``close`` deletes the addresses it added and its namespaces)."""

    peers: Sequence[str] = ("kafka", "postgres", "model")
    namespaces: list[Namespace] = field(default_factory=list)
    forwarders: list[Forwarder] = field(default_factory=list)
    _added: list[str] = field(default_factory=list)

    def address(self, peer: str) -> str:
        """The peer's address. Raises ``KeyError`` for a peer not in ``peers``."""
        if peer not in self.peers:
            raise KeyError(peer)
        return f"{PEER_NET}.{list(self.peers).index(peer) + 1}"

    def open(self) -> Network:
        have = set(host_addresses())
        for peer in self.peers:
            addr = self.address(peer)
            if addr not in have:
                _ip(["ip", "addr", "add", f"{addr}/32", "dev", "lo"])
                self._added.append(addr)
        return self

    def forward(self, peer: str, port: int, *, target: tuple[str, int] | None = None) -> int:
        """Expose ``127.0.0.1:port`` (or ``target``) on the peer's address; returns the port it
        listens on there (a free one)."""
        fwd = Forwarder((self.address(peer), 0), target or ("127.0.0.1", port))
        self.forwarders.append(fwd)
        return fwd.address[1]

    def namespace(self, name: str) -> Namespace:
        """Create namespace ``name`` (at most 12 characters: its veth ends are ``<name>h`` and
        ``<name>n``) joined to every peer. Raises ``RuntimeError`` when ``ip`` fails."""
        if len(name) > 12:
            raise ValueError(f"namespace name over 12 characters: {name!r}")
        ns = Namespace(name=name, index=free_index(host_addresses()),
                       peers={p: self.address(p) for p in self.peers})
        self.namespaces.append(ns)
        ns.create()
        return ns

    def close(self) -> None:
        for ns in self.namespaces:
            ns.delete()
        for fwd in self.forwarders:
            fwd.close()
        for addr in self._added:
            _ip(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=False)
        self.namespaces, self.forwarders, self._added = [], [], []

    def __enter__(self) -> Network:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Namespace:
    """One network namespace and its veth pair (made by :meth:`Network.namespace`).

    ``peers`` maps each peer's name to its address; ``cut_at`` holds the monotonic time each cut
    peer was cut."""

    name: str
    index: int
    peers: dict[str, str]
    cut_at: dict[str, float] = field(default_factory=dict)

    def create(self) -> None:
        try:
            _ip(*setup_commands(self.name, self.index))
            for addr in self.peers.values():
                _ip(*join_commands(self.name, self.index, addr, was_cut=False))
        except RuntimeError:
            self.delete()
            raise

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec``)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, *peers: str) -> None:
        """Cut the namespace off from ``peers`` (names; every peer when none). Idempotent."""
        for peer in peers or tuple(self.peers):
            if peer not in self.cut_at:
                _ip(*cut_commands(self.name, self.index, self.peers[peer]))
                self.cut_at[peer] = time.monotonic()

    def rejoin(self, *peers: str) -> dict[str, float]:
        """Join ``peers`` again (every cut one when none); returns how long each was cut, in seconds."""
        took = {}
        for peer in peers or tuple(self.cut_at):
            if peer in self.cut_at:
                _ip(*join_commands(self.name, self.index, self.peers[peer], was_cut=True))
                took[peer] = time.monotonic() - self.cut_at.pop(peer)
        return took

    @contextmanager
    def partitioned(self, *peers: str) -> Iterator[None]:
        """Cut ``peers`` for the ``with`` block; rejoined whatever happens in it."""
        self.cut(*peers)
        try:
            yield
        finally:
            self.rejoin(*(peers or tuple(self.peers)))

    def cut_for(self, seconds: float, *peers: str) -> float:
        """Cut ``peers`` for ``seconds`` (blocking), rejoin them; returns the seconds they were cut."""
        with self.partitioned(*peers):
            time.sleep(seconds)
        return seconds

    def delete(self) -> None:
        """Delete the namespace (its veth pair goes with it) and the host rules of its cuts."""
        _, inside, _ = ns_addresses(self.index)
        for peer in list(self.cut_at):
            _ip(["ip", "rule", "del", "from", self.peers[peer], "to", inside, "blackhole"], check=False)
        self.cut_at.clear()
        _ip(["ip", "netns", "del", self.name], check=False)
        _ip(["ip", "link", "del", f"{self.name}h"], check=False)
