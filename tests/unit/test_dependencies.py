"""The runtime dependency set is what production code imports, and nothing more.

Production code is ``cluster/`` and ``shardmap/``. Every third-party module
they import must come from a distribution pyproject.toml names (as a runtime
dependency or in an extra); every runtime dependency must be imported there,
unless it is listed below with the reason it is needed without an import.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("cluster", "shardmap")
# Needed at run time though no production module imports them by name.
NOT_IMPORTED = {
    "tzdata": "zoneinfo's time zone data where the OS has none (slim images)",
    "httptools": "uvicorn's C HTTP parser, which uvicorn takes when it is installed",
}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match[0]).lower()


def _imported_modules() -> dict[str, str]:
    """Top-level third-party module -> one file importing it."""
    found: dict[str, str] = {}
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PRODUCTION:
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_production_imports_only_what_pyproject_names_and_uses_every_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    distributions = importlib.metadata.packages_distributions()
    imported = _imported_modules()

    undeclared = []
    used: set[str] = set()
    for module, where in imported.items():
        dists = {_name(d) for d in distributions.get(module, [module])}
        if not dists & (runtime | extras):
            undeclared.append(f"{module} (imported by {where}; from {sorted(dists)})")
        used |= dists & runtime
    assert not undeclared, f"name these in pyproject.toml's dependencies: {undeclared}"

    # psycopg[binary] brings psycopg-binary, which psycopg loads itself.
    unused = runtime - used - set(NOT_IMPORTED) - {"psycopg-binary"}
    assert not unused, f"runtime dependencies no production module imports: {sorted(unused)}"
    for test_only in ("croniter", "psutil", "matplotlib", "pytest"):
        assert test_only not in runtime, test_only
