"""A fast HTTP target for the benchmarks: answers every POST with 200.

Runs in its own process (``python -m benchmarks.sink --port N``) so that its
CPU is not the harness's and shows up on its own in the report. ``GET
/count`` returns how many firings it answered.
"""

from __future__ import annotations

import argparse

from aiohttp import web

__all__ = ["main", "make_app"]


def make_app() -> web.Application:
    count = 0

    async def fire(request: web.Request) -> web.Response:
        nonlocal count
        # Read the body: a real target would, and it keeps the connection reusable.
        await request.read()
        count += 1
        return web.Response(status=200)

    async def get_count(request: web.Request) -> web.Response:
        return web.Response(text=str(count))

    app = web.Application()
    app.router.add_post("/{tail:.*}", fire)
    app.router.add_get("/count", get_count)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    web.run_app(make_app(), host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
