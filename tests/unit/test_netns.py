"""The pure part of the partition harness (threadline.testing.netns): addresses and ip commands."""

from __future__ import annotations

import pytest

from threadline.testing.netns import (
    Network,
    cut_commands,
    free_index,
    join_commands,
    ns_addresses,
    setup_commands,
)

pytestmark = pytest.mark.unit


def test_a_namespace_gets_its_own_29() -> None:
    assert ns_addresses(7) == ("10.231.7.1", "10.231.7.2", "10.231.7.3")
    with pytest.raises(ValueError):
        ns_addresses(255)
    with pytest.raises(ValueError):
        ns_addresses(0)


def test_free_index_skips_namespaces_in_use() -> None:
    assert free_index(["127.0.0.1", "192.0.2.2"]) == 1
    assert free_index(["10.231.1.1", "10.231.2.1", "10.231.4.1"]) == 3
    with pytest.raises(RuntimeError):
        free_index([f"10.231.{i}.1" for i in range(1, 255)])


def test_peers_get_addresses_in_order() -> None:
    net = Network(peers=("kafka", "postgres"))
    assert (net.address("kafka"), net.address("postgres")) == ("10.231.255.1", "10.231.255.2")
    with pytest.raises(KeyError):
        net.address("model")


def test_a_cut_routes_to_nowhere_and_blackholes_the_replies_and_a_join_undoes_both() -> None:
    cut = cut_commands("tlw", 3, "10.231.255.1")
    assert cut == [["ip", "-n", "tlw", "route", "replace", "10.231.255.1/32", "via", "10.231.3.3", "dev", "tlwn"],
                   ["ip", "rule", "add", "from", "10.231.255.1", "to", "10.231.3.2", "blackhole"]]
    join = join_commands("tlw", 3, "10.231.255.1", was_cut=True)
    assert join[0][-4:] == ["via", "10.231.3.1", "dev", "tlwn"]
    assert join[1] == ["ip", "rule", "del", *cut[1][3:]]
    assert len(join_commands("tlw", 3, "10.231.255.1", was_cut=False)) == 1  # no rule to delete


def test_setup_pins_the_nowhere_gateway_to_a_mac_nobody_has() -> None:
    [*_, neigh] = setup_commands("tlw", 3)
    assert neigh[:5] == ["ip", "-n", "tlw", "neigh", "replace"] and "10.231.3.3" in neigh and "permanent" in neigh
