"""Keep ops/ honest: alerts, dashboard and deployment examples against the code.

Every metric and label that an alert rule or a dashboard panel uses must be one
that cluster/metrics.py exports; every setting the deployment examples name must
be a field of cluster.config.Settings (and the example TOML must list them all,
with their defaults); every alert must say what it means and link a runbook
section that exists. promtool, when installed, also checks the PromQL and runs
the rule unit tests in ops/prometheus/tests/.

PyYAML is not a dependency of the project, so the YAML files are read with the
small loader below, which understands the subset ops/ is written in (block
mappings and sequences, quoted and plain scalars, literal and folded block
scalars, flow lists). Where PyYAML is installed the two are compared.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics import MetricWrapperBase

import cluster.metrics
from cluster.cli import main as cli_main
from cluster.config import Settings

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
PROM = OPS / "prometheus"
RULE_FILES = [PROM / "alerts.yml", PROM / "cron-overrides.yml"]
DASHBOARD = OPS / "grafana" / "vakit-dashboard.json"
DEPLOY = OPS / "deploy"
K8S = DEPLOY / "kubernetes"
README = OPS / "README.md"

SEVERITIES = {"critical", "warning", "info"}
# Labels Prometheus adds to every scraped series (target labels), besides the
# ones Vakit sets. `up` is Prometheus's own per-target series.
TARGET_LABELS = {"job", "instance"}
BUILTIN_SERIES = {"up": set(TARGET_LABELS)}


# -- a small YAML loader for the subset ops/ uses ------------------------------

_KEY = re.compile(
    r"""^(?P<key>"[^"]*"|'[^']*'|[^\s#'"\[\]{},&*!|>%@`-][^#]*?|-[^\s#][^#]*?)\s*:(?:\s+|$)"""
)


class _Yaml:
    """Block-style YAML: enough for Prometheus rules and Kubernetes manifests."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.pos = 0
        # The virtual indent of a line whose start was consumed ("- key: v").
        self.override: dict[int, tuple[int, str]] = {}

    def _line(self, i: int) -> tuple[int, str]:
        if i in self.override:
            return self.override[i]
        raw = self.lines[i]
        stripped = raw.lstrip(" ")
        if "\t" in raw[: len(raw) - len(stripped)]:
            raise ValueError(f"line {i + 1}: tab in indentation")
        return len(raw) - len(stripped), stripped.rstrip()

    def _next(self) -> tuple[int, str] | None:
        """Skip blank and comment lines; the next significant (indent, text)."""
        while self.pos < len(self.lines):
            indent, text = self._line(self.pos)
            if text and not text.startswith("#"):
                return indent, text
            self.pos += 1
        return None

    def node(self, parent_indent: int) -> Any:
        nxt = self._next()
        if nxt is None or nxt[0] < parent_indent:
            return None
        indent, text = nxt
        if text == "-" or text.startswith("- "):
            return self.sequence(indent)
        if _KEY.match(text):
            return self.mapping(indent)
        self.pos += 1
        return _scalar(text, self.pos)

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while (nxt := self._next()) is not None and nxt[0] == indent:
            text = nxt[1]
            m = _KEY.match(text)
            if m is None or text.startswith("- "):
                break
            key = _scalar(m.group("key"), self.pos)
            rest = text[m.end() :]
            if key in out:
                raise ValueError(f"line {self.pos + 1}: duplicate key {key!r}")
            self.pos += 1
            out[key] = self._value(rest, indent)
        return out

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while (nxt := self._next()) is not None and nxt[0] == indent:
            text = nxt[1]
            if not (text == "-" or text.startswith("- ")):
                break
            item = text[1:].lstrip(" ")
            if not item or item.startswith("#"):
                self.pos += 1
                out.append(self.node(indent + 1))
            elif _KEY.match(item):
                # "- key: value" opens a mapping whose keys sit where "key" does.
                self.override[self.pos] = (indent + len(text) - len(item), item)
                out.append(self.mapping(indent + len(text) - len(item)))
            else:
                self.pos += 1
                out.append(self._value(item, indent, inline_only=True))
        return out

    def _value(self, rest: str, indent: int, inline_only: bool = False) -> Any:
        rest = rest.strip()
        if rest.startswith(("|", ">")):
            return self._block(rest, indent)
        if rest and not rest.startswith("#"):
            return _scalar(rest, self.pos)
        if inline_only:
            return None
        nxt = self._next()
        if nxt is None:
            return None
        # A sequence may sit at its key's own indent.
        if nxt[0] > indent or (nxt[0] == indent and (nxt[1] == "-" or nxt[1].startswith("- "))):
            return self.node(indent if nxt[0] == indent else indent + 1)
        return None

    def _block(self, header: str, indent: int) -> str:
        style, chomp = header[0], header[1:].split("#")[0].strip()
        if chomp not in ("", "-", "+"):
            raise ValueError(f"line {self.pos}: unsupported block header {header!r}")
        body: list[str] = []
        block_indent: int | None = None
        while self.pos < len(self.lines):
            raw = self.lines[self.pos]
            if raw.strip() == "":
                body.append("")
                self.pos += 1
                continue
            ind = len(raw) - len(raw.lstrip(" "))
            if ind <= indent:
                break
            if block_indent is None:
                block_indent = ind
            if ind < block_indent:
                break
            body.append(raw[block_indent:])
            self.pos += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            text = _fold(body)
        if chomp == "-" or not body:
            return text
        if chomp == "+":
            return text + "\n" * (trailing + 1)
        return text + "\n"


def _fold(lines: list[str]) -> str:
    out = ""
    prev_blank = True
    for line in lines:
        if line == "":
            out += "\n"
            prev_blank = True
            continue
        if line.startswith(" "):
            raise ValueError("more-indented lines in folded scalars are not supported")
        out += line if prev_blank else " " + line
        prev_blank = False
    return out


def _scalar(text: str, lineno: int) -> Any:
    text = text.strip()
    if text.startswith('"'):
        end = _closing_quote(text)
        return json.loads(text[: end + 1])
    if text.startswith("'"):
        m = re.match(r"'((?:[^']|'')*)'", text)
        if m is None:
            raise ValueError(f"line {lineno}: unterminated quote in {text!r}")
        return m.group(1).replace("''", "'")
    if text.startswith("["):
        return _flow_list(text, lineno)
    if text.startswith("{"):
        if re.fullmatch(r"\{\s*\}(\s+#.*)?", text):
            return {}
        raise ValueError(f"line {lineno}: flow mappings are not supported: {text!r}")
    text = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    if text in ("", "~", "null"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.lower() in ("yes", "no", "on", "off", "y", "n"):
        raise ValueError(f"line {lineno}: {text!r} means a boolean to YAML 1.1: quote it")
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", text):
        return float(text)
    return text


def _closing_quote(text: str) -> int:
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    raise ValueError(f"unterminated quote in {text!r}")


def _flow_list(text: str, lineno: int) -> list[Any]:
    m = re.fullmatch(r"\[(.*)\](\s+#.*)?", text)
    if m is None:
        raise ValueError(f"line {lineno}: flow list must fit on one line: {text!r}")
    inner = m.group(1).strip()
    items = re.findall(r"""\s*("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^,]+)\s*(?:,|$)""", inner)
    return [_scalar(item, lineno) for item in items if item.strip()]


def load_yaml_all(path: Path) -> list[Any]:
    docs = re.split(r"(?m)^---[ \t]*$", path.read_text())
    out = []
    for doc in docs:
        parser = _Yaml(doc)
        value = parser.node(0)
        if parser._next() is not None:
            raise ValueError(
                f"{path}: could not read line {parser.pos + 1}: {parser.lines[parser.pos]!r}"
            )
        if value is not None:
            out.append(value)
    return out


def load_yaml(path: Path) -> Any:
    (doc,) = load_yaml_all(path)
    return doc


# ops/compose uses anchors and merge keys, as compose files do; it is read with
# PyYAML and validated as a Compose file in tests/unit/test_compose.py.
YAML_FILES = sorted(
    p for p in OPS.rglob("*") if p.suffix in (".yml", ".yaml") and "compose" not in p.relative_to(OPS).parts
)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(OPS)))
def test_yaml_loader_agrees_with_pyyaml(path: Path) -> None:
    docs = load_yaml_all(path)
    assert docs, f"{path} is empty"
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        pytest.skip("PyYAML not installed; the small loader alone read the file")
    assert docs == [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


# -- what Vakit exports -----------------------------------------------------------


def _families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Metric family -> (type, label names), from the exposition text."""
    labels = {
        obj._name: tuple(obj._labelnames)
        for obj in vars(cluster.metrics).values()
        if isinstance(obj, MetricWrapperBase)
    }
    text = generate_latest(REGISTRY).decode()
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        base = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
        out[name] = (kind, labels.get(base, ()))
    return out


def exported_series() -> dict[str, set[str]]:
    """Every series name a Vakit process exposes -> the labels it may carry."""
    series: dict[str, set[str]] = {}
    for name, (kind, labels) in _families().items():
        base = set(labels) | TARGET_LABELS
        if kind == "counter":
            stem = name[: -len("_total")] if name.endswith("_total") else name
            series[stem + "_total"] = base
            series[stem + "_created"] = base
        elif kind == "histogram":
            series[name + "_bucket"] = base | {"le"}
            series[name + "_count"] = base
            series[name + "_sum"] = base
            series[name + "_created"] = base
        elif kind == "summary":
            series[name] = base | {"quantile"}
            series[name + "_count"] = base
            series[name + "_sum"] = base
            series[name + "_created"] = base
        else:
            series[name] = base
    series.update(BUILTIN_SERIES)
    return series


def vakit_metric_objects() -> dict[str, MetricWrapperBase]:
    objects = {name: getattr(cluster.metrics, name) for name in cluster.metrics.__all__}
    return {name: obj for name, obj in objects.items() if isinstance(obj, MetricWrapperBase)}


def test_every_declared_metric_is_exposed() -> None:
    series = exported_series()
    for attr, obj in vakit_metric_objects().items():
        kind = obj._type
        name = obj._name + (
            "_total" if kind == "counter" else "_count" if kind == "histogram" else ""
        )
        assert name in series, f"cluster.metrics.{attr} ({obj._name}) is not in /metrics"


# -- PromQL, read just enough to find metric names and labels ---------------------

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
}  # fmt: skip
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_IDENT = re.compile(r"(?<![\w.:$])([A-Za-z_:][\w:]*+)(?!\s*\()")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")


def promql_refs(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """(series selectors as (name, matcher labels), grouping labels) in ``expr``."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"#[^\n]*", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries, Grafana's [$__rate_interval]
    grouping: set[str] = set()

    def _group(m: re.Match[str]) -> str:
        grouping.update(label.strip() for label in m.group(2).split(",") if label.strip())
        return " "

    text = _GROUPING.sub(_group, text)
    selectors: list[tuple[str, set[str]]] = []

    def _selector(m: re.Match[str]) -> str:
        labels = set(_MATCHER.findall(m.group(2)))
        name = m.group(1)
        if name is None or name in _KEYWORDS:
            # {__name__="..."} or "by {...}" style: keep what we can check.
            selectors.append(("", labels))
            return f" {name or ''} "
        selectors.append((name, labels))
        return " "

    text = _SELECTOR.sub(_selector, text)
    for name in _IDENT.findall(text):
        if name not in _KEYWORDS:
            selectors.append((name, set()))
    return selectors, grouping


def test_promql_reader() -> None:
    selectors, grouping = promql_refs(
        'sum by (le, shard) (rate(vakit_x_bucket{shard=~"$shard", le!="1"}[$__rate_interval]))'
        " / on (shard) group_left sum without (change) (vakit:y) > 2 * 3600 unless up == 0"
    )
    assert sorted(selectors, key=lambda s: s[0]) == [
        ("up", set()),
        ("vakit:y", set()),
        ("vakit_x_bucket", {"shard", "le"}),
    ]
    assert grouping == {"le", "shard", "change"}


def _check_expr(where: str, expr: str, series: dict[str, set[str]], records: set[str]) -> list[str]:
    problems = []
    all_labels = set().union(*series.values())
    selectors, grouping = promql_refs(expr)
    for name, labels in selectors:
        if ":" in name:
            if name not in records:
                problems.append(f"{where}: recording rule {name} is not defined in ops/prometheus")
            continue
        if name == "":
            unknown = labels - all_labels - {"__name__"}
        elif name not in series:
            problems.append(f"{where}: {name} is not a metric Vakit exports (cluster/metrics.py)")
            continue
        else:
            unknown = labels - series[name] - {"__name__"}
        if unknown:
            problems.append(f"{where}: {name} has no label(s) {sorted(unknown)}")
    if grouping - all_labels:
        problems.append(f"{where}: grouping by unknown label(s) {sorted(grouping - all_labels)}")
    return problems


# -- alert and recording rules ------------------------------------------------------


def _rules() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in RULE_FILES:
        doc = load_yaml(path)
        assert set(doc) == {"groups"}, f"{path}: top level must be `groups`"
        for group in doc["groups"]:
            assert group.get("name") and isinstance(group.get("rules"), list), f"{path}: {group}"
            for rule in group["rules"]:
                yield path, rule


def _alerts() -> list[dict[str, Any]]:
    return [rule for _, rule in _rules() if "alert" in rule]


def _records() -> set[str]:
    return {rule["record"] for _, rule in _rules() if "record" in rule}


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _readme_anchors() -> set[str]:
    return {
        _anchor(m.group(1))
        for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", README.read_text(), re.M)
    }


def test_rules_are_well_formed() -> None:
    names: set[str] = set()
    for path, rule in _rules():
        kinds = {"alert", "record"} & set(rule)
        assert len(kinds) == 1, f"{path}: a rule is an alert or a record: {rule}"
        assert isinstance(rule.get("expr"), str) and rule["expr"].strip(), f"{path}: {rule}"
        if "alert" in rule:
            name = rule["alert"]
            assert re.fullmatch(r"Vakit[A-Z]\w+", name), f"{name}: alerts are named VakitSomething"
            assert name not in names, f"alert {name} defined twice"
            names.add(name)
            allowed = {"alert", "expr", "for", "labels", "annotations"}
            assert set(rule) <= allowed | {"keep_firing_for"}, f"{name}: unknown keys"
            assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: needs `for`"
        else:
            assert re.fullmatch(r"vakit:[a-z0-9_:]+", rule["record"]), rule["record"]
            assert set(rule) <= {"record", "expr", "labels"}, f"{rule['record']}: unknown keys"


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_alert_says_what_it_means(alert: dict[str, Any]) -> None:
    name = alert["alert"]
    assert alert.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity"
    notes = alert.get("annotations", {})
    for key in ("summary", "description", "runbook_url"):
        assert isinstance(notes.get(key), str) and notes[key].strip(), f"{name}: needs {key}"
    assert len(notes["summary"]) <= 160, f"{name}: keep the summary to one line"
    url = notes["runbook_url"]
    assert url.split("#")[0].endswith("ops/README.md"), (
        f"{name}: runbook_url must point at ops/README.md"
    )
    anchor = url.partition("#")[2]
    assert anchor == _anchor(name), f"{name}: runbook anchor should be #{_anchor(name)}"
    assert anchor in _readme_anchors(), f"{name}: ops/README.md has no section {name}"


def test_every_runbook_section_has_an_alert() -> None:
    text = README.read_text()
    sections = set(re.findall(r"^###\s+(Vakit[A-Z]\w+)\s*$", text, re.M))
    alerts = {a["alert"] for a in _alerts()}
    assert sections == alerts, (
        f"runbook sections without an alert: {sorted(sections - alerts)}; "
        f"alerts without a section: {sorted(alerts - sections)}"
    )


def test_runbook_links_resolve() -> None:
    text = README.read_text()
    anchors = _readme_anchors()
    broken = [link for link in re.findall(r"\]\(#([^)]+)\)", text) if link not in anchors]
    assert not broken, f"ops/README.md links to missing sections: {broken}"
    for link in re.findall(r"\]\((?!#|https?:)([^)#]+)", text):
        assert (OPS / link).exists(), f"ops/README.md links to a missing file: {link}"


def test_rule_exprs_use_only_exported_metrics() -> None:
    series = exported_series()
    records = _records()
    problems = []
    for path, rule in _rules():
        where = f"{path.name}:{rule.get('alert') or rule.get('record')}"
        problems += _check_expr(where, rule["expr"], series, records)
    assert not problems, "\n".join(problems)


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return tool


def _run(args: list[str], cwd: Path) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_checks_rules_and_config() -> None:
    tool = _promtool()
    _run([tool, "check", "rules", *(p.name for p in RULE_FILES)], PROM)
    _run([tool, "check", "config", "prometheus.yml"], PROM)


def test_promtool_rule_unit_tests() -> None:
    tool = _promtool()
    _run([tool, "test", "rules", "tests/alerts_test.yml"], PROM)


def test_promtool_parses_dashboard_queries(tmp_path: Path) -> None:
    tool = _promtool()
    dashboard = json.loads(DASHBOARD.read_text())
    rules = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "5m").replace("$shard", ".*")
            rules.append(
                {"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr}
            )
    # JSON is YAML: no YAML writer needed.
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    _run([tool, "check", "rules", str(path)], tmp_path)


def test_scrape_config_matches_alert_job_names() -> None:
    config = load_yaml(PROM / "prometheus.yml")
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"vakit-api", "vakit-worker"} <= jobs
    assert set(config["rule_files"]) == {p.name for p in RULE_FILES}
    used: set[str] = set()
    for alert in _alerts():
        used.update(re.findall(r'job=~?"([^"]+)"', alert["expr"]))
    for pattern in used:
        assert any(re.fullmatch(pattern, job) for job in jobs), f"no scrape job matches {pattern}"


# -- the Grafana dashboard ----------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return result


def test_dashboard_is_importable(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    assert dashboard.get("id") is None, "an exported dashboard must not carry a database id"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables.get("DS_PROMETHEUS")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus"
    shard = variables.get("shard")
    assert shard and shard["type"] == "query" and shard["includeAll"] and shard["multi"]
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']} is wider than the grid"
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_dashboard_queries_use_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in _panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel[
            "title"
        ]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]


def test_dashboard_exprs_use_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    series = exported_series()
    problems = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            # The dashboard must work without the recording rules loaded.
            problems += _check_expr(f"panel {panel['title']!r}", target["expr"], series, set())
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query or "")
        if var["type"] == "query":
            assert m, f"variable {var['name']}: expected label_values(metric, label)"
            metric, label = m.groups()
            if metric not in series or label not in series[metric]:
                problems.append(f"variable {var['name']}: {metric} has no label {label}")
    assert not problems, "\n".join(problems)


def test_dashboard_shows_every_metric(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            used.update(name for name, _ in promql_refs(target["expr"])[0])
    missing = [
        obj._name
        for obj in vakit_metric_objects().values()
        if not any(name == obj._name or name.startswith(obj._name + "_") for name in used)
    ]
    assert not missing, f"metrics with no dashboard panel: {missing}"


# -- configuration and deployment examples -------------------------------------------

FIELDS = set(Settings.model_fields)
_ASSIGNMENT = re.compile(r"^(#\s*)?([a-z][a-z0-9_]*)\s*=")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("VAKIT_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_toml_example_lists_every_setting_once() -> None:
    path = DEPLOY / "vakit.toml.example"
    lines = path.read_text().splitlines()
    active = set(tomllib.loads(path.read_text()))
    seen: list[str] = []
    for i, line in enumerate(lines):
        m = _ASSIGNMENT.match(line)
        if not m:
            continue
        seen.append(m.group(2))
        before = lines[i - 1].strip() if i else ""
        assert before.startswith("#") and not _ASSIGNMENT.match(before), (
            f"vakit.toml.example:{i + 1}: {m.group(2)} needs a comment line above it"
        )
    assert sorted(seen) == sorted(set(seen)), "a setting appears twice"
    assert set(seen) - FIELDS == set(), f"not settings: {sorted(set(seen) - FIELDS)}"
    assert FIELDS - set(seen) == set(), (
        f"settings missing from the example: {sorted(FIELDS - set(seen))}"
    )
    commented = set(seen) - active
    for name in commented:
        assert Settings.model_fields[name].default is None, (
            f"{name} is commented out but has a default: show it as `{name} = ...`"
        )


def test_toml_example_shows_the_defaults(clean_env: pytest.MonkeyPatch) -> None:
    defaults = Settings().model_dump()
    clean_env.setenv("VAKIT_CONFIG", str(DEPLOY / "vakit.toml.example"))
    from_file = Settings().model_dump()
    differ = {k: (from_file[k], defaults[k]) for k in defaults if from_file[k] != defaults[k]}
    assert not differ, f"vakit.toml.example values that are not the defaults: {differ}"


def test_kubernetes_config_file_is_valid(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (configmap,) = load_yaml_all(K8S / "configmap.yaml")
    text = configmap["data"]["vakit.toml"]
    assert set(tomllib.loads(text)) <= FIELDS
    path = tmp_path / "vakit.toml"
    path.write_text(text)
    clean_env.setenv("VAKIT_CONFIG", str(path))
    Settings()


def _text_files() -> Iterator[Path]:
    for path in sorted(OPS.rglob("*")):
        if path.is_file() and path.suffix not in (".json",):
            yield path


def test_every_vakit_variable_named_in_ops_is_a_setting() -> None:
    problems = []
    for path in _text_files():
        for name in set(re.findall(r"\bVAKIT_([A-Z0-9_]+)\b", path.read_text())):
            if name != "CONFIG" and name.lower() not in FIELDS:
                problems.append(f"{path.relative_to(OPS)}: VAKIT_{name} is not a setting")
    assert not problems, "\n".join(problems)


def _manifests() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_yaml_all(path):
            if "kind" in doc and doc["kind"] != "Kustomization":
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    result: dict[str, Any] = container
    return result


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_kubernetes_manifests() -> None:
    kustomization = load_yaml(K8S / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), f"kustomization lists a missing file: {resource}"
    docs = _manifests()
    commands = set(cli_main.commands)
    for (kind, name), doc in docs.items():
        if kind in ("Deployment", "Job"):
            container = _container(doc)
            assert container["args"][0] in commands, (
                f"{name}: vakit has no command {container['args']}"
            )
            assert {"secretRef": {"name": "vakit-secrets"}} in container["envFrom"], name
    secret = docs[("Secret", "vakit-secrets")]
    assert {"VAKIT_SHARDS", "VAKIT_API_TOKENS"} <= set(secret["stringData"])
    json.loads(secret["stringData"]["VAKIT_SHARDS"])  # a JSON list, as Settings reads it

    worker = docs[("Deployment", "vakit-worker")]
    container = _container(worker)
    env = _env(container)
    grace = float(
        env.get("VAKIT_STOP_GRACE_SECONDS") or Settings.model_fields["stop_grace_seconds"].default
    )
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace + 10
    port = int(env["VAKIT_METRICS_PORT"])
    assert env["VAKIT_METRICS_HOST"] == "0.0.0.0"
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert docs[("Service", "vakit-worker")]["spec"]["ports"][0]["port"] == port

    api = _container(docs[("Deployment", "vakit-api")])
    api_env = _env(api)
    assert api_env["VAKIT_API_HOST"] == "0.0.0.0"
    assert {"name": "http", "containerPort": int(api_env["VAKIT_API_PORT"])} in api["ports"]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (migrate,) = [doc for (kind, _), doc in docs.items() if kind == "Job"]
    assert _container(migrate)["args"] == ["migrate"]
    assert migrate["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # The alerts find the processes by job name, which a ServiceMonitor takes
    # from the Service name.
    assert ("Service", "vakit-api") in docs and ("Service", "vakit-worker") in docs


def _unit(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    return values


@pytest.mark.parametrize("name", ["vakit-api.service", "vakit-worker@.service"])
def test_systemd_units(name: str) -> None:
    unit = _unit(DEPLOY / "systemd" / name)
    (exec_start,) = unit["ExecStart"]
    argv = exec_start.split()
    assert argv[0].endswith("/vakit") and argv[1] in cli_main.commands
    env = dict(e.partition("=")[::2] for e in unit.get("Environment", []))
    if "worker" in name:
        grace = float(
            env.get("VAKIT_STOP_GRACE_SECONDS")
            or Settings.model_fields["stop_grace_seconds"].default
        )
        (timeout,) = unit["TimeoutStopSec"]
        assert float(timeout) > grace + 10, "TimeoutStopSec must outlast the worker's stop grace"
        assert env["VAKIT_METRICS_PORT"] == "%i" and env["VAKIT_METRICS_HOST"] == "0.0.0.0"


# -- PrometheusRule and KEDA -----------------------------------------------------


def test_prometheusrule_is_the_rule_files() -> None:
    """The manifest holds the rule files' groups verbatim and is regenerated
    by ops/prometheus/to_prometheusrule.py (the failure says how)."""
    path = K8S / "prometheusrule.yaml"
    script = PROM / "to_prometheusrule.py"
    rendered = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True
    ).stdout
    assert path.read_text() == rendered, (
        f"{path.name} is stale: python3 {script.relative_to(ROOT)} > {path.relative_to(ROOT)}"
    )
    doc = load_yaml(path)
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    expected = [g for f in RULE_FILES for g in load_yaml(f)["groups"]]
    assert doc["spec"]["groups"] == expected


def test_keda_scales_the_workers_on_a_recorded_backlog() -> None:
    (doc,) = load_yaml_all(K8S / "keda-scaledobject.yaml")
    assert doc["kind"] == "ScaledObject"
    target = doc["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) in _manifests(), "scales a Deployment that exists"
    assert (target["kind"], target["name"]) == ("Deployment", "vakit-worker")
    assert 1 <= doc["spec"]["minReplicaCount"] <= doc["spec"]["maxReplicaCount"]
    (trigger,) = doc["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    problems = _check_expr("keda", query, exported_series(), _records())
    assert not problems, problems
    assert "vakit:due_unclaimed_jobs:max" in query  # the leader-filtered backlog
    assert float(trigger["metadata"]["threshold"]) > 0


def test_lateness_buckets_read_a_large_waves_tail() -> None:
    """Between 1 s and 60 s, neighbouring buckets are at most 1.5x apart, so a
    p99 in that range is read to within a third of its value."""
    bounds = [b for b in cluster.metrics.START_LATENESS._upper_bounds if 1 <= b <= 60]
    assert bounds[0] == 1 and bounds[-1] == 60
    assert all(hi / lo <= 1.5 for lo, hi in itertools.pairwise(bounds)), bounds


def test_deployment_examples_name_the_version_of_the_code() -> None:
    """The version is written once, in cluster/__init__.py; the image tags the
    examples deploy (and the migrate Job's name) must follow it."""
    version = cluster.__version__
    kustomization = load_yaml(K8S / "kustomization.yaml")
    assert [image["newTag"] for image in kustomization["images"]] == [version]
    for (kind, name), doc in _manifests().items():
        if kind in ("Deployment", "Job"):
            image = _container(doc)["image"]
            assert image.endswith(f":{version}"), f"{name}: {image} is not {version}"
        if kind == "Job":  # a Job per release: its name carries the version
            assert name.endswith(version.replace(".", "-")), name
    tags = re.findall(r"registry\.example\.com/vakit:(\S+)", (OPS / "README.md").read_text())
    assert tags and set(tags) == {version}
    assert "version" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
