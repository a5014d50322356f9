"""What `vakit up` prints once its cluster is ready."""

from __future__ import annotations

from pathlib import Path

from cluster.local.localcluster import LocalCluster, ready_banner


def test_the_banner_names_every_metrics_endpoint(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, api_port=8000, api_metrics_port=9100, zookeeper=False, kafka=False)
    cluster.worker_ports.extend([9201, 9202])
    cluster.token = "tok"
    banner = ready_banner(cluster, 3.0)
    assert "Vakit is ready in 3.0 s" in banner
    lines = banner.splitlines()
    metrics = [line for line in lines if "/metrics" in line]
    assert "http://127.0.0.1:9100/metrics" in metrics[0] and "the API" in metrics[0]
    assert "http://127.0.0.1:9201/metrics" in metrics[1] and "worker 0" in metrics[1]
    assert "http://127.0.0.1:9202/metrics" in metrics[2] and "worker 1" in metrics[2]
    assert len(metrics) == 3
    assert "http://127.0.0.1:8000/api/v1" in banner and "ZooKeeper: off" in banner
