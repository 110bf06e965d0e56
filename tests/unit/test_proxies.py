"""The client address behind trusted proxies (services.runtime.proxies)."""

from __future__ import annotations

import pytest

from gaama.config import Settings
from services.runtime.proxies import TrustedProxies

PROXIES = TrustedProxies(["10.0.0.0/8", "fd00::/8"])


@pytest.mark.parametrize(
    ("peer", "headers", "client"),
    [
        # An untrusted peer's headers are ignored.
        ("8.8.8.8", {"x-forwarded-for": "1.2.3.4"}, "8.8.8.8"),
        # A trusted peer: the first untrusted hop from the right.
        ("10.1.1.1", {"x-forwarded-for": "1.2.3.4"}, "1.2.3.4"),
        ("10.1.1.1", {"x-forwarded-for": "9.9.9.9, 1.2.3.4, 10.2.2.2"}, "1.2.3.4"),
        # Every hop trusted: the leftmost.
        ("10.1.1.1", {"x-forwarded-for": "10.3.3.3, 10.2.2.2"}, "10.3.3.3"),
        # A trusted peer without headers.
        ("10.1.1.1", {}, "10.1.1.1"),
        # Unreadable hops stop the walk at the proxy that appended them.
        ("10.1.1.1", {"x-forwarded-for": "garbage"}, "10.1.1.1"),
        ("10.1.1.1", {"x-forwarded-for": "1.2.3.4, unknown, 10.2.2.2"}, "10.2.2.2"),
        # Ports and IPv6 forms.
        ("10.1.1.1", {"x-forwarded-for": "1.2.3.4:5555"}, "1.2.3.4"),
        ("fd00::1", {"x-forwarded-for": "2001:db8::7"}, "2001:db8::7"),
        # RFC 7239 Forwarded wins over X-Forwarded-For.
        (
            "10.1.1.1",
            {
                "forwarded": 'for=1.2.3.4;proto=https, for="[2001:db8::9]:443"',
                "x-forwarded-for": "5.5.5.5",
            },
            "2001:db8::9",
        ),
        ("10.1.1.1", {"forwarded": "for=1.2.3.4, for=10.9.9.9"}, "1.2.3.4"),
    ],
)
def test_client_address(peer: str, headers: dict[str, str], client: str) -> None:
    assert PROXIES.client(peer, headers) == client


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert TrustedProxies([]).client("10.1.1.1", {"x-forwarded-for": "1.2.3.4"}) == "10.1.1.1"


def test_settings_accept_comma_separated_cidrs() -> None:
    s = Settings(trusted_proxies="10.0.0.0/8, 192.168.1.0/24")  # type: ignore[arg-type]
    assert s.trusted_proxies == ["10.0.0.0/8", "192.168.1.0/24"]


def test_settings_refuse_a_bad_cidr() -> None:
    with pytest.raises(ValueError, match="not an IP network"):
        Settings(trusted_proxies="10.0.0.0/8,example.com")  # type: ignore[arg-type]
