"""What every console page shares: the templates, the security headers, the
error page, the redirect after an action and the words it may flash.

The pages themselves live one area per module (:mod:`.signin_pages`,
:mod:`.cron_pages`, :mod:`.job_pages`, :mod:`.dead_letter_pages`,
:mod:`.cluster_page`). Each calls the same services the ``/api/v1`` routes
call (:mod:`cluster.services`, with the owner the API's own
:meth:`ApiContext.owner_for` gives the session's token) and shows their
results in the API's shapes, so a page shows exactly what the API would
answer and acts with the same checks: a tenant sees its own jobs and crons,
another tenant's job is "not found", the cluster page is an operator's. An
error the API would answer as problem+json is shown, by :func:`error_page`,
as a page with the same status and detail.

Every action is a form POST with the session's CSRF token, answered with a
redirect to the page it came from (post/redirect/get: a reload repeats
nothing): :func:`redirect_back`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
from fastapi import Request
from pydantic import ValidationError
from starlette.responses import HTMLResponse, RedirectResponse, Response

from cluster.api.console.lateness_chart import seconds_text
from cluster.api.console.session import Session, csrf_of
from cluster.api.context import ApiContext
from cluster.api.problems import kind_of
from cluster.errors import Unauthorized, VakitError
from cluster.instants import format_instant

__all__ = [
    "FLASHES",
    "STATIC",
    "STATIC_DIR",
    "ctx_of",
    "error_page",
    "first_error",
    "flash_text",
    "redirect_back",
    "render_page",
]

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
STATIC = "/ui/static"
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
# Pages may be framed by nothing, load nothing from elsewhere and post
# only here; scripts are the vendored files (no inline script).
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _iso(value: datetime | None) -> str:
    """The UTC instant, as the API writes it (a database session in another
    zone hands back its own offset)."""
    return "" if value is None else format_instant(value)


def _in_zone(value: datetime | None, zone: str) -> str:
    """``value`` as wall time in ``zone`` (a cron's), e.g. ``2026-12-02 02:00 +03``."""
    if value is None:
        return ""
    try:
        local = value.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return _iso(value)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


_env.filters["iso"] = _iso
_env.filters["in_zone"] = _in_zone
_env.filters["q"] = lambda value: quote(str(value), safe="")
_env.filters["seconds"] = seconds_text


def ctx_of(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def render_page(
    request: Request,
    template: str,
    status: int = 200,
    session: Session | None = None,
    **values: Any,
) -> HTMLResponse:
    response = HTMLResponse("", status_code=status, headers=_HEADERS)
    csrf = csrf_of(request, response)
    values.setdefault("flash", None)
    body = _env.get_template(template).render(
        session=session,
        csrf=csrf,
        path=request.url.path,
        static=STATIC,
        **values,
    )
    response.body = response.render(body)
    response.headers["content-length"] = str(len(response.body))
    return response


def error_page(request: Request, exc: VakitError, session: Session | None) -> Response:
    """The API's problem as a page: its status, title and detail."""
    if isinstance(exc, Unauthorized):
        return _to_signin(request)
    kind = kind_of(exc)
    return render_page(
        request,
        "error.html",
        status=kind.status,
        session=session,
        title=kind.title,
        detail=exc.message,
        status_code=kind.status,
    )


def _to_signin(request: Request) -> RedirectResponse:
    back = request.url.path if request.method == "GET" else "/ui/"
    if request.method == "GET" and request.url.query:
        back += "?" + request.url.query
    return RedirectResponse("/ui/signin?" + urlencode({"next": back}), status_code=303)


# What an action's redirect may show: by code, so a link cannot put words
# of its own on the page.
FLASHES = {
    "paused": "Paused: no slot runs until it is resumed.",
    "resumed": "Resumed: slots that passed meanwhile follow the misfire policy.",
    "triggered": "Triggered: an extra occurrence is due now (see the recent runs).",
    "retried": "Retried: a new series of attempts is due now.",
    "cancelled": "Cancelled.",
    "rescheduled": "Rescheduled: it now runs at the new time.",
    "calendar-created": "Calendar created (version 1).",
    "calendar-same": "A calendar of that name has these days already: nothing changed.",
    "calendar-updated": "Saved as a new version (or unchanged, if the days were the same); "
    "the occurrences its crons made already were planned again.",
    "calendar-deleted": "Calendar deleted.",
}


def redirect_back(where: str, flash: str) -> RedirectResponse:
    return RedirectResponse(f"{where}?{urlencode({'flash': flash})}", status_code=303)


def flash_text(code: str | None) -> str | None:
    return FLASHES.get(code or "")


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(x) for x in error.get("loc", ()))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid"))
