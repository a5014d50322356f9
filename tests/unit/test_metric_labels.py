"""The bounded labels: only what the operator declared is named."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import metrics


@pytest.fixture(autouse=True)
def undeclared() -> Iterator[None]:
    yield
    metrics.declare_labels()


def test_nothing_is_named_by_default() -> None:
    assert metrics.target_label("billing.internal") == "other"
    assert metrics.target_label("kafka:orders") == "other"
    assert metrics.cron_label("cron_01M8QGTWSVE048FQBV0VJVPA09") == "other"


def test_declared_targets_and_crons_keep_their_names() -> None:
    metrics.declare_labels(targets=["Billing.Internal", "kafka:orders"], crons=["cron_A"])
    assert metrics.target_label("billing.internal") == "billing.internal"  # hosts are lower case
    assert metrics.target_label("kafka:orders") == "kafka:orders"
    assert metrics.target_label("kafka:other-topic") == "other"
    assert metrics.cron_label("cron_A") == "cron_A" and metrics.cron_label("cron_B") == "other"
    metrics.declare_labels(crons=["*"])
    assert metrics.cron_label("cron_B") == "cron_B"
    assert metrics.target_label("billing.internal") == "other"
