"""The ``vakit`` commands for people: jobs, crons (and crons as code), dead
letters, on a running API over HTTP (:mod:`cluster.cli_client.commands`).

Kept apart from :mod:`cluster.cli`, which runs the servers: this package
needs no database driver and no coordination, only the API's URL and a
token.
"""

from __future__ import annotations

from cluster.cli_client.commands import register

__all__ = ["register"]
