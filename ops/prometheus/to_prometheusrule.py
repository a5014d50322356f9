"""Print ops/deploy/kubernetes/prometheusrule.yaml from alerts.yml and cron-overrides.yml.

    python3 ops/prometheus/to_prometheusrule.py > ops/deploy/kubernetes/prometheusrule.yaml

The PrometheusRule's spec is the rule files' groups, verbatim (comments kept);
tests/unit/test_ops.py fails when the manifest and the rule files drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("alerts.yml", "cron-overrides.yml")

HEADER = """\
# GENERATED from ops/prometheus/alerts.yml and cron-overrides.yml by
# ops/prometheus/to_prometheusrule.py: edit those, then regenerate.
#
# Vakit's alerting and recording rules for the Prometheus Operator (needs its
# CRDs). The `release` label must match your Prometheus's ruleSelector; the
# job names the alerts use (vakit-api, vakit-worker) come from the Services
# that servicemonitor.yaml scrapes.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: vakit
  labels:
    release: prometheus
spec:
  groups:
"""


def groups_text(path: Path) -> list[str]:
    """The lines under ``groups:``, indented for the manifest's spec.groups."""
    lines = path.read_text().splitlines()
    start = lines.index("groups:") + 1
    return [("  " + line).rstrip() for line in lines[start:]]


def render() -> str:
    out = [HEADER.rstrip("\n")]
    for name in SOURCES:
        out.append(f"    # ---- from ops/prometheus/{name}")
        out.extend(groups_text(HERE / name))
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
