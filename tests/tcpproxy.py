"""The fault tests' TCP proxy; it lives in :mod:`cluster.local.tcpproxy` so
the fault campaign (benchmarks.campaign) can put it between its processes
and their servers too."""

from __future__ import annotations

from cluster.local.tcpproxy import TcpProxy

__all__ = ["TcpProxy"]
