"""Who is signed in to the console, and the CSRF check of its actions.

The session is the API token itself, in a cookie the page's scripts cannot
read (``HttpOnly``), that the browser sends only to this site's own
requests (``SameSite=Strict``) and only over HTTPS (``Secure``). The one
exception is plain HTTP on loopback (``vakit up``, the tests): there the
request never leaves the machine and a ``Secure`` cookie would not be
sent back, so ``Secure`` is left off. Nothing is kept on the server: any
API replica serves any page, and a restart signs nobody out.

Every action is a POST whose form carries a CSRF token that must equal the
``vakit_csrf`` cookie (the double-submit pattern): random per sign-in, so
it says nothing of the API token, and a page on another site can neither
read the cookie nor make the browser send it. The sign-in form is
protected the same way (a CSRF cookie is set by the sign-in page).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from cluster.api.context import ApiContext, Principal
from cluster.errors import Forbidden, Unauthorized

__all__ = [
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "Session",
    "act_for",
    "csrf_of",
    "end_session",
    "form_of",
    "session_of",
    "start_session",
]

SESSION_COOKIE = "vakit_session"
CSRF_COOKIE = "vakit_csrf"
ACTING_COOKIE = "vakit_acting_for"  # an operator's chosen owner
_MAX_AGE = 12 * 3600  # a working day: sign in again tomorrow


class Session:
    """A signed-in viewer: who the token stands for, the header the API's
    own functions take (``ApiContext.owner_for``, ``operator_for``), and,
    for an operator, the owner it acts for (the API's ``?owner=``)."""

    def __init__(
        self, principal: Principal, authorization: str, csrf: str, acting_for: str | None = None
    ) -> None:
        self.principal = principal
        self.authorization = authorization
        self.csrf = csrf
        self.acting_for = acting_for if principal.operator else None

    def owner(self, ctx: ApiContext) -> str:
        """The owner this session's pages show and act for, by the API's rule."""
        return ctx.owner_for(self.authorization, self.acting_for)


def _secure(request: Request) -> bool:
    """``Secure`` unless this is plain HTTP between two loopback addresses."""
    if request.url.scheme == "https":
        return True
    client = request.client.host if request.client else ""
    try:
        return not ipaddress.ip_address(client).is_loopback
    except ValueError:
        return True


def _set(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        max_age=_MAX_AGE,
        path="/",
        secure=_secure(request),
        httponly=True,
        samesite="strict",
    )


def csrf_of(request: Request, response: Response | None = None) -> str:
    """The CSRF token of this browser; a new one (set on ``response``) if it has none."""
    token = request.cookies.get(CSRF_COOKIE, "")
    if len(token) == 43:
        return token
    token = secrets.token_urlsafe(32)
    if response is not None:
        _set(response, request, CSRF_COOKIE, token)
    return token


def session_of(ctx: ApiContext, request: Request) -> Session:
    """The viewer's session; :class:`Unauthorized` without a valid one."""
    raw = request.cookies.get(SESSION_COOKIE)
    if not raw:
        raise Unauthorized("not signed in")
    try:
        padded = raw + "=" * (-len(raw) % 4)
        token = base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise Unauthorized("not signed in") from exc
    authorization = f"Bearer {token}"
    principal = ctx.principal_for(authorization)  # Unauthorized for a token since removed
    acting = request.cookies.get(ACTING_COOKIE) or None
    return Session(principal, authorization, request.cookies.get(CSRF_COOKIE, ""), acting)


def start_session(response: Response, request: Request, token: str) -> None:
    """Sign in: the token in its cookie, and a fresh CSRF token."""
    # Base64url without padding: a cookie value needs no quoting.
    encoded = base64.urlsafe_b64encode(token.encode("utf-8")).decode("ascii").rstrip("=")
    _set(response, request, SESSION_COOKIE, encoded)
    _set(response, request, CSRF_COOKIE, secrets.token_urlsafe(32))


def act_for(response: Response, request: Request, owner: str | None) -> None:
    """An operator's pages show ``owner``'s jobs and crons (None: its own)."""
    if owner:
        _set(response, request, ACTING_COOKIE, owner)
    else:
        response.delete_cookie(
            ACTING_COOKIE, path="/", secure=_secure(request), httponly=True, samesite="strict"
        )


def end_session(response: Response, request: Request) -> None:
    for name in (SESSION_COOKIE, CSRF_COOKIE, ACTING_COOKIE):
        response.delete_cookie(
            name, path="/", secure=_secure(request), httponly=True, samesite="strict"
        )


async def form_of(request: Request) -> dict[str, str]:
    """The action's form fields (first value of each), after its CSRF check:
    :class:`Forbidden` unless the ``csrf`` field equals the CSRF cookie."""
    body = await request.body()
    try:
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), max_num_fields=50).items()}
    except (UnicodeDecodeError, ValueError) as exc:
        raise Forbidden("the form could not be read; reload the page and try again") from exc
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = fields.get("csrf", "")
    if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):
        raise Forbidden(
            "the form's CSRF token does not match this browser's session; "
            "reload the page and try again"
        )
    return fields
