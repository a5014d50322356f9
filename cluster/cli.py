"""The ``vakit`` command line."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cluster.cli_client import register as register_client_commands

if TYPE_CHECKING:
    from cluster.config import Settings

# The server commands' modules (settings, psycopg, logging) are imported by
# the commands that use them: `vakit crons list` and the other HTTP commands
# start in a third of the time without them.

__all__ = ["main"]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _settings(config: str | None) -> Settings:
    from cluster.config import describe_invalid, load_settings

    try:
        return load_settings(config)
    except Exception as exc:  # pydantic's message names the bad variable
        raise click.ClickException(f"invalid configuration: {describe_invalid(exc)}") from exc


def _need_shards(settings: Settings) -> None:
    from cluster.store.dsn import shard_problems

    problems = shard_problems(settings.shards)
    if problems:
        raise click.ClickException("; ".join(problems))


def _observability(settings: Settings, role: str) -> None:
    """Logs at the configured level; traces when an exporter is configured."""
    from cluster import tracing
    from cluster.logs import setup_logging

    setup_logging(role, settings.log_level)
    try:
        tracing.setup(f"vakit-{role}", settings.tracing_exporter, settings.tracing_sample_ratio)
    except tracing.TracingUnavailable as exc:
        raise click.ClickException(str(exc)) from exc


def _check_layout(settings: Settings) -> None:
    """Refuse to run on a shard list that differs from the cluster's."""
    from cluster.store.layout import LayoutError, check_layout

    try:
        check_layout(settings.shards, settings.connect_timeout)
    except LayoutError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group()
@click.version_option(package_name="vakit")
def main() -> None:
    """Vakit: a sharded, distributed job scheduler."""


@main.command()
@click.option("--shards", default=2, show_default=True, help="PostgreSQL shards to start.")
@click.option("--workers", default=2, show_default=True, help="Worker processes to start.")
@click.option(
    "--replicas",
    default=0,
    show_default=True,
    type=click.IntRange(0, 1),
    help="Synchronous standbys per shard; a standby is promoted when its primary dies.",
)
@click.option("--data-dir", default=".vakit", show_default=True, type=click.Path(file_okay=False))
@click.option("--api-port", default=8080, show_default=True, help="0 picks a free port.")
@click.option("--zookeeper/--no-zookeeper", default=True, show_default=True)
@click.option(
    "--kafka/--no-kafka", default=True, show_default=True, help="A local Kafka-compatible broker."
)
@click.option(
    "--demo", is_flag=True, help="Create a few jobs against a local target and show them fire."
)
def up(
    shards: int,
    workers: int,
    replicas: int,
    data_dir: str,
    api_port: int,
    zookeeper: bool,
    kafka: bool,
    demo: bool,
) -> None:
    """Run a whole local cluster in the foreground (Ctrl-C stops it all)."""
    from cluster.config import describe_invalid
    from cluster.local.localcluster import ChildExited, LocalCluster, _port_free, run_foreground
    from cluster.local.pgserver import PgServerError
    from cluster.local.zkserver import DEFAULT_ZK_JAR, zookeeper_available

    if zookeeper and not zookeeper_available():
        raise click.ClickException(
            f"ZooKeeper is not installed (need `java` and {DEFAULT_ZK_JAR}): "
            "run `apt-get install zookeeper default-jre-headless` (make setup does), "
            "set VAKIT_ZOOKEEPER_JAR to a zookeeper.jar, or start with `vakit up --no-zookeeper`"
        )

    if api_port and not _port_free(api_port):
        click.echo(f"port {api_port} is taken; picking a free one", err=True)
        api_port = 0
    cluster = LocalCluster(
        Path(data_dir),
        shards=shards,
        workers=workers,
        replicas=replicas,
        api_port=api_port,
        zookeeper=zookeeper,
        kafka=kafka,
    )
    try:
        cluster.check_config()
    except Exception as exc:  # whatever the children's own start would say
        raise click.ClickException(
            f"invalid configuration: {describe_invalid(exc)} (nothing was started)"
        ) from exc
    try:
        code = run_foreground(cluster, demo)
    except ChildExited as exc:  # the whole message: it ends with the child's log
        raise click.ClickException(f"{exc}\n(all logs in {cluster.data_dir / 'logs'})") from exc
    except (PgServerError, RuntimeError, OSError, TimeoutError) as exc:
        raise click.ClickException(
            f"{_one_line(exc)} (logs in {Path(data_dir).resolve()})"
        ) from exc
    sys.exit(code)


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def api(config: str | None) -> None:
    """Serve the HTTP API."""
    settings = _settings(config)
    _need_shards(settings)
    _observability(settings, "api")
    from cluster.processes import with_added_shards

    settings = with_added_shards(settings)
    _check_layout(settings)
    from cluster.processes import run_api

    run_api(settings)


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def worker(config: str | None) -> None:
    """Claim and fire jobs (SIGTERM stops it gracefully)."""
    settings = _settings(config)
    _need_shards(settings)
    _observability(settings, "worker")
    from cluster.processes import with_added_shards

    settings = with_added_shards(settings)
    _check_layout(settings)
    from cluster.processes import run_loop, run_worker

    run_loop(run_worker(settings))


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
def migrate(config: str | None) -> None:
    """Bring every shard's schema up to date (idempotent)."""
    settings = _settings(config)
    _need_shards(settings)
    import psycopg

    from cluster.store.dsn import mask_dsn
    from cluster.store.migrate import migrate_shard

    for shard, dsn in enumerate(settings.shards):
        try:
            applied = migrate_shard(dsn, shard)
        except psycopg.Error as exc:
            raise click.ClickException(
                f"shard {shard} ({mask_dsn(dsn)}): {_one_line(exc)}; check VAKIT_SHARDS "
                "(host, port, dbname, user) and that the server is up"
            ) from exc
        click.echo(f"shard {shard}: " + (f"applied {applied}" if applied else "up to date"))
    # A fresh cluster gets its layout now; an existing one is checked.
    _check_layout(settings)


