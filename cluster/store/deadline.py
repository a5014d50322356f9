"""How long a caller may wait on a shard: a bound per store call, carried in
the context rather than through every signature.

The store's own bound (:attr:`PgShards.request_timeout`, statement_timeout
plus connect_timeout) is sized for the workers' and the maintenance loops'
longest statements. A caller that answers a person sooner (the API: a shard
that is frozen or cut off must cost a request seconds, not the worker's
bound) sets a shorter one with :func:`bounded_calls` around its work; each
store call made inside then has that long, in all, for everything it waits
on: the pool, the connection check, its statements and a create's retry.

Two variables, because the bound is inherited by every task the caller
starts (a coalescer's writer serving other callers later included, where an
instant would long have passed), while the instant that bound gives one call
(:func:`call_deadline`) is that call's alone: a writer task takes a fresh one
per batch (:func:`fresh_call`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

__all__ = [
    "bind",
    "bounded_calls",
    "call_deadline",
    "deadline",
    "fresh_call",
    "unbind",
    "within",
]

_BOUND: ContextVar[float | None] = ContextVar("vakit_shard_call_bound", default=None)
_DEADLINE: ContextVar[float | None] = ContextVar("vakit_shard_call_deadline", default=None)


def bind(seconds: float | None) -> Token[float | None]:
    """From now on in this context (and in the tasks started from it), every
    store call waits on its shard at most ``seconds`` in all; ``None``
    leaves the store's own bound. :func:`unbind` with the token ends it."""
    return _BOUND.set(seconds)


def unbind(token: Token[float | None]) -> None:
    _BOUND.reset(token)


@contextmanager
def bounded_calls(seconds: float | None) -> Iterator[None]:
    """:func:`bind` for the block."""
    token = bind(seconds)
    try:
        yield
    finally:
        unbind(token)


@contextmanager
def call_deadline() -> Iterator[None]:
    """One store call: the caller's bound starts now, unless an enclosing
    call has started it already (a method built on another keeps its
    caller's instant)."""
    bound = _BOUND.get()
    if bound is None or _DEADLINE.get() is not None:
        yield
        return
    token = _DEADLINE.set(time.monotonic() + bound)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def fresh_call() -> Iterator[None]:
    """A call made on behalf of others (a batch that a writer task sends):
    the instant inherited from the call that started the task is not its
    own."""
    token = _DEADLINE.set(None)
    try:
        with call_deadline():
            yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def within(at: float) -> Iterator[None]:
    """Waits inside end by ``at`` (``time.monotonic()``) too."""
    call = _DEADLINE.get()
    token = _DEADLINE.set(at if call is None else min(at, call))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline(seconds: float) -> float:
    """The instant (``time.monotonic()``) by which a wait that would be
    given ``seconds`` on its own must end: the call's deadline if sooner, or
    the caller's bound if no call has started one."""
    at = time.monotonic() + seconds
    call = _DEADLINE.get()
    if call is not None:
        return min(at, call)
    bound = _BOUND.get()
    return at if bound is None else min(at, time.monotonic() + bound)
