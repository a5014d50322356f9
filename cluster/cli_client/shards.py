"""``vakit shards``: grow and shrink a running cluster (operator token).

``add DSN`` registers a new shard holding no slot; ``rebalance`` moves slots
until every shard holds an even share; ``drain N`` moves every slot off shard
N; ``status`` shows the slot map, the move under way and each shard's rows;
``cancel`` stops a move. ``--wait`` follows a move to its end.
"""

from __future__ import annotations

import time
from typing import Any

import click

from cluster.cli_client.api_command import Call, api_command

__all__ = ["shards"]

SHARD_COLUMNS = ("shard", "slots", "retired", "pending", "crons", "dsn")
MOVE_COLUMNS = ("id", "kind", "drain", "state", "slotsPlanned", "slotsDone")


@click.group()
def shards() -> None:
    """Grow and shrink the cluster: add a shard, rebalance, drain (operator token)."""


def _rows(status: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in status["shards"]:
        rows = s.get("rows") or {}
        out.append(
            {
                **s,
                "pending": sum(n for t, n in rows.items() if t in ("jobs", "jobs_far"))
                if rows
                else None,
                "crons": rows.get("cron_jobs") if rows else None,
            }
        )
    return out


def _describe(move: dict[str, Any] | None) -> str:
    if not move:
        return "no move recorded"
    rate = move.get("ratePerSecond")
    eta = move.get("etaSeconds")
    what = move["kind"] + (f" of shard {move['drain']}" if move.get("drain") is not None else "")
    parts = [
        f"{what}: {move['state']}",
        f"{move['slotsDone']}/{move['slotsPlanned']} slots",
        f"{move['rowsCopied']} rows copied",
    ]
    if rate:
        parts.append(f"{rate:,.0f} rows/s")
    if eta is not None and move["state"] == "running":
        parts.append(f"ETA {eta:,.0f} s")
    if move.get("note"):
        parts.append(move["note"])
    return ", ".join(parts)


def _wait(call: Call, poll: float) -> dict[str, Any]:
    """Follow the move to its end; its last status."""
    last = ""
    while True:
        # Without the row counts (a read of every table): polled every second.
        status: dict[str, Any] = call.api.request("GET", "/api/v1/shards", params={"rows": "false"})
        move = status.get("move")
        line = _describe(move)
        if line != last and call.fmt == "table":
            click.echo(line, err=True)
            last = line
        if not move or move["state"] not in ("running", "cancelling"):
            if move and move["state"] != "done":
                raise click.ClickException(f"the move ended {move['state']}: {_describe(move)}")
            # The last one shows each shard's rows.
            final: dict[str, Any] = call.api.request("GET", "/api/v1/shards")
            return final
        time.sleep(poll)


def _show(call: Call, status: dict[str, Any]) -> None:
    if call.fmt == "table":
        click.echo(
            f"slot map epoch {status['epoch']}, {status['shardCount']} shards; {_describe(status.get('move'))}"
        )
    call.emit(status, SHARD_COLUMNS, _rows(status))


@api_command(shards, "status")
def shards_status(call: Call) -> None:
    """The slot map, the move under way (slots done, rows copied, rate, ETA)
    and each shard's rows."""
    _show(call, call.api.request("GET", "/api/v1/shards"))


@api_command(shards, "add")
@click.argument("dsn")
def shards_add(call: Call, dsn: str) -> None:
    """Migrate the database at DSN and register it as the next shard (no slot yet)."""
    added = call.api.request("POST", "/api/v1/shards", body={"dsn": dsn})
    call.emit(added, ("shard", "dsn", "epoch"), [added])


@api_command(shards, "rebalance")
@click.option("--wait", is_flag=True, help="Follow the move to its end.")
@click.option(
    "--poll", type=float, default=1.0, show_default=True, help="Seconds between looks with --wait."
)
def shards_rebalance(call: Call, wait: bool, poll: float) -> None:
    """Move slots until every shard (not drained) holds an even share."""
    started = call.api.request("POST", "/api/v1/shards/rebalance")
    _show(call, _wait(call, poll)) if wait else call.emit(started, MOVE_COLUMNS)


@api_command(shards, "drain")
@click.argument("shard", type=click.IntRange(0, 4095))
@click.option("--wait", is_flag=True, help="Follow the move to its end.")
@click.option(
    "--poll", type=float, default=1.0, show_default=True, help="Seconds between looks with --wait."
)
def shards_drain(call: Call, shard: int, wait: bool, poll: float) -> None:
    """Move every slot off SHARD, so that it can be removed."""
    started = call.api.request("POST", f"/api/v1/shards/{shard}/drain")
    _show(call, _wait(call, poll)) if wait else call.emit(started, MOVE_COLUMNS)


@api_command(shards, "cancel")
def shards_cancel(call: Call) -> None:
    """Stop the move under way (a batch not yet flipped is rolled back)."""
    call.emit(call.api.request("POST", "/api/v1/shards/move/cancel"), MOVE_COLUMNS)
