"""``python -m benchmarks.campaign.steadysleep worker``: ``vakit worker``
with ``time.sleep`` on ``select()``, for the campaign's workers only.

The workers run under libfaketime with ``FAKETIME_DONT_FAKE_MONOTONIC`` (a
wall-clock step leaves the monotonic clock alone, as on a real host). In
libfaketime 0.9.10 that setting makes Python 3.11's ``time.sleep`` fail with
EINVAL (it sleeps with ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``),
and the first thread to sleep dies: kazoo's connection thread at its first
reconnect, leaving the worker without ZooKeeper for the rest of the run. A
relative ``select()`` timeout is untouched by libfaketime. The event loops
sleep in epoll and were never affected; the production code is unchanged.
"""

from __future__ import annotations

import runpy
import select
import sys
import time

__all__ = ["main"]


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


def main() -> None:
    # Before anything imports kazoo: its retry binds time.sleep as a default.
    setattr(time, "sleep", _sleep)  # noqa: B010
    sys.argv = ["vakit", *sys.argv[1:]]
    runpy.run_module("cluster.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
