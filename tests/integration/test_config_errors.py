"""Startup problems end with one line that says the fix and a non-zero exit.

Each case runs the real ``vakit`` command in a subprocess, as an operator
would, against real PostgreSQL servers (the session fixtures) or none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from cluster.local.pgserver import PgServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNREACHABLE = "host=127.0.0.1 port=1 dbname=vakit connect_timeout=2"


def vakit(*args: str, shards: list[str] | str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}
    base["PYTHONPATH"] = str(REPO)
    if shards is not None:
        base["VAKIT_SHARDS"] = shards if isinstance(shards, str) else ",".join(shards)
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        cwd=REPO, env=base, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    """The failure as an operator sees it: non-zero, no traceback, one line on stderr."""
    assert out.returncode != 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("Error: "), out.stderr
    return lines[0]


def test_migrate_with_an_unreachable_dsn_says_which_shard() -> None:
    line = one_line_error(vakit("migrate", shards=UNREACHABLE))
    assert "shard 0" in line and "Connection refused" in line and "check VAKIT_SHARDS" in line


def test_a_list_split_on_spaces_is_refused_not_guessed() -> None:
    line = one_line_error(vakit("migrate", shards="db1 db2 db3"))
    assert "entry 0" in line and "not a PostgreSQL DSN" in line


def test_status_with_an_unreachable_shard_exits_non_zero(shard_dsns: list[str]) -> None:
    out = vakit("status", shards=[shard_dsns[0], UNREACHABLE], VAKIT_CONNECT_TIMEOUT="1")
    line = one_line_error(out)
    assert "shard 1 unreachable" in line and "Connection refused" in line
    assert "    0  " in out.stdout  # the reachable shard is still reported


def test_up_without_zookeeper_prints_the_fix(tmp_path: Path) -> None:
    line = one_line_error(
        vakit("up", "--data-dir", str(tmp_path), VAKIT_ZOOKEEPER_JAR=str(tmp_path / "none.jar"))
    )
    assert "apt-get install zookeeper" in line and "--no-zookeeper" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the data directory to postgres")
def test_up_under_a_directory_postgres_cannot_enter_shows_initdb() -> None:
    from tests.pgfixtures import make_base_dir

    base = make_base_dir("vakit-test-up-")  # postgres may enter this one
    try:
        locked = base / "locked"
        locked.mkdir(mode=0o700)
        out = vakit(
            "up", "--no-zookeeper", "--no-kafka", "--api-port", "0", "--data-dir", str(locked / "data")
        )
        line = one_line_error(out)
        assert "initdb: error" in line and "Permission denied" in line, line
        assert f"cannot enter {locked} (mode 700)" in line and "chmod o+x" in line, line
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _layout(dsn: str) -> tuple[int, int, str] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT shard_index, shard_count, fingerprint FROM cluster_layout").fetchone()
    return (row[0], row[1], row[2]) if row else None


def test_a_process_with_another_shard_list_refuses_to_run(shard_dsns: list[str]) -> None:
    a, b = shard_dsns
    out = vakit("migrate", shards=[a, b])
    assert out.returncode == 0, out.stderr
    (_, _, fp), second = _layout(a), _layout(b)  # type: ignore[misc]
    assert second == (1, 2, fp) and _layout(a) == (0, 2, fp)

    checked = vakit("config", "check", shards=[a, b])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"shard 1 of 2, layout {fp}" in checked.stdout and "configuration OK" in checked.stdout

    for wrong in ([b, a], [a], [a, b, a]):
        line = one_line_error(vakit("worker", shards=wrong))
        assert "VAKIT_SHARDS" in line, line
        assert "config check" in line or "same database" in line, line
    line = one_line_error(vakit("config", "check", shards=[b, a]))
    assert "is shard 1 of 2" in line and "fix: list the shards" in line, line
    # Nothing was rewritten by the refused processes.
    assert _layout(a) == (0, 2, fp) and _layout(b) == (1, 2, fp)


def test_a_new_cluster_is_registered_by_its_first_process(pg_servers: list[PgServer]) -> None:
    from tests.pgfixtures import clone_databases, drop_databases

    dsns = clone_databases(pg_servers)
    try:
        assert [_layout(d) for d in dsns] == [None, None]
        out = vakit("config", "check", shards=dsns)
        assert out.returncode == 0 and "no layout yet" in out.stdout, out.stdout + out.stderr
        from cluster.store.layout import check_layout

        places = check_layout(dsns)
        fps = {p.fingerprint for p in places}
        assert [(p.shard_index, p.shard_count) for p in places] == [(0, 2), (1, 2)] and len(fps) == 1
        assert check_layout(dsns) == places  # a second start only reads
    finally:
        drop_databases(dsns)


@pytest.mark.parametrize(
    ("setting", "secret"),
    [
        ("VAKIT_API_TOKENS", "tok-7f3a9c1e5b2d8f40"),  # a token with no owner
        ("VAKIT_OPERATOR_TOKENS", "=op-tok-0a1b2c3d4e5f"),  # an owner left out
        ("VAKIT_SIGNING_SECRETS", "svc-a"),  # only the owner: the item is still not shown
        ("VAKIT_SIGNING_SECRETS", "=whsec_c2VjcmV0LWtleS1ieXRlcy0xMjM0NTY="),
    ],
)
def test_a_malformed_secret_setting_names_its_item_and_never_prints_it(
    setting: str, secret: str
) -> None:
    # The error line reaches logs and terminals: it says which item is wrong,
    # not what the token or key is.
    line = one_line_error(vakit("worker", shards=UNREACHABLE, **{setting: f"ok=fine-value-1234567,{secret}"}))
    assert setting in line and "item 2" in line, line
    assert secret.strip("=") not in line, line


def test_up_with_a_bad_setting_says_which_before_it_starts_anything(tmp_path: Path) -> None:
    out = vakit(
        "up", "--no-zookeeper", "--no-kafka", "--api-port", "0", "--data-dir", str(tmp_path / "d"),
        VAKIT_OWNER_CREATE_BURST="0",
    )  # fmt: skip
    line = one_line_error(out)
    assert "VAKIT_OWNER_CREATE_BURST: Input should be greater than or equal to 1" in line, line
    assert "nothing was started" in line and "starting PostgreSQL" not in out.stdout
    assert not (tmp_path / "d").exists()
