"""Every role contract, over both stores (STYLE.md items 13 and 17).

The behaviour of each operation is held to one suite run on MemStore and
PgStore alike (test_store_contract.py, test_cron_store_contract.py,
test_operator_contract.py, test_preload_contract.py,
test_calendar_contract.py, test_limits_contract.py). Here: each store provides every operation of
every role contract with the contract's signature, and every operation of
every role is called by that suite, so no role's operation goes untested
on either store.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cluster.clock import FakeClock
from cluster.store.base import CronStore, Store
from cluster.store.contracts.api import ApiJobStore
from cluster.store.contracts.claims import JobClaims
from cluster.store.contracts.cron_intake import CronIntake
from cluster.store.contracts.cron_upkeep import CronUpkeep
from cluster.store.contracts.insight import JobInsight
from cluster.store.contracts.intake import JobIntake
from cluster.store.contracts.upkeep import JobUpkeep
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore

JOB_ROLES: dict[str, type[Any]] = {
    "intake": JobIntake,
    "claims": JobClaims,
    "upkeep": JobUpkeep,
    "insight": JobInsight,
    "api": ApiJobStore,
}
CRON_ROLES: dict[str, type[Any]] = {"cron_intake": CronIntake, "cron_upkeep": CronUpkeep}
_SUITE = (
    "test_store_contract.py",
    "test_cron_store_contract.py",
    "test_operator_contract.py",
    "test_preload_contract.py",
    "test_calendar_contract.py",
    "test_limits_contract.py",
)
# Opening and closing belong to the wiring, not to a role's behaviour.
_WIRING = {"open", "close"}


def members(protocol: type[Any]) -> tuple[set[str], set[str]]:
    """The protocol's operations and its attributes, its bases' included."""
    operations: set[str] = set()
    attributes: set[str] = set()
    for cls in protocol.__mro__:
        if cls.__module__.startswith("cluster.store.contracts"):
            operations |= {
                n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("__")
            }
            attributes |= set(vars(cls).get("__annotations__", {}))
    return operations, attributes


def _same_signature(contract: Any, implementation: Any) -> bool:
    want = inspect.signature(contract).parameters
    have = inspect.signature(implementation).parameters
    return [(p.name, p.kind) for p in want.values()] == [(p.name, p.kind) for p in have.values()]


@pytest.fixture(params=["mem", pytest.param("pg", marks=pytest.mark.integration)])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, CronStore]]:
    if request.param == "mem":
        mem = MemStore(2, FakeClock(datetime.now(UTC)))
        yield mem, MemCronStore(mem)
        return
    dsns: list[str] = request.getfixturevalue("shard_dsns")
    pg = PgStore(dsns, max_size=2, timeout=3.0)
    await pg.open()
    try:
        yield pg, PgCronStore(pg)
    finally:
        await pg.close()


@pytest.mark.parametrize("role", [*JOB_ROLES, *CRON_ROLES])
async def test_each_store_provides_every_operation_of_each_role(
    stores: tuple[Store, CronStore], role: str
) -> None:
    store: Any = stores[0] if role in JOB_ROLES else stores[1]
    protocol = JOB_ROLES.get(role) or CRON_ROLES[role]
    operations, attributes = members(protocol)
    assert operations, role
    for name in attributes:
        assert hasattr(store, name), f"{type(store).__name__} lacks {role}'s {name}"
    for name in operations:
        implementation = getattr(store, name, None)
        assert implementation is not None, f"{type(store).__name__} lacks {role}'s {name}"
        assert _same_signature(getattr(protocol, name), getattr(type(store), name)), (
            f"{type(store).__name__}.{name} differs from {role}'s signature"
        )


def test_the_roles_together_are_the_whole_store() -> None:
    """No operation of Store or CronStore is outside every role."""
    job_ops = set().union(*(members(p)[0] for p in JOB_ROLES.values()))
    cron_ops = set().union(*(members(p)[0] for p in CRON_ROLES.values()))
    assert members(Store)[0] - _WIRING == job_ops - _WIRING
    assert members(CronStore)[0] == cron_ops


def _called_in_suite() -> set[str]:
    called: set[str] = set()
    for name in _SUITE:
        tree = ast.parse((Path(__file__).parent / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                called.add(node.func.attr)
    return called


@pytest.mark.parametrize("role", [*JOB_ROLES, *CRON_ROLES])
def test_every_operation_of_each_role_runs_in_the_suite_over_both_stores(role: str) -> None:
    """The suite's harnesses are parametrized over "mem" and "pg": an
    operation it calls runs on both stores."""
    protocol = JOB_ROLES.get(role) or CRON_ROLES[role]
    operations = members(protocol)[0] - _WIRING
    assert operations - _called_in_suite() == set()
