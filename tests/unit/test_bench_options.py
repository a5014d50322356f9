"""A benchmark's report and printed figures say a secret setting was set,
never its value (reports are shared with the figures)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import ClusterSpec
from benchmarks.options import knobs_label, shown_env
from cluster.config import SECRET_SETTINGS

SECRET = "s3cr3t-value-that-must-not-show"


def test_every_secret_setting_is_shown_as_set_and_the_rest_as_given() -> None:
    env = {f"VAKIT_{name.upper()}": f"owner={SECRET}" for name in SECRET_SETTINGS}
    env["VAKIT_COMPLETE_BATCH"] = "500"
    shown = shown_env(env)
    assert shown["VAKIT_COMPLETE_BATCH"] == "500"
    assert {k: v for k, v in shown.items() if k != "VAKIT_COMPLETE_BATCH"} == {
        k: "(set)" for k in env if k != "VAKIT_COMPLETE_BATCH"
    }
    assert len(shown) == len(SECRET_SETTINGS) + 1


def test_the_knobs_label_names_a_secret_setting_without_its_value(tmp_path: Path) -> None:
    spec = ClusterSpec(
        out=tmp_path,
        worker_env={"VAKIT_SIGNING_SECRETS": f"svc={SECRET}", "VAKIT_CLAIM_BATCH": "500"},
    )
    label = knobs_label(spec)
    assert SECRET not in label
    assert label == "claim_batch=500,signing_secrets=(set)"
