"""What both clients set on their httpx client: the base URL, the token and
the default timeouts."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["DEFAULT_TIMEOUT", "USER_AGENT", "http_options"]

# Every call ends: 10 s for an answer, 5 s to connect. A create answers in
# milliseconds; a call that has not answered in 10 s is retried or raised.
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
USER_AGENT = "vakit-client-python/0.1.0"


def base_url_of(url: str) -> str:
    """The API's address; ``…/api/v1`` (what ``vakit up`` prints) is taken off."""
    url = url.rstrip("/")
    return url.removesuffix("/api/v1")


def http_options(base_url: str, token: str, timeout: float | httpx.Timeout) -> dict[str, Any]:
    if not token:
        raise ValueError("a token is needed (Authorization: Bearer)")
    return {
        "base_url": base_url_of(base_url),
        "headers": {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT},
        "timeout": timeout,
        # The API is reached directly; an environment proxy is opt-in
        # through your own httpx client.
        "trust_env": False,
    }
