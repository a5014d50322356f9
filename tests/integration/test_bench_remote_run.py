"""``vakit-bench remote`` aimed at running Vakit processes, as a load tester
aims it at a deployment: jobs created through the API (``--api-url``,
``--token``), the drain followed at the harness's receiver, and lateness read
back from the cluster's own metrics: the workers' ``/metrics``, or a real
Prometheus scraping them (``--prometheus-url``).

Figures are not asserted (they belong in the results log, docs/results/); what is: every
job was created once and fired, both lateness readings count the run's jobs,
the progress lines were printed without ``-v``, and the report is versioned.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml

from benchmarks import remote
from benchmarks.report import SCHEMA_VERSION
from cluster.local.childproc import find_free_port
from tests.helpers import wait_for
from tests.procs import TOKEN, running_processes

pytestmark = pytest.mark.integration

JOBS = 300


@contextmanager
def prometheus_scraping(targets: list[str], workdir: Path) -> Iterator[str]:
    """A Prometheus server (Debian's, which make setup installs with promtool)
    scraping ``targets`` every second; yields its URL once each is up."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (make setup installs it)")
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [{"job_name": "vakit-worker", "static_configs": [{"targets": targets}]}],
            }
        )
    )
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    with open(workdir / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def all_up() -> bool:
            try:
                with urllib.request.urlopen(url + "/api/v1/query?query=up", timeout=2) as resp:
                    rows = json.loads(resp.read())["data"]["result"]
            except OSError:
                return False
            return len(rows) == len(targets) and all(row["value"][1] == "1" for row in rows)

        wait_for(all_up, 60, interval=0.5, what="Prometheus scraping the workers")
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("metrics", ["workers", "prometheus"])
def test_remote_drives_a_running_cluster_through_its_api(
    metrics: str, shard_dsns: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with running_processes(shard_dsns, tmp_path) as procs, ExitStack() as stack:
        api = procs.api().wait_ready()
        # The fault tests' 3 s lease is not what is measured here.
        workers = [procs.worker(f"w{i}", lease_seconds=30) for i in (1, 2)]
        for worker in workers:
            worker.wait_ready()
        argv = ["--api-url", api.base_url, "--token", TOKEN, "--jobs", str(JOBS)]
        argv += ["--batch", "50", "--lead", "3", "--out", str(out)]
        if metrics == "prometheus":
            targets = [f"127.0.0.1:{w.port}" for w in workers]
            argv += ["--prometheus-url", stack.enter_context(prometheus_scraping(targets, tmp_path))]
        else:
            for worker in workers:
                argv += ["--metrics-url", worker.base_url + "/metrics"]
        assert remote.main(argv) == 0, procs.log_report()

    report = json.loads((out / "report.json").read_text())
    assert report["schema_version"] == SCHEMA_VERSION and report["benchmark"] == "remote"
    assert report["created"] == JOBS
    assert report["deliveries"] >= JOBS  # at least once: a redelivery is counted, not a job
    at_receiver = report["lateness_seconds"]
    assert at_receiver["p50"] is not None and at_receiver["p50"] <= at_receiver["p99"] <= at_receiver["max"]
    from_metrics = report["lateness_from_metrics"]
    # The counters' increase over the run covers this run's jobs (a redelivery adds a start).
    assert from_metrics["count"] >= JOBS, from_metrics
    assert from_metrics["source"].startswith("prometheus" if metrics == "prometheus" else "workers'")
    assert from_metrics["p50"] is not None and from_metrics["p50"] <= from_metrics["p99"]
    assert report["settings"]["api_url"] == api.base_url
    # The harness machine's hour, as every benchmark's report carries it.
    assert set(report["settings"]["machine"]["yardstick"]) == {"cpu_ms", "cpu_ms_best", "first_touch_s_per_gib"}
    err = capsys.readouterr().err  # progress without -v, while creating and while draining
    assert f"jobs created: {JOBS}/{JOBS} (100.0%)" in err and f"jobs fired: {JOBS}/{JOBS} (100.0%)" in err, err
