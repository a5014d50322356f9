"""Vakit: a sharded, distributed job scheduler.

Everything but routing lives here: configuration, the job model, the shard
store and its SQL, the HTTP API, the worker, targets, cron math, coordination,
metrics and the ``vakit`` command line.
"""

__version__ = "0.1.0"
