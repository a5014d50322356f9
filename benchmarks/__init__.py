"""Benchmarks for Vakit: the round-hour wave and the sustained API load.

``python -m benchmarks.wave`` and ``python -m benchmarks.sustained`` start real
PostgreSQL shards and real worker (and API) processes, drive them, and measure
from the database what happened. See ``benchmarks/README.md``.
"""
