"""How a ``vakit`` command talks to the API: the connection and output
options every such command takes, the :class:`Call` it is handed, and the
translation of the API's errors into exit codes (0 done, 1 failed, 2 usage,
3 not found), plus the small helpers every command group uses to build
paths and follow pages.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from cluster.cli_client.http import ApiClient, ApiError, Unreachable
from cluster.cli_client.output import FORMATS, emit

__all__ = [
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "Call",
    "F",
    "NotFoundError",
    "api_command",
    "every_item",
    "quote_segment",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3

F = TypeVar("F", bound=Callable[..., Any])


class NotFoundError(click.ClickException):
    exit_code = EXIT_NOT_FOUND


@dataclass(frozen=True)
class Call:
    """What every API command gets: the client and the output format."""

    api: ApiClient
    fmt: str

    def emit(self, data: Any, columns: tuple[str, ...] = (), rows: Any = None) -> None:
        emit(data, self.fmt, columns, rows)


def api_command(group: click.Group, name: str, **kwargs: Any) -> Callable[[F], F]:
    """A command of ``group`` that talks to the API: adds the connection and
    output options, passes a :class:`Call` first, and turns the API's
    errors into exit codes."""

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def run(
            api_url: str | None, token: str | None, owner: str | None, output: str, **params: Any
        ) -> Any:
            if not api_url:
                raise click.UsageError("no API to talk to: pass --api-url or set VAKIT_API_URL")
            call = Call(ApiClient(api_url, token, acting_for=owner), output)
            try:
                return f(call, **params)
            except ApiError as exc:
                if exc.status == 404:
                    raise NotFoundError(str(exc)) from None
                raise click.ClickException(str(exc)) from None
            except Unreachable as exc:
                raise click.ClickException(str(exc)) from None

        options = [
            click.option(
                "--api-url", envvar="VAKIT_API_URL", metavar="URL",
                help="The Vakit API, e.g. http://127.0.0.1:8080 (env VAKIT_API_URL).",
            ),
            click.option(
                "--token", envvar="VAKIT_TOKEN", metavar="TOKEN",
                help="Bearer token (env VAKIT_TOKEN).",
            ),
            click.option(
                "--owner", envvar="VAKIT_OWNER", metavar="SERVICE",
                help="With an operator token: act for this owner service (env VAKIT_OWNER).",
            ),
            click.option(
                "-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True,
                help="table for people; json or yaml for scripts.",
            ),
        ]  # fmt: skip
        command: Any = run
        for option in reversed(options):
            command = option(command)
        group.command(name, **kwargs)(command)
        return f

    return decorate


def quote_segment(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def every_item(
    call: Call,
    path: str,
    params: dict[str, Any],
    items: str,
    cursor: str,
    next_key: str = "nextCursor",
) -> Iterator[dict[str, Any]]:
    """Every item of a paginated list, following ``nextCursor``."""
    page_params = dict(params)
    while True:
        page = call.api.request("GET", path, params=page_params)
        yield from page.get(items, [])
        nxt = page.get(next_key)
        if not nxt:
            return
        page_params[cursor] = nxt
