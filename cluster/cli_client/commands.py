"""``vakit jobs``, ``vakit crons``, ``vakit calendars``, ``vakit dlq``, ``vakit shards``,
``vakit limits`` and ``vakit completion``:
the command line for people, on the HTTP API only (never the database).

Every command takes ``--api-url`` and ``--token`` (or ``VAKIT_API_URL`` and
``VAKIT_TOKEN``) and ``-o table|json|yaml``. Exit codes are for scripts:
0 done, 1 failed (the API refused, or could not be reached), 2 usage (a
missing or bad option), 3 not found.
"""

from __future__ import annotations

import click

# crons_as_code is imported for what importing it does: it adds ``apply``
# and ``lint`` to the ``crons`` group.
from cluster.cli_client import crons_as_code  # noqa: F401
from cluster.cli_client.calendars import calendars
from cluster.cli_client.crons import crons
from cluster.cli_client.dlq import dlq
from cluster.cli_client.jobs import jobs
from cluster.cli_client.limits import limits
from cluster.cli_client.shards import shards

__all__ = ["register"]


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script, e.g.
    `eval "$(vakit completion bash)"` in ~/.bashrc."""
    from click.shell_completion import get_completion_class

    root = ctx.find_root().command
    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(root, {}, "vakit", "_VAKIT_COMPLETE").source())


def register(main: click.Group) -> None:
    """Add the HTTP commands to the ``vakit`` group."""
    for command in (jobs, crons, calendars, dlq, shards, limits, completion):
        main.add_command(command)
