"""``python -m benchmarks.reshard`` end to end, on a small scale: a loaded
2-shard cluster gets a third shard, rebalances and drains shard 0 while
creates stream in, and every firing is audited at the target.

Checked: both moves ran to ``done`` and copied jobs, the map ends with no
slot on the drained shard and an even share on the others, no request got
a 5xx other than 503, and the audit holds: every job the API said it
created arrived exactly once (none lost, none doubled, none the API refused
yet fired), every cron once for each minute slot audited. Nothing here
asserts a speed (the figures are the results log's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import reshard
from benchmarks.report import REPORT_KEYS

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_reshard_moves_slots_under_load_and_every_firing_arrives_once(tmp_path: Path) -> None:
    out = tmp_path / "reshard"
    # Big batches of slots: a handful of batches a move, so it runs in seconds.
    code = reshard.main(
        ["--jobs", "3000", "--spread", "0.5", "--crons", "40", "--rate", "40", "--settle", "3",
         "--env", "VAKIT_RESHARD_BATCH_SLOTS=512", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert not [k for k in REPORT_KEYS if k not in report]
    assert (out / "report.md").read_text().startswith("# reshard run")

    moves = report["moves"]
    runs = {m["kind"]: m for m in moves["runs"]}
    assert set(runs) == {"rebalance", "drain"}
    assert all(m["state"] == "done" and not m["timed_out"] for m in runs.values()), runs
    assert runs["rebalance"]["jobs_copied"] > 0 and runs["drain"]["jobs_copied"] > 0, runs
    assert moves["added"]["shard"] == 2
    assert moves["jobs_per_copy_second"] > 0
    slots = {s["shard"]: s["slots"] for s in moves["final_status"]["shards"]}
    assert slots == {0: 0, 1: 2048, 2: 2048}, slots

    audit = report["audit"]
    jobs, crons = audit["jobs"], audit["crons"]
    assert jobs["expected"] > 3000  # the loaded jobs and the stream's
    assert (jobs["lost"], jobs["doubled"], jobs["unexpected"]) == (0, 0, 0), jobs
    assert crons["expected"] >= 40 and len(crons["slots"]) >= 1
    assert (crons["lost"], crons["doubled_occurrences"], crons["redelivered"]) == (0, 0, 0), crons
    assert audit["exactly_once"] is True
    assert audit["backlog"]["pending_left"] == 0

    # The stream ran through the moves; a moving slot may answer 503, never another 5xx.
    during = report["api_by_window"]["during"]
    assert during["requests"] > 0
    assert report["api_errors_other_than_503"] == 0, report["api_by_window"]
    assert report["lateness_by_window"]["during"]["all"]["jobs"] > 0
    assert report["settings"]["durable"] is True
    assert report["settings"]["mover"]["reshard_batch_slots"] == 512