@main.command()
@click.option("--config", type=click.Path(exists=True, dir_okay=False), help="TOML file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(config: str | None, as_json: bool) -> None:
    """Members, shard owners and leaders, and backlog per shard."""
    settings = _settings(config)
    _need_shards(settings)
    import logging

    # The pool logs each failed reconnect; the report below says it once.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    report = asyncio.run(_cluster_report(settings))
    failing = [s for s in report["shards"] if s.get("error")]
    if failing:
        from cluster.store.layout import read_layout

        for s in failing:  # the pool says "PoolTimeout"; a direct connect says why
            place = read_layout([settings.shards[s["shard"]]], settings.connect_timeout)[0]
            if place.error:
                s["error"] = place.error
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        if failing:
            sys.exit(1)
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
    if failing:
        raise click.ClickException(
            "; ".join(f"shard {s['shard']} unreachable: {s['error']}" for s in failing)
            + "; check VAKIT_SHARDS and that those servers are up"
        )


# jobs, crons, dlq, completion: the HTTP client commands (cluster/cli_client).
register_client_commands(main)


@main.group()
def config() -> None:
    """Check the configuration before starting anything."""


@config.command("check")
@click.option(
    "--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="TOML file."
)
@click.option("--offline", is_flag=True, help="Do not connect to the shards.")
def config_check(config_file: str | None, offline: bool) -> None:
    """Validate the settings and each shard: DSN, reachable, migrated, its place.

    Exits non-zero, one line per problem, when anything would stop a process
    or route ids to the wrong shard."""
    from cluster.store.dsn import mask_dsn, shard_problems

    settings = _settings(config_file)
    problems = shard_problems(settings.shards)
    click.echo(f"settings: ok ({len(settings.model_fields_set)} set explicitly)")
    click.echo(f"api tokens: {len(settings.api_tokens)} owner service(s)")
    click.echo(
        f"zookeeper: {settings.zk or 'off (static coordination: one worker per shard list)'}"
    )
    click.echo(f"shards: {len(settings.shards)}")
    if not problems and not offline:
        from cluster.store.layout import layout_problems, read_layout
        from cluster.store.migrate import LATEST_VERSION

        places = read_layout(settings.shards, settings.connect_timeout)
        for p in places:
            if not p.reachable:
                state = f"UNREACHABLE: {p.error}"
                problems.append(f"shard {p.position} ({mask_dsn(p.dsn)}) unreachable: {p.error}")
            elif not p.migrated:
                state = "reachable, NOT MIGRATED"
                problems.append(f"shard {p.position} not migrated: run `vakit migrate`")
            elif (p.schema_version or 0) < LATEST_VERSION:
                state = f"reachable, schema v{p.schema_version} of v{LATEST_VERSION}"
                problems.append(
                    f"shard {p.position} is at schema v{p.schema_version}: run `vakit migrate`"
                )
            elif p.fingerprint is None:
                state = "reachable, migrated, no layout yet (the first process registers it)"
            else:
                state = (
                    f"reachable, migrated (v{LATEST_VERSION}), shard {p.shard_index} of "
                    f"{p.shard_count}, layout {p.fingerprint}"
                )
            click.echo(f"  {p.position}: {mask_dsn(p.dsn)}  {state}")
        layout = layout_problems(places)
        if layout:
            problems += [
                *layout,
                "fix: list the shards the cluster was created with, in the order the "
                "'shard i of n' column shows (ids route by slot % shard count)",
            ]
    else:
        for i, dsn in enumerate(settings.shards):
            click.echo(f"  {i}: {mask_dsn(dsn)}")
    if problems:
        raise click.ClickException("; ".join(problems))
    click.echo("configuration OK")


async def _cluster_report(settings: Settings) -> dict[str, Any]:
    """The report of ``vakit status``: this command builds the PostgreSQL store
    and the ZooKeeper view, and closes them."""
    from cluster.coordination.report import cluster_status
    from cluster.coordination.view import ZkClusterView
    from cluster.errors import VakitError
    from cluster.processes import shard_store

    store = shard_store(settings, min_size=0, max_size=2)
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
