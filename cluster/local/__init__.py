"""Local development servers for ``vakit up`` and the tests: PostgreSQL,
ZooKeeper and a Kafka-compatible broker as child processes, and the demo.
Only the CLI and the tests import this package."""
