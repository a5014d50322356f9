"""The worker: claim due jobs, hold them until due, fire, complete in batches.

The names below are its public face for a program outside ``cluster`` (the
benchmarks); a worker process is started with ``vakit worker``.
:data:`LOOKAHEAD_SECONDS` is how far ahead of a wave the worker preloads it,
when preloading is on; :func:`measure_instant` times the start path of one
wave's instant in process.
"""

from __future__ import annotations

from cluster.worker.preload import LOOKAHEAD_SECONDS
from cluster.worker.startprobe import measure_instant

__all__ = ["LOOKAHEAD_SECONDS", "measure_instant"]
