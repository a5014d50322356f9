"""What each owner may target: the operator's grants, reserved Kafka topics,
and the request headers a job may not set.

Vakit makes outbound calls on many owners' behalf from one fleet of workers.
:class:`AddressPolicy` says where any target may point; a :class:`TargetScope`
narrows that per owner, so one owner cannot aim its firings (and the headers
they carry) at another owner's services or topics:

- ``grants``: per owner, HTTP hosts (``orders.internal``), domains
  (``.orders.example.com``), networks for literal addresses (``10.20.0.0/16``)
  and Kafka topic prefixes (``kafka:orders.``). An owner with HTTP grants may
  only name those hosts; one with topic prefixes may only produce to topics
  that start with one of them. An owner without grants of a kind keeps
  today's reach (the operator's allow list, any valid topic) unless
  ``require_grants`` is set, which refuses that kind to it.
- Kafka topics that start with ``_`` (``__consumer_offsets``, ``_schemas``:
  the broker's and its tools' own) and the names ``.`` and ``..`` are
  refused to everyone.
- Headers on the operator's deny list (credentials, hop-by-hop, proxy and
  forwarding headers; ``X-Forwarded-*`` style prefixes), Vakit's own
  (``Vakit-*``, ``Webhook-*``) and those that frame the request (``Host``,
  ``Content-Length``, ``Transfer-Encoding``, ``Connection``) may not be set
  in ``target.headers``.

The API checks a target at create time (a 422 that names the field); the
workers check again before firing, so a job created before a grant was
narrowed fails with the reason instead of reaching the old target.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from yarl import URL

from cluster.targets.policy import Network, TargetRefused

__all__ = [
    "DEFAULT_HEADER_DENY",
    "RESERVED_HEADERS",
    "Grant",
    "TargetScope",
    "check_topic_name",
]

# Credentials, hop-by-hop headers, and what proxies and load balancers trust
# about a request's origin. The operator can change the list.
DEFAULT_HEADER_DENY: tuple[str, ...] = (
    "Authorization",
    "Proxy-Authorization",
    "Proxy-*",
    "Cookie",
    "Set-Cookie",
    "Host",
    "Connection",
    "Keep-Alive",
    "Transfer-Encoding",
    "TE",
    "Trailer",
    "Upgrade",
    "Content-Length",
    "Expect",
    "Forwarded",
    "X-Forwarded-*",
    "X-Real-IP",
    "Via",
)
# Refused whatever the operator's list: the firing's own headers (the worker
# sets them) and those that decide how the request is framed and routed.
RESERVED_HEADERS: tuple[str, ...] = (
    "Vakit-*",
    "Webhook-*",
    "Host",
    "Content-Length",
    "Transfer-Encoding",
    "Connection",
)

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_topic_name(topic: str) -> None:
    """A topic a job may produce to, whoever its owner: a valid Kafka name,
    not one of the broker's own (``_…``), not ``.`` or ``..``."""
    if not _TOPIC.match(topic):
        raise TargetRefused(
            f"topic {topic!r} is not a valid Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)",
            field="target.topic",
        )
    if topic.startswith("_"):
        raise TargetRefused(
            f"topic {topic!r} is reserved: names starting with '_' belong to the broker "
            "and its tools",
            field="target.topic",
        )
    if topic in (".", ".."):
        raise TargetRefused(f"topic {topic!r} is not a usable topic name", field="target.topic")


class _HeaderRule:
    """Header names, case-insensitive; ``X-Forwarded-*`` matches a prefix."""

    def __init__(self, names: Iterable[str]) -> None:
        names = [n.strip().lower() for n in names if n.strip()]
        self.exact = frozenset(n for n in names if not n.endswith("*"))
        self.prefixes = tuple(n[:-1] for n in names if n.endswith("*"))

    def __contains__(self, name: str) -> bool:
        low = name.lower()
        return low in self.exact or low.startswith(self.prefixes)


@dataclass(frozen=True)
class Grant:
    """One owner's reach: host names and domains, networks for literal
    addresses, and Kafka topic prefixes."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()
    topic_prefixes: tuple[str, ...] = ()

    @property
    def http(self) -> bool:
        return bool(self.hosts or self.networks)

    @classmethod
    def parse(cls, items: Iterable[str]) -> Grant:
        hosts: set[str] = set()
        networks: list[Network] = []
        prefixes: list[str] = []
        for raw in items:
            item = raw.strip()
            if not item:
                continue
            if item.lower().startswith("kafka:"):
                prefix = item[len("kafka:") :]
                if not prefix or prefix.startswith("_"):
                    raise ValueError(f"invalid Kafka topic prefix in grant {raw!r}")
                prefixes.append(prefix)
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks), tuple(prefixes))

    def allows_host(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self.hosts or any(
                h.startswith(".") and host.endswith(h) for h in self.hosts
            )
        return any(address in net for net in self.networks)


class TargetScope:
    """Per-owner grants, reserved topics and refused headers (module doc)."""

    def __init__(
        self,
        grants: Mapping[str, Iterable[str]] | None = None,
        *,
        require_grants: bool = False,
        header_deny: Iterable[str] = DEFAULT_HEADER_DENY,
    ) -> None:
        self.grants = {owner: Grant.parse(items) for owner, items in (grants or {}).items()}
        self.require_grants = require_grants
        self._deny = _HeaderRule(header_deny)
        self._reserved = _HeaderRule(RESERVED_HEADERS)

    def check_http(self, owner: str, url: URL) -> None:
        """``url`` as the policy parsed it (:meth:`AddressPolicy.parse`)."""
        if (url.raw_user or url.raw_password) and "Authorization" in self._deny:
            # The client turns user:password@ into an Authorization header.
            raise TargetRefused(
                "credentials in the target url are an Authorization header, which "
                "target.headers may not set either (VAKIT_TARGET_HEADER_DENY)",
                field="target.url",
            )
        grant = self.grants.get(owner)
        host = (url.raw_host or "").lower().rstrip(".")
        if grant is None or not grant.http:
            if self.require_grants:
                raise TargetRefused(
                    f"owner {owner!r} has no HTTP hosts granted (VAKIT_TARGET_GRANTS)",
                    field="target.url",
                )
            return
        if not grant.allows_host(host):
            raise TargetRefused(
                f"target host {host!r} is not among the hosts granted to {owner!r} "
                "(VAKIT_TARGET_GRANTS)",
                field="target.url",
            )

    def check_topic(self, owner: str, topic: str) -> None:
        check_topic_name(topic)
        grant = self.grants.get(owner)
        if grant is None or not grant.topic_prefixes:
            if self.require_grants:
                raise TargetRefused(
                    f"owner {owner!r} has no Kafka topic prefixes granted (VAKIT_TARGET_GRANTS)",
                    field="target.topic",
                )
            return
        if not topic.startswith(grant.topic_prefixes):
            raise TargetRefused(
                f"topic {topic!r} does not start with a prefix granted to {owner!r} "
                f"({', '.join(grant.topic_prefixes)})",
                field="target.topic",
            )

    def check_headers(self, headers: Mapping[str, str] | None) -> None:
        for name in headers or ():
            if name in self._reserved:
                raise TargetRefused(
                    f"header {name!r} is Vakit's to set (its own headers, and those that "
                    "frame and route the request); a job may not set it",
                    field="target.headers",
                )
            if name in self._deny:
                raise TargetRefused(
                    f"header {name!r} may not be set in target.headers "
                    "(credential, hop-by-hop or forwarding header; VAKIT_TARGET_HEADER_DENY)",
                    field="target.headers",
                )
