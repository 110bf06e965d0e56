"""The client's address behind trusted proxies.

A request's socket peer is its client unless the peer is a trusted proxy
(``GAAMA_TRUSTED_PROXIES``, CIDRs). Then the forwarding chain is read right to left — each proxy
appends the address it received the request from — and the first address that is not itself a
trusted proxy is the client. Hops left of it are whatever the client chose to send and are
never believed. ``Forwarded`` (RFC 7239) is read when present, else ``X-Forwarded-For``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_address(text: str) -> Address | None:
    """An address from a header hop: bare, ``[v6]``, ``[v6]:port``, ``v4:port``; else None."""
    value = text.strip().strip('"')
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _forwarded_for(header: str) -> list[str]:
    """The ``for=`` values of an RFC 7239 ``Forwarded`` header, in order."""
    hops: list[str] = []
    for element in header.split(","):
        for pair in element.split(";"):
            name, _, value = pair.strip().partition("=")
            if name.strip().lower() == "for":
                hops.append(value)
    return hops


class TrustedProxies:
    """Decides a request's client address from its peer and forwarding headers."""

    def __init__(self, cidrs: Iterable[str]) -> None:
        self.networks: tuple[Network, ...] = tuple(
            ipaddress.ip_network(c, strict=False) for c in cidrs
        )

    def trusted(self, address: Address | None) -> bool:
        return address is not None and any(address in net for net in self.networks)

    def client(self, peer: str, headers: Mapping[str, str]) -> str:
        """The client's address: ``peer`` unless ``peer`` is a trusted proxy (module docstring).

        An unreadable hop (``unknown``, an obfuscated name, garbage) stops the walk: the
        proxy that appended it is taken as the client, so a malformed chain never yields an
        address a client chose.
        """
        if not self.networks or not self.trusted(_parse_address(peer)):
            return peer
        forwarded = headers.get("forwarded")
        hops = (
            _forwarded_for(forwarded)
            if forwarded
            else (headers.get("x-forwarded-for") or "").split(",")
        )
        client = peer
        for hop in reversed([h for h in hops if h.strip()]):
            address = _parse_address(hop)
            if address is None:
                return client
            client = str(address)
            if not self.trusted(address):
                return client
        return client
