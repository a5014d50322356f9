"""The console's doors: ``/ui`` itself, signing in and out with a token, and
an operator choosing the owner whose jobs and crons the pages show.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from cluster.api.console.rendering import ctx_of, error_page, render_page
from cluster.api.console.session import (
    Session,
    act_for,
    end_session,
    form_of,
    session_of,
    start_session,
)
from cluster.errors import Forbidden, Unauthorized, VakitError

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _safe_next(value: str | None) -> str:
    """Only a console path: never another site (``//host``, ``/ui\\…``)."""
    if value and value.startswith("/ui/") and "//" not in value and "\\" not in value:
        return value
    return "/ui/crons"


# -- sign-in ---------------------------------------------------------------------------


@router.get("/ui")
@router.get("/ui/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/crons", status_code=303)


@router.get("/ui/signin")
async def signin_page(request: Request, next: str | None = None) -> Response:
    return render_page(request, "signin.html", next=_safe_next(next), message=None)


@router.post("/ui/signin")
async def signin(request: Request) -> Response:
    try:
        form = await form_of(request)
    except Forbidden as exc:
        return render_page(
            request, "signin.html", status=403, next="/ui/crons", message=exc.message
        )
    token = form.get("token", "").strip()
    target = _safe_next(form.get("next"))
    try:
        ctx_of(request).principal_for(f"Bearer {token}")
    except Unauthorized:
        return render_page(
            request, "signin.html", status=401, next=target, message="That token is not known here."
        )
    response = RedirectResponse(target, status_code=303)
    start_session(response, request, token)
    return response


@router.post("/ui/signout")
async def signout(request: Request) -> Response:
    try:
        await form_of(request)
    except Forbidden as exc:
        return error_page(request, exc, None)
    response = RedirectResponse("/ui/signin", status_code=303)
    end_session(response, request)
    return response


@router.post("/ui/act-for")
async def acting_for(request: Request) -> Response:
    """An operator picks the owner whose jobs and crons the pages show (the
    API's ``?owner=``); empty for its own. A tenant may not."""
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = form.get("owner", "").strip()
        ctx.owner_for(session.authorization, owner or None)  # the API's checks: 403, 422
    except VakitError as exc:
        return error_page(request, exc, session)
    response = RedirectResponse("/ui/crons", status_code=303)
    act_for(response, request, owner or None)
    return response
