"""Event-loop lag: how late the loop runs a timer that should fire now.

A callback that computes for 200 ms without yielding delays every other task
(claims, heartbeats, firings, health checks) by as much; this is where it shows
first. One sleep every half second: no cost worth measuring.
"""

from __future__ import annotations

import asyncio

from cluster import metrics

__all__ = ["watch_event_loop"]


async def watch_event_loop(interval: float = 0.5) -> None:
    """Observe the loop's lag into ``vakit_event_loop_lag_seconds`` until cancelled."""
    loop = asyncio.get_running_loop()
    observe = metrics.EVENT_LOOP_LAG.observe
    while True:
        before = loop.time()
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - before - interval))
