"""A short fault campaign (issue 46; docs/campaign.md): a real cluster of
two shards (one on a small tmpfs for the full-disk fault), ZooKeeper, two
workers under libfaketime and two API processes, under load for 20 s while
the nemesis injects mixed faults from a fixed seed. The history's verdict
must show no job lost, doubled, fired early or fired after its cancel, and
no acknowledged create missing; several fault kinds must have been injected.

Kept short for the suite's budget (about a minute and a half on two cores);
``make campaign`` runs a long one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks.campaign.nodes import LIBFAKETIME
from benchmarks.campaign.run import run_campaign

pytestmark = pytest.mark.faults

SEED = 46
ZERO = (
    "lost_jobs",
    "early_firings",
    "doubled_firings",
    "doubled_cron_slots",
    "missing_acknowledged_creates",
    "fired_after_cancel",
)


def test_a_short_campaign_loses_and_doubles_nothing(tmp_path: Path) -> None:
    if not LIBFAKETIME.exists():
        pytest.fail(f"{LIBFAKETIME} is missing: `make os-deps` installs Debian's faketime")
    began = time.monotonic()
    # Shorter gaps between faults than a long run's: more kinds in 20 s.
    verdict = run_campaign(20.0, tmp_path, SEED, settle=20.0, gap=(0.3, 1.5)).as_dict()
    print(f"campaign seed {SEED} in {time.monotonic() - began:.0f} s:", json.dumps(verdict))
    assert {name: verdict[name] for name in ZERO} == dict.fromkeys(ZERO, 0), verdict
    assert len(verdict["faults"]) >= 4, verdict["faults"]
    assert verdict["acknowledged_creates"] >= 50, verdict
    assert verdict["nemesis_errors"] == [], verdict["nemesis_errors"]
