"""Where a callback may connect: a public unicast address, or one in the operator's allowlist.

A callback URL is the tenant's to choose, so without a check the manager would POST wherever it is
told: to its own Redis, its metrics, the VPC's services, the EC2 and ECS metadata addresses. The check
is made on the address the connection goes to: the sender resolves the URL's host here, keeps only the
addresses this policy permits, and connects to one of those as an IP literal (manager/callbacks.py), so
a name that resolves to a public address when checked and to an internal one a moment later (DNS
rebinding) cannot slip through: nothing is resolved again between the check and the connect.

Python's `ipaddress` classifies most of it (`is_global`: RFC 1918, CGNAT 100.64/10, loopback,
link-local, unique-local, documentation and the other IANA special-purpose blocks that are not globally
reachable). Where it is not enough, on the Python this runs (3.11), the gaps are closed here:
multicast counts as global there (224/4, ff00::/8 with global scope), so is refused on its own;
fec0::/10 (deprecated site-local) counts as global; the forms that carry an IPv4 address inside an IPv6
one (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4
2002:aabb:ccdd::) count as global whatever IPv4 address they carry, so the IPv4 address is checked in
their place; and the NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215, not global in IANA's registry)
counts as global, so is refused by name.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

IPAddress = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

# Resolves a host name (and port) to the addresses a connection to it could go to.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

IPV4_COMPATIBLE = ip_network("::/96")  # RFC 4291 2.5.5.1, deprecated: ::a.b.c.d (:: and ::1 included)
NAT64 = ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 address in the last 32 bits
NAT64_LOCAL_USE = ip_network("64:ff9b:1::/48")  # RFC 8215; IANA: not globally reachable
SITE_LOCAL = ip_network("fec0::/10")  # RFC 3879 deprecated it; never globally reachable


class AddressRefusedError(Exception):
    """No address the host resolves to is one a callback may connect to."""


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, where it carries one: traffic to it reaches that
    IPv4 address (mapped: this very host's IPv4 stack; NAT64 and 6to4: through a translator)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in IPV4_COMPATIBLE or address in NAT64:
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def effective(address: IPAddress) -> IPAddress:
    """The address that a connection to `address` reaches: its embedded IPv4 address, if it has one."""
    if isinstance(address, IPv6Address):
        return embedded_ipv4(address) or address
    return address


def is_public(address: IPAddress) -> bool:
    """True for a globally reachable unicast address, in whatever form it is written."""
    address = effective(address)
    if address.is_multicast or not address.is_global:
        return False
    return not (isinstance(address, IPv6Address) and (address in SITE_LOCAL or address in NAT64_LOCAL_USE))


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Public unicast addresses, plus the networks the operator allowlisted (deliberate internal
    receivers: `SYNAPSE_CALLBACK_ALLOWED_NETWORKS`)."""

    allowed: tuple[Network, ...] = ()

    @classmethod
    def of(cls, cidrs: Iterable[str]) -> AddressPolicy:
        return cls(tuple(ip_network(cidr) for cidr in cidrs))

    def permits(self, address: IPAddress) -> bool:
        """An allowlisted network admits an address written in it or one that stands for an address in
        it (127.0.0.0/8 admits ::ffff:127.0.0.1 too)."""
        if is_public(address):
            return True
        forms = {address, effective(address)}
        return any(form in network for form in forms for network in self.allowed)


class SystemResolver:
    """The system's resolver (getaddrinfo, as a connection would use it), on threads of its own: a name
    whose DNS never answers holds one of them until the resolver gives up, never a thread of the event
    loop's default executor, which the rest of the manager shares. Sized to the deliveries in flight,
    each resolving one name at a time, so no resolution waits for a thread."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="callback-dns")

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        """The host's addresses, in the order getaddrinfo gives them."""
        lookup = partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        infos = await asyncio.get_running_loop().run_in_executor(self._pool, lookup)
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = ip_address(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
        return addresses

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def vetted_address(host: str, port: int, policy: AddressPolicy, resolver: Resolver) -> IPAddress:
    """The address to connect to for host: the first the policy permits of those it resolves to (an IP
    literal is its own). Raises AddressRefusedError when there is none, OSError when it does not resolve."""
    try:
        candidates = [ip_address(host)]
    except ValueError:  # a name, or a legacy IPv4 form (2130706433, 127.1) that getaddrinfo reads
        candidates = await resolver(host, port)
    for address in candidates:
        if policy.permits(address):
            return address
    raise AddressRefusedError(host)
