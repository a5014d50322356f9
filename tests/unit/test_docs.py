"""The documentation site builds, strictly, and the README stays a front door.

`mkdocs build --strict` fails on a link to a page, file or heading that is not
there and on a snippet that cannot be found (mkdocs.yml), so building the site
here is what keeps the docs' links honest. The README is not a page of the
site (parts of it are included in one), so its own links are checked here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    # Snippet paths are taken from the working directory: the repository root.
    # Not -q: it silences the warnings that --strict counts, and the build passes.
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_site_builds_strictly_with_every_page(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = build(ROOT, site)
    assert done.returncode == 0, done.stdout + done.stderr
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in (
        "index.html", "api.html", "clients.html", "crons.html", "cli.html", "console.html",
        "operations.html", "runbook.html", "tenancy-and-security.html", "design.html",
        "architecture.html", "development.html", "benchmarks/index.html",
        "benchmarks/harness.html", "benchmarks/method.html",
        "results/2026-12-07-benchmarks.html", "problems/index.html", "problems/conflict.html",
    ):
        assert page in pages, f"{page} missing from the site: {sorted(pages)}"
    # The included files arrive whole: the README's front part, the runbook's
    # alert sections, the benchmarks' own README.
    home = (site / "index.html").read_text()
    assert "make run" in home and "What Vakit promises, honestly" in home
    assert "VakitStartLatenessHigh" in (site / "runbook.html").read_text()
    assert "benchmarks.doors" in (site / "benchmarks" / "harness.html").read_text()
    assert "client services" in (site / "design.html").read_text()
    # The client examples are the files the SDK's tests run, included whole.
    clients = (site / "clients.html").read_text()
    assert "verify_firing" in clients and "apply_crons" in clients and "cancel_job" in clients


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is a real check: the same docs with a link to a
    missing heading and one to a missing page do not build, and say why."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    examples = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("clients/*/examples/*.*")]
    for name in ("mkdocs.yml", "README.md", "ops/README.md", "benchmarks/README.md", *examples):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    api = copy / "docs" / "api.md"
    api.write_text(
        api.read_text()
        + "\nSee [the crons](crons.md#no-such-heading) and [the queues](queues.md).\n"
    )
    done = build(copy, tmp_path / "site")
    said = done.stdout + done.stderr
    # Both named: the build got as far as checking links (the copy is whole).
    assert done.returncode != 0 and "no-such-heading" in said and "queues.md" in said, said

def test_the_readme_is_the_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300, "the README is the front door: move the rest to docs/"
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make run" in quick and "make test" in quick
    for link in re.findall(r"\]\((?!https?:|#)([^)#]+)", text):
        assert (ROOT / link).exists(), f"README.md links to a missing file: {link}"
