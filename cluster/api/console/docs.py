"""``/docs`` without internet: Swagger UI from the vendored files under
``/ui/static/swagger`` (FastAPI's own page loads them from a CDN)."""

from __future__ import annotations

from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse

from cluster.api.console.rendering import STATIC

__all__ = ["docs_page"]


async def docs_page(request: Request) -> HTMLResponse:
    """Swagger UI from the vendored files under ``/ui/static/swagger``."""
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url or "/openapi.json",
        title=f"{request.app.title} API",
        swagger_js_url=f"{STATIC}/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{STATIC}/swagger/swagger-ui.css",
        swagger_favicon_url=f"{STATIC}/swagger/favicon-32x32.png",
        # No validator badge: it would call an outside service.
        swagger_ui_parameters={"validatorUrl": None},
    )
