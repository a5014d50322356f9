"""Local development servers for ``vakit up`` and the tests: PostgreSQL,
ZooKeeper and a Kafka-compatible broker as child processes, and the demo.
Only the CLI and the tests import this package.

The names below are its public face: the servers ``vakit up`` starts, a
free port for a process of one's own, and the TCP proxy that the fault
tests and the fault campaign (benchmarks.campaign) put between a process
and a server to cut, blackhole or half-drop the link. The benchmarks start their clusters
with these and nothing else of this package (the bench fence in
pyproject.toml's import contracts).
"""

from __future__ import annotations

from cluster.local.childproc import find_free_port
from cluster.local.kafkaserver import TansuBroker
from cluster.local.pgserver import PgServer
from cluster.local.tcpproxy import TcpProxy
from cluster.local.zkserver import ZkServer

__all__ = ["PgServer", "TansuBroker", "TcpProxy", "ZkServer", "find_free_port"]
