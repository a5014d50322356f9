"""Where HTTP targets may point: the operator's allow list and SSRF guards.

A URL is parsed once, by the parser the HTTP client uses (yarl), and what
the client would connect to is what is checked:

- at create time (a clear 4xx for the client), :meth:`AddressPolicy.parse`:
  an ASCII URL, a host written in its one canonical form (no Unicode dots
  or digits, no ``2130706433``, ``127.1``, ``0177.0.0.1`` or ``0``: each of
  them is some IPv4 address to ``inet_aton`` and to no reader of the URL), a
  literal address that the policy allows, a host name the allow list names;
- at connect time, :meth:`AddressPolicy.check_address` on every address a
  socket is about to connect to (the worker's socket factory calls it), so a
  name that resolves, or later re-resolves, to loopback, a private network or
  a metadata endpoint is refused whatever the name.

An address is allowed when it is public (``ipaddress``' ``is_global``, not
multicast or reserved, and, for IPv6 forms that carry an IPv4 address --
mapped, compatible, 6to4, NAT64 -- the IPv4 address public too), or lies in a
network the operator listed (``VAKIT_HTTP_TARGET_ALLOW``), or is private and
the operator allows private targets (``VAKIT_ALLOW_PRIVATE_TARGETS``; cloud
metadata addresses stay refused unless listed). A host *name* in the allow
list says which names may be targeted, never which addresses: an internal
name needs its network listed as well.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from yarl import URL

__all__ = ["AddressPolicy", "AddressRefused", "Network", "TargetRefused", "is_public"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata endpoints: refused even where private addresses are allowed,
# unless listed explicitly.
_METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("169.254.170.2"),
    ipaddress.ip_address("100.100.100.200"),
    ipaddress.ip_address("fd00:ec2::254"),
}
_METADATA_NAMES = {"metadata.google.internal", "metadata", "instance-data"}

# Not globally reachable (IANA special-purpose registries), and not known as
# such to every Python this runs on (``is_global`` learnt some only in 3.13).
_NOT_GLOBAL: tuple[Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "192.0.0.0/24",  # IETF protocol assignments
        "100.64.0.0/10",  # carrier-grade NAT
        "2001::/23",  # IETF protocol assignments (Teredo among them)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing
    )
)
# IPv6 prefixes whose last 32 bits are an IPv4 address a translator connects to.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

# A host name's characters once the URL parser has encoded it: letters,
# digits, '-', '_' and dots (international names arrive as xn--).
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")
# WHATWG URL's "ends in a number": a host whose last label is a number is an
# IPv4 address to URL parsers and to inet_aton, in whatever base it is written.
_ENDS_IN_NUMBER = re.compile(r"(^|\.)([0-9]+|0x[0-9a-f]*)\.?$")


class TargetRefused(ValueError):
    """The target is not allowed; the message says why and what to change,
    ``field`` which part of the target it is about."""

    def __init__(self, message: str, field: str = "target.url") -> None:
        super().__init__(message)
        self.field = field


class AddressRefused(OSError):
    """A connection the policy refused, raised where the socket would be made
    (an ``OSError``, so the client tries the name's next address)."""


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form stands for, where a translator or the
    kernel would connect to it: mapped, compatible, 6to4, NAT64."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _NAT64) or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """Globally reachable; for an IPv6 form of an IPv4 address, the IPv4
    address is what is reached, and what is judged."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            return is_public(inner)
    if (
        not address.is_global
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address.is_loopback
        or address.is_link_local
        or any(address in net for net in _NOT_GLOBAL)
    ):
        return False
    return True


def _parse_error(url: str, why: str) -> TargetRefused:
    return TargetRefused(f"target url {url!r} {why}")


@dataclass(frozen=True)
class AddressPolicy:
    hosts: frozenset[str] = frozenset()  # exact names, or ".suffix" for a domain
    networks: tuple[Network, ...] = ()
    allow_private: bool = False
    _empty: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_empty", not self.hosts and not self.networks)

    @classmethod
    def from_list(cls, items: list[str], allow_private: bool = False) -> AddressPolicy:
        hosts: set[str] = set()
        networks: list[Network] = []
        for item in items:
            try:
                # A literal address is its own network: it never names a host.
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks), allow_private)

    def _host_listed(self, host: str) -> bool:
        return host in self.hosts or any(h.startswith(".") and host.endswith(h) for h in self.hosts)

    def _network_listed(self, address: IPAddress) -> bool:
        if any(address in net for net in self.networks):
            return True
        inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        return inner is not None and any(inner in net for net in self.networks)

    def parse(self, url: str) -> URL:
        """The URL as the HTTP client will read it, once its host is written
        canonically and allowed; :class:`TargetRefused` otherwise."""
        if not url.isascii():
            raise _parse_error(
                url,
                "must be ASCII: write an international host name in its xn-- form "
                "and percent-encode the path",
            )
        try:
            parsed = URL(url)
            port = parsed.port
        except ValueError as exc:
            raise _parse_error(url, f"is not a valid URL: {exc}") from exc
        if parsed.scheme not in ("http", "https"):
            raise _parse_error(url, "must be http:// or https://")
        raw = parsed.raw_host or ""
        if not raw:
            raise _parse_error(url, "has no host")
        if port is None or not 0 < port < 65536:
            raise _parse_error(url, "has an invalid port")
        if ":" in raw:  # an IPv6 literal (yarl dropped the brackets)
            try:
                address: IPAddress = ipaddress.IPv6Address(raw)
            except ValueError as exc:  # a zone id, or not an address at all
                raise _parse_error(url, "has an invalid IPv6 address") from exc
            self._check_literal(address, raw)
            return parsed
        host = raw.lower()
        if not _NAME.match(host):
            raise _parse_error(url, "has an invalid host name")
        if _ENDS_IN_NUMBER.search(host):
            try:
                address = ipaddress.IPv4Address(host)
            except ValueError:
                address = None  # type: ignore[assignment]
            if address is None or str(address) != host:
                raise _parse_error(
                    url,
                    "spells an IPv4 address in a non-canonical form; write it as four "
                    "decimal numbers (a.b.c.d)",
                )
            self._check_literal(address, host)
            return parsed
        self._check_name(host.rstrip("."))
        return parsed

    def _check_literal(self, address: IPAddress, host: str) -> None:
        self.check_address(address, host)
        # A non-public address got past check_address only by a listed
        # network or allow_private; a public one must be listed.
        if not self._empty and is_public(address) and not self._network_listed(address):
            raise TargetRefused(
                f"target {host!r} is not in the operator's allow list (VAKIT_HTTP_TARGET_ALLOW)"
            )

    def _check_name(self, host: str) -> None:
        if host in _METADATA_NAMES and not self._host_listed(host):
            raise TargetRefused(f"target host {host!r} is a cloud metadata endpoint")
        if (host == "localhost" or host.endswith(".localhost")) and not (
            self.allow_private or self._host_listed(host)
        ):
            raise TargetRefused(
                f"target host {host!r} is loopback; the operator must allow it "
                "(VAKIT_HTTP_TARGET_ALLOW or VAKIT_ALLOW_PRIVATE_TARGETS)"
            )
        if not self._empty and not self._host_listed(host):
            raise TargetRefused(
                f"target host {host!r} is not in the operator's allow list (VAKIT_HTTP_TARGET_ALLOW)"
            )

    def check_url(self, url: str) -> str:
        """Validate an HTTP target URL; returns the host as the client reads it."""
        return (self.parse(url).raw_host or "").lower().rstrip(".")

    def check_address(self, address: IPAddress, host: str | None = None) -> None:
        """Check one concrete address (a literal, or what a socket is about to
        connect to). ``host`` only names it in the message: a listed host name
        never lets a name reach a non-public address."""
        if self._network_listed(address):
            return
        shown = host or str(address)
        inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        if address in _METADATA or inner in _METADATA:
            raise TargetRefused(f"target {shown!r} is a cloud metadata address")
        if not is_public(address) and not self.allow_private:
            raise TargetRefused(
                f"target {shown!r} is not a public address (loopback, private, link-local, "
                "shared or special-purpose); the operator must allow it "
                "(VAKIT_HTTP_TARGET_ALLOW with a CIDR, or VAKIT_ALLOW_PRIVATE_TARGETS)"
            )
