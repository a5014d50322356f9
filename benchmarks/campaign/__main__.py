"""``python -m benchmarks.campaign``: see :mod:`benchmarks.campaign.run`."""

from __future__ import annotations

from benchmarks.campaign.run import main

main()
