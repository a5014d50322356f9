"""The ``vakit`` command line."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from cluster.config import Settings, load_settings
from cluster.logs import setup_logging

__all__ = ["main"]


def _settings(config: str | None) -> Settings:
    try:
        return load_settings(config)
    except Exception as exc:  # pydantic's message names the bad variable
        raise click.ClickException(f"invalid configuration: {exc}") from exc


def _need_shards(settings: Settings) -> None:
    if not settings.shards:
        raise click.ClickException("no shards configured: set VAKIT_SHARDS (DSNs in shard order)")


@click.group()
@click.version_option(package_name="vakit")
def main() -> None:
    """Vakit: a sharded, distributed job scheduler."""


@main.command()
@click.option("--shards", default=2, show_default=True, help="PostgreSQL shards to start.")
@click.option("--workers", default=2, show_default=True, help="Worker processes to start.")
@click.option("--data-dir", default=".vakit", show_default=True, type=click.Path(file_okay=False))
@click.option("--api-port", default=8080, show_default=True, help="0 picks a free port.")
@click.option("--zookeeper/--no-zookeeper", default=True, show_default=True)
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="A local Kafka-compatible broker.")
@click.option("--demo", is_flag=True, help="Create a few jobs against a local target and show them fire.")
def up(
    shards: int, workers: int, data_dir: str, api_port: int, zookeeper: bool, kafka: bool, demo: bool
) -> None:
    """Run a whole local cluster in the foreground (Ctrl-C stops it all)."""
    from cluster.local.localcluster import LocalCluster, _port_free, run_foreground

    if api_port and not _port_free(api_port):
        click.echo(f"port {api_port} is taken; picking a free one", err=True)
        api_port = 0
    cluster = LocalCluster(
        Path(data_dir),
        shards=shards,
        workers=workers,
        api_port=api_port,
        zookeeper=zookeeper,
        kafka=kafka,
    )
    sys.exit(run_foreground(cluster, demo))


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def api(config: str | None) -> None:
    """Serve the HTTP API."""
    settings = _settings(config)
    _need_shards(settings)
    setup_logging("api")
    from cluster.service import run_api

    run_api(settings)


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def worker(config: str | None) -> None:
    """Claim and fire jobs (SIGTERM stops it gracefully)."""
    settings = _settings(config)
    _need_shards(settings)
    setup_logging("worker")
    from cluster.service import run_worker

    asyncio.run(run_worker(settings))


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def migrate(config: str | None) -> None:
    """Bring every shard's schema up to date (idempotent)."""
    settings = _settings(config)
    _need_shards(settings)
    from cluster.store.migrate import migrate_shard

    for shard, dsn in enumerate(settings.shards):
        applied = migrate_shard(dsn, shard)
        click.echo(f"shard {shard}: " + (f"applied {applied}" if applied else "up to date"))


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(config: str | None, as_json: bool) -> None:
    """Members, shard owners and leaders, and backlog per shard."""
    settings = _settings(config)
    _need_shards(settings)
    report = asyncio.run(_cluster_report(settings))
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    click.echo(f"members ({len(report['members'])}):")
    for m in report["members"]:
        click.echo(f"  {m['id']:<32} host={m['host']} pid={m['pid']} started={m['startedAt']}")
    click.echo(f"\n{'shard':>5}  {'leader':<28} {'backlog':>8} {'oldest due':>11}  owners")
    for s in report["shards"]:
        age = s["oldestDueAgeSeconds"]
        click.echo(
            f"{s['shard']:>5}  {s['leader'] or '-'!s:<28} {s['backlog'] if s['backlog'] is not None else '?'!s:>8} "
            f"{(f'{age:.1f}s' if age is not None else '?'):>11}  {', '.join(s['owners']) or '-'}"
        )


async def _cluster_report(settings: Settings) -> dict[str, Any]:
    """The report of ``vakit status``: this command builds the PostgreSQL store
    and the ZooKeeper view, and closes them."""
    from cluster.coordination.report import cluster_status
    from cluster.coordination.view import ZkClusterView
    from cluster.errors import VakitError
    from cluster.store.postgres import PgStore

    store = PgStore(
        settings.shards,
        min_size=0,
        max_size=2,
        timeout=settings.connect_timeout,
        statement_timeout=settings.statement_timeout,
        idle_in_transaction_timeout=settings.idle_in_transaction_timeout,
        keepalive_seconds=settings.tcp_keepalive_seconds,
    )
    await store.open()
    view: ZkClusterView | None = None
    try:
        if settings.zk:
            candidate = ZkClusterView(settings.zk, timeout=5.0)
            try:
                await asyncio.to_thread(candidate.start)
                view = candidate
            except VakitError:
                pass  # reported as "coordination unavailable", with the backlog
        return await cluster_status(store, view, coordinated=bool(settings.zk))
    finally:
        if view is not None:
            await asyncio.to_thread(view.stop)
        await store.close()


if __name__ == "__main__":
    main()
