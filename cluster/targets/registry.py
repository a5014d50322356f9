"""The target kinds, by name: everything Vakit decides per kind, in one place.

A kind (``HTTP``, ``KAFKA``, ``NOOP``) is described once, by a
:class:`TargetKind`: whether this deployment offers it, what the API checks
of a job's target spec at create time, the request-body model its spec is
written in, how a worker builds its
:class:`~cluster.targets.Target`, where a firing goes (the key a per-target
limit and the firing metrics use) and the CLI option that names it. The API,
the worker, the limiter and the CLI look a kind up here instead of switching
on its name; the built-in kinds register in :mod:`cluster.targets.kinds`.

A description must import cheaply (the CLI reads it for its options): a kind
whose client library is heavy or an optional extra imports it in ``build``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    # The CLI imports the registry for its options: the policy's URL parser
    # and the targets' own imports load only where targets are checked or built.
    from cluster.targets import Target
    from cluster.targets.document import TargetDocument
    from cluster.targets.policy import AddressPolicy
    from cluster.targets.scope import TargetScope
    from cluster.targets.signing import Signer

__all__ = [
    "CliOption",
    "Spec",
    "TargetCheck",
    "TargetEnv",
    "TargetKind",
    "TargetKinds",
    "TargetSettings",
]

# A job's target spec, as the API validated it: {"kind": ..., kind's fields}.
Spec = Mapping[str, Any]
# Refuses a spec for an owner with TargetRefused (the API's 422).
TargetCheck = Callable[[Spec, str], None]


class TargetSettings(Protocol):
    """What the kinds read of the settings (cluster.config.Settings has it all;
    a new kind's setting goes there and here)."""

    @property
    def http_target_allow(self) -> list[str]: ...
    @property
    def allow_private_targets(self) -> bool: ...
    @property
    def target_grants(self) -> dict[str, list[str]]: ...
    @property
    def require_target_grants(self) -> bool: ...
    @property
    def target_header_deny(self) -> list[str]: ...
    @property
    def signing_secrets(self) -> dict[str, list[str]]: ...
    @property
    def http_pool_size(self) -> int: ...
    @property
    def enable_noop_target(self) -> bool: ...
    @property
    def kafka_bootstrap(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class TargetEnv:
    """A deployment's settings and the target policy every kind shares: the
    address policy, the owners' grants (scope) and the signing keys."""

    settings: TargetSettings
    policy: AddressPolicy
    scope: TargetScope
    signer: Signer

    @classmethod
    def from_settings(cls, settings: TargetSettings) -> TargetEnv:
        from cluster.targets.policy import AddressPolicy
        from cluster.targets.scope import TargetScope
        from cluster.targets.signing import Signer

        return cls(
            settings,
            AddressPolicy.from_list(
                settings.http_target_allow, allow_private=settings.allow_private_targets
            ),
            TargetScope(
                settings.target_grants,
                require_grants=settings.require_target_grants,
                header_deny=settings.target_header_deny,
            ),
            Signer(settings.signing_secrets),
        )


@dataclass(frozen=True, slots=True)
class CliOption:
    """``vakit crons create --<flag> VALUE`` makes ``{"kind": kind, field: VALUE}``."""

    flag: str  # "--url"
    field: str  # "url"
    help: str


def _offered(settings: TargetSettings) -> str | None:
    return None


def _no_check(env: TargetEnv) -> TargetCheck:
    def check(spec: Spec, owner: str) -> None:
        return None

    return check


def _nowhere(spec: Spec) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class TargetKind:
    """One kind of target, as every part of Vakit sees it."""

    name: str
    # The worker's target for this deployment.
    build: Callable[[TargetEnv], Target]
    # The spec's request-body model ({"kind": name, ...}), a member of the
    # API's target union: a function, so pydantic is imported only by those
    # that validate (the API, crons-as-code), not by the CLI's options.
    document: Callable[[], type[TargetDocument]]
    # Why this deployment does not offer the kind (a 422 at create, no target
    # in the worker), or None when it does.
    unavailable: Callable[[TargetSettings], str | None] = _offered
    # Given the deployment, the create-time check of a spec for an owner
    # (the spec's shape is the API schema's): a refusal is a 422 then rather
    # than a failed firing later. Made once per process, so it may cache.
    checker: Callable[[TargetEnv], TargetCheck] = _no_check
    # Where a firing goes (the URL, the topic): what its limit key is read from.
    address: Callable[[Spec], str] = _nowhere
    # The per-target limit key (VAKIT_TARGET_LIMITS) and metric label of an
    # address; None: the kind's name in lower case.
    limit_key: Callable[[str], str] | None = None
    # How `vakit crons create` names a target of this kind; None: it does not.
    cli_option: CliOption | None = None


class TargetKinds:
    """The registry: kinds by name, in registration order."""

    def __init__(self, kinds: Iterable[TargetKind] = ()) -> None:
        self._kinds: dict[str, TargetKind] = {}
        self._sealed = False
        for kind in kinds:
            self.register(kind)

    def register(self, kind: TargetKind) -> TargetKind:
        if self._sealed:
            # The target union is built once; a kind added after it would be
            # built by workers yet refused by the API's validation.
            raise RuntimeError(
                f"target kind {kind.name!r} is registered after the target documents were "
                "built; register it before cluster.services.documents is imported"
            )
        if kind.name in self._kinds:
            raise ValueError(f"target kind {kind.name!r} is registered twice")
        self._kinds[kind.name] = kind
        return kind

    def __iter__(self) -> Iterator[TargetKind]:
        return iter(self._kinds.values())

    def get(self, name: object) -> TargetKind | None:
        return self._kinds.get(name) if isinstance(name, str) else None

    def _of(self, spec: Spec) -> TargetKind | None:
        # A worker asks this per firing (limit key, metric cache): a plain
        # dict look-up, no isinstance; a stored kind is a string, but an
        # unhashable one must not stop a worker.
        try:
            return self._kinds.get(spec.get("kind", ""))
        except TypeError:
            return None

    def names(self) -> tuple[str, ...]:
        return tuple(self._kinds)

    def documents(self) -> tuple[type[TargetDocument], ...]:
        """Each kind's request-body model, in registration order: the members
        of the API's target union. The registry is closed from then on."""
        self._sealed = True
        return tuple(kind.document() for kind in self)

    def build(self, env: TargetEnv) -> dict[str, Target]:
        """A worker's targets: one of each kind the deployment offers."""
        return {k.name: k.build(env) for k in self if k.unavailable(env.settings) is None}

    def checker(self, env: TargetEnv) -> TargetCheck:
        """The API's create-time check of a target spec for an owner; raises
        :class:`TargetRefused` (a kind not offered here names ``target.kind``)."""
        from cluster.targets.policy import TargetRefused

        checks: dict[str, TargetCheck] = {}
        for kind in self:
            reason = kind.unavailable(env.settings)
            checks[kind.name] = kind.checker(env) if reason is None else _refusal(reason)

        def check(spec: Spec, owner: str) -> None:
            name = spec["kind"]
            found = checks.get(name)
            if found is None:
                raise TargetRefused(f"unknown target kind {name!r}", field="target.kind")
            found(spec, owner)

        return check

    def address(self, spec: Spec) -> str:
        """Where a firing of ``spec`` goes (URL, topic); "" for kinds without one."""
        try:  # _of, inlined: a worker asks this for every firing
            kind = self._kinds.get(spec.get("kind", ""))
        except TypeError:
            return ""
        return "" if kind is None else kind.address(spec)

    def limit_key(self, spec: Spec) -> str:
        """What a per-target limit applies to (VAKIT_TARGET_LIMITS)."""
        kind = self._of(spec)
        if kind is None or kind.limit_key is None:
            return str(spec.get("kind")).lower()
        return kind.limit_key(kind.address(spec))

    def cli_options(self) -> list[tuple[str, CliOption]]:
        """(kind, option) of the kinds the CLI can name, in registration order."""
        return [(k.name, k.cli_option) for k in self if k.cli_option is not None]


def _refusal(reason: str) -> TargetCheck:
    from cluster.targets.policy import TargetRefused

    def refuse(spec: Spec, owner: str) -> None:
        raise TargetRefused(reason, field="target.kind")

    return refuse
