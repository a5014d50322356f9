"""Where HTTP targets may point: the operator's allow list and SSRF guards.

Checked twice: when a job is created (a clear 4xx for the client) and when it
fires, against the addresses the host name resolves to then (a name that
later resolves to a metadata or loopback address is still refused).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["AddressPolicy", "TargetRefused"]

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


class TargetRefused(ValueError):
    """The target's address is not allowed; the message says why and what to change."""


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
        hosts = frozenset(i.lower() for i in items if "/" not in i)
        networks = tuple(ipaddress.ip_network(i, strict=False) for i in items if "/" in i)
        return cls(hosts, networks, allow_private)

    def _host_listed(self, host: str) -> bool:
        return host in self.hosts or any(h.startswith(".") and host.endswith(h) for h in self.hosts)

    def check_url(self, url: str) -> str:
        """Validate an HTTP target URL; returns the lower-cased host."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise TargetRefused(f"target url must be http:// or https://, got {url!r}")
        host = (parts.hostname or "").lower()
        if not host:
            raise TargetRefused(f"target url has no host: {url!r}")
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise TargetRefused(f"target url has an invalid port: {url!r}") from exc
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            self.check_address(address, host)
            return host
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
        return host

    def check_address(self, address: IPAddress, host: str | None = None) -> None:
        """Check one concrete address (a literal, or what a name resolved to)."""
        listed = any(address in net for net in self.networks) or (
            host is not None and self._host_listed(host)
        )
        if listed:
            return
        shown = host or str(address)
        if address in _METADATA:
            raise TargetRefused(f"target {shown!r} is a cloud metadata address")
        special = (
            address.is_loopback
            or address.is_link_local
            or address.is_private
            or address.is_multicast
            or address.is_unspecified
            or address.is_reserved
        )
        if special and not self.allow_private:
            raise TargetRefused(
                f"target {shown!r} is a loopback, link-local or private address; the operator "
                "must allow it (VAKIT_HTTP_TARGET_ALLOW with a CIDR, or VAKIT_ALLOW_PRIVATE_TARGETS)"
            )
        if not special and not self._empty and host is not None and not self._host_listed(host):
            raise TargetRefused(f"target {shown!r} is not in the operator's allow list")
