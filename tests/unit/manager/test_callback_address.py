"""Where a callback may connect: every form of an internal address is refused, unless allowlisted, and a
name is judged by the addresses it resolves to (a resolver the test controls stands in for DNS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path

import pytest

from contract.settings import Settings
from local_stack.stack import for_local_stack, local_stack
from manager.callback_address import (
    AddressPolicy,
    AddressRefusedError,
    IPAddress,
    is_public,
    vetted_address,
)

INTERNAL = [
    "127.0.0.1",  # loopback
    "127.0.0.2",  # an alias of it
    "10.1.2.3",  # RFC 1918
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # CGNAT
    "169.254.169.254",  # the EC2 metadata service
    "169.254.170.2",  # the ECS task metadata and credentials endpoint
    "0.0.0.0",  # unspecified: Linux connects it to this host
    "224.0.0.1",  # multicast
    "239.255.255.250",
    "240.0.0.1",  # reserved
    "255.255.255.255",  # broadcast
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "::1",  # loopback
    "::",  # unspecified
    "fe80::1",  # link-local
    "fc00::1",  # unique-local
    "fd00:ec2::254",  # the EC2 metadata service over IPv6 (a unique-local address)
    "fec0::1",  # deprecated site-local
    "ff02::1",  # multicast
    "ff0e::1",  # multicast, global scope
    "2001:db8::1",  # documentation
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:169.254.169.254",  # IPv4-mapped metadata
    "::ffff:10.0.0.1",
    "::127.0.0.1",  # IPv4-compatible (deprecated form)
    "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::808:808",  # NAT64 local-use prefix
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
]

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",  # IPv4-mapped public
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("address", INTERNAL)
def test_an_internal_address_in_any_form_is_refused(address: str):
    assert not is_public(ip_address(address))
    assert not AddressPolicy().permits(ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_a_public_unicast_address_in_any_form_is_permitted(address: str):
    assert AddressPolicy().permits(ip_address(address))


def test_the_allowlist_admits_its_networks_and_the_forms_that_stand_for_them():
    policy = AddressPolicy.of(["127.0.0.0/8", "fd00::/8"])
    for admitted in ("127.0.0.1", "127.0.0.80", "::ffff:127.0.0.2", "fd12::1"):
        assert policy.permits(ip_address(admitted)), admitted
    for refused in ("10.0.0.1", "169.254.169.254", "::1", "fe80::1", "::ffff:10.0.0.1"):
        assert not policy.permits(ip_address(refused)), refused
    assert policy.permits(ip_address("8.8.8.8"))  # the allowlist adds to the public addresses


@dataclass
class Resolving:
    """A resolver that answers from its table and keeps what it was asked."""

    table: dict[str, list[str]]
    asked: list[tuple[str, int]] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append((host, port))
        if host not in self.table:
            raise OSError(f"{host} does not resolve")
        return [ip_address(a) for a in self.table[host]]


async def test_a_name_that_resolves_to_an_internal_address_is_refused():
    resolve = Resolving({"rebind.example": ["169.254.169.254"], "mixed.example": ["10.0.0.1", "::1"]})
    for name in ("rebind.example", "mixed.example"):
        with pytest.raises(AddressRefusedError):
            await vetted_address(name, 443, AddressPolicy(), resolve)


async def test_a_name_is_connected_to_at_an_address_it_resolves_to_that_is_permitted():
    resolve = Resolving({"hooks.example": ["10.0.0.7", "93.184.216.34", "8.8.8.8"]})
    address = await vetted_address("hooks.example", 443, AddressPolicy(), resolve)
    assert address == ip_address("93.184.216.34")  # the internal one is skipped, never connected to
    assert resolve.asked == [("hooks.example", 443)]


async def test_an_ip_literal_is_judged_as_written_without_resolving():
    resolve = Resolving({})
    assert await vetted_address("8.8.8.8", 80, AddressPolicy(), resolve) == ip_address("8.8.8.8")
    for literal in ("127.0.0.1", "::ffff:127.0.0.1", "169.254.169.254"):
        with pytest.raises(AddressRefusedError):
            await vetted_address(literal, 80, AddressPolicy(), resolve)
    assert resolve.asked == []


async def test_a_legacy_numeric_ipv4_form_is_resolved_and_judged_by_what_it_means():
    """`2130706433` and `127.1` are not IP literals to `ipaddress`, but getaddrinfo reads them as
    127.0.0.1: they go through the resolver and are refused for the address it gives."""
    resolve = Resolving({"2130706433": ["127.0.0.1"], "127.1": ["127.0.0.1"]})
    for host in ("2130706433", "127.1"):
        with pytest.raises(AddressRefusedError):
            await vetted_address(host, 80, AddressPolicy(), resolve)


async def test_a_name_that_does_not_resolve_is_an_os_error_not_a_refusal():
    with pytest.raises(OSError):
        await vetted_address("nowhere.example", 443, AddressPolicy(), Resolving({}))


def test_make_up_allows_loopback_receivers_unless_the_operator_says_otherwise(tmp_path: Path):
    settings = for_local_stack(Settings(state_dir=tmp_path), {})
    manager = next(spec for spec in local_stack(settings) if spec.name == "manager")
    assert manager.env["SYNAPSE_CALLBACK_ALLOWED_NETWORKS"] == "127.0.0.0/8"
    chosen = {"SYNAPSE_CALLBACK_ALLOWED_NETWORKS": "10.20.0.0/16"}
    mine = Settings.from_env(chosen, state_dir=tmp_path)
    assert for_local_stack(mine, chosen).callback_allowed_networks == ("10.20.0.0/16",)
    assert Settings.from_env({}).callback_allowed_networks == ()  # elsewhere (AWS): public addresses only
