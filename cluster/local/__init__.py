"""Local development servers for ``vakit up`` and the tests: PostgreSQL,
ZooKeeper and a Kafka-compatible broker as child processes, and the demo.
Only the CLI and the tests import this package.

The names below are its public face: the servers ``vakit up`` starts, and
a free port for a process of one's own. The benchmarks start their clusters
with these and nothing else of this package (the bench fence in
pyproject.toml's import contracts).
"""

from __future__ import annotations

from cluster.local.childproc import find_free_port
from cluster.local.kafkaserver import TansuBroker
from cluster.local.pgserver import PgServer
from cluster.local.zkserver import ZkServer

__all__ = ["PgServer", "TansuBroker", "ZkServer", "find_free_port"]
