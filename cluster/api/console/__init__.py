"""The web console (``/ui``) and the API's ``/docs``, served by the API process.

Server-rendered pages (Jinja2) on the functions the ``/api/v1`` routes are,
with the same tokens and roles; the only script library is htmx, vendored
under ``static/`` (no build step, nothing fetched from elsewhere). ``/docs``
is Swagger UI from vendored files too, so it works on a closed network.

The pages are one module per area (sign-in, crons, calendars, jobs, dead
letters, the cluster) on what they share in :mod:`cluster.api.console.rendering`.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from cluster.api.console import (
    calendar_pages,
    cluster_page,
    cron_pages,
    dead_letter_pages,
    job_pages,
    signin_pages,
)
from cluster.api.console.docs import docs_page
from cluster.api.console.rendering import STATIC_DIR

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """The console's routes, its static files and ``/docs`` on ``app``
    (created with ``docs_url=None``: FastAPI's own loads from a CDN)."""
    for pages in (
        signin_pages, cron_pages, calendar_pages, job_pages, dead_letter_pages, cluster_page
    ):
        app.include_router(pages.router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    app.add_api_route("/docs", docs_page, include_in_schema=False, methods=["GET"])
