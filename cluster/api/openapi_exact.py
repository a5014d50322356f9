"""What the server checks in code, said in the OpenAPI document as well.

The models' JSON Schema says what pydantic checks (types, lengths, bounds,
enums, the instants' pattern). Some checks run in code after it, on the
same text: a time zone is one this machine knows, a target URL is an
absolute http(s) URL, a schedule is written in the cron grammar, an id is
one this API hands out. Each is said here with the schema that is exactly
(or, where a pattern cannot say all, at least) what the code accepts, so a
client generated from the document refuses what the server would.

What a schema cannot say stays in the descriptions: a host the owner is
granted and the operator allows, a schedule that fires at all and not more
often than once a minute, startAt before endAt, a calendar that exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import shardmap
from cluster.cron.schedule import zone_names
from cluster.instants import INSTANT_PATTERN
from cluster.model import JobStatus
from cluster.services.job_document import MAX_LABEL_VALUE

__all__ = ["ID_PATTERNS", "SCHEDULE_PATTERN", "URL_PATTERN", "exact_document"]


def _id_pattern(prefix: str) -> str:
    """``prefix_`` and 26 Crockford base-32 digits that decode to a version 7
    UUID (shardmap.decode_id): the first digit holds 3 bits, the version
    nibble (0111) is the top of the 11th digit, the variant (10) is the
    middle of the 14th."""
    decode: dict[str, int] = shardmap._DECODE

    def chars(ok: Callable[[int], bool]) -> str:
        letters = sorted(
            {c for c, v in decode.items() if ok(v)}
            | {c.lower() for c, v in decode.items() if ok(v)}
        )
        return "[" + "".join(letters) + "]"

    any_digit = chars(lambda v: True)
    version = chars(lambda v: v >> 1 == 0b0111)
    variant = chars(lambda v: v >> 2 & 0b11 == 0b10)
    first = chars(lambda v: v < 8)
    return f"^{prefix}_{first}{any_digit}{{9}}{version}{any_digit}{{2}}{variant}{any_digit}{{12}}$"


ID_PATTERNS = {"job": _id_pattern("job"), "cron": _id_pattern("cron")}


def _nocase(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# The cron grammar's shape (cluster.cron.expression): a macro, an interval, or
# five fields of its characters. Which values a field may hold, and whether the
# schedule fires at all and at most once a minute, are the parser's: said in
# the description.
_MACRO = "@(?:" + "|".join(_nocase(m) for m in (
    "yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly",
)) + ")"  # fmt: skip
_D, _H, _M, _S = "[0-9]{1,4}[Dd]", "[0-9]{1,6}[Hh]", "[0-9]{1,8}[Mm]", "[0-9]{1,10}[Ss]"
_DURATION = f"(?:{_D}(?:{_H})?(?:{_M})?(?:{_S})?|{_H}(?:{_M})?(?:{_S})?|{_M}(?:{_S})?|{_S})"
_INTERVAL = (
    f"{_nocase('every')}[ \\t\\n\\r\\f\\v]+{_DURATION}"
    f"(?:[ \\t\\n\\r\\f\\v]+(?:{_nocase('fixed-delay')}|{_nocase('fixed-rate')}))?"
)
_FIELD = "[A-Za-z0-9*/,()#-]+"
_FIELDS = f"{_FIELD}(?:[ \\t]+{_FIELD}){{4}}"
_SPACE = "[ \\t\\n\\r\\f\\v]*"
SCHEDULE_PATTERN = f"^{_SPACE}(?:{_MACRO}|{_INTERVAL}|{_FIELDS}){_SPACE}$"
_SCHEDULE_HELP = (
    " The pattern is the grammar's shape; the server also refuses a field value out of "
    "its range, a schedule that never fires, and one that may fire more often than once "
    "a minute (or an interval under 1 minute or over 365 days)."
)

# An absolute http(s) URL in printable ASCII. The host must also be a valid
# name or address, granted to the owner and allowed by the operator: the
# deployment's and the owner's, said in the description.
URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]?://[!-~]+$"


# GET /api/v1/jobs's query values the handler reads in code
# (cluster.api.job_actions): statuses in any case, comma separated; a label
# filter key=value with a label's key; the cursor a page gave (or none).
_STATUS = "(?:" + "|".join(_nocase(s.value) for s in JobStatus) + ")"
_WS = "[ \\t\\n\\r\\f\\v]*"
_QUERY_PATTERNS = {
    "status": f"^{_WS}{_STATUS}{_WS}(?:,{_WS}{_STATUS}{_WS})*$",
    "label": f"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{{0,61}}[A-Za-z0-9])?=[\\s\\S]{{0,{MAX_LABEL_VALUE}}}$",
    "cursor": "^(?:" + ID_PATTERNS["job"][1:-1] + ")?$",
}


# Path (and query) parameters by name: ids, and a calendar's name
# (cluster.cron.calendar_rules.check_calendar_name).
_PATH_PATTERNS = {
    "job_id": ID_PATTERNS["job"],
    "cron_job_id": ID_PATTERNS["cron"],
    "cronJobId": ID_PATTERNS["cron"],
    "name": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$",
}


# cluster.api.strictjson: a rule of every string of every request, which a
# pattern on each would only repeat.
_STRICT_JSON = (
    " Requests are I-JSON (RFC 7493): no string, in a body or a query, may hold a NUL "
    "character (\\u0000) or a lone surrogate, and a number must fit a double; such a "
    "request is refused with a 422 (400 when it is not JSON at all)."
)
# An HTTP target's extra headers as cluster.targets.kinds.http checks them.
# Which names an owner may set is the operator's (VAKIT_TARGET_HEADER_DENY)
# and Vakit's own: said in the field's description.
_HEADERS = {
    "type": "object",
    "maxProperties": 20,
    "propertyNames": {"pattern": "^[A-Za-z0-9-]{1,64}$"},
    "additionalProperties": {"type": "string", "maxLength": 1024, "pattern": "^[^\\r\\n]*$"},
}


def _headers(prop: dict[str, Any]) -> None:
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "object":
            branch.clear()
            branch.update(_HEADERS)


# Rules between fields, which a schema of one field cannot say: in its
# description, and refused with a 422.
_CROSS_FIELD = {
    "startAt": "Not after endAt.",
    "includeDates": "A day may not be in excludeDates as well.",
}


def _string_branch(prop: dict[str, Any]) -> dict[str, Any] | None:
    """The string schema of a property, inside ``anyOf`` when it is optional."""
    if prop.get("type") == "string":
        return prop
    for branch in prop.get("anyOf", ()):
        if branch.get("type") == "string":
            return branch  # type: ignore[no-any-return]
    return None


def _properties(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for model, schema in spec.get("components", {}).get("schemas", {}).items():
        for name, prop in schema.get("properties", {}).items():
            yield model, name, prop


def exact_document(spec: dict[str, Any]) -> None:
    """Add to ``spec`` (in place) what the server's code checks."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas["TimeZone"] = {
        "title": "TimeZone",
        "description": "An IANA time zone name this server knows, spelled as the tz "
        "database spells it.",
        "type": "string",
        "enum": zone_names(),
    }
    info = spec.setdefault("info", {})
    info["description"] = info.get("description", "") + _STRICT_JSON
    for model, name, prop in _properties(spec):
        if name == "headers" and model.startswith("Http"):
            _headers(prop)
            continue
        rule = _CROSS_FIELD.get(name)
        if rule is not None and not model.endswith("Out"):
            prop["description"] = (prop.get("description", "") + " " + rule).strip()
        branch = _string_branch(prop)
        if branch is None:
            continue
        if name == "timeZone" and not model.endswith("Out"):
            branch.clear()
            branch["$ref"] = "#/components/schemas/TimeZone"
        elif name == "url" and model.startswith("Http"):
            branch["pattern"] = URL_PATTERN
        elif name == "schedule" and not model.endswith("Out"):
            branch["pattern"] = SCHEDULE_PATTERN
            prop["description"] = prop.get("description", "") + _SCHEDULE_HELP
        elif name == "cronJobId" and not model.endswith(("Out", "Result")):
            branch["pattern"] = ID_PATTERNS["cron"]
        elif name == "cursor" and model.startswith("Bulk"):
            branch["pattern"] = ID_PATTERNS["job"]
    for operations in spec.get("paths", {}).values():
        for operation in operations.values():
            if operation.get("operationId") == "searchJobs":
                _search_parameters(operation)
            for param in operation.get("parameters", ()):
                branch = _string_branch(param.get("schema", {}))
                if branch is not None and branch.get("pattern") == INSTANT_PATTERN:
                    # A day the month lacks (02-30) is the format's to say.
                    branch["format"] = "date-time"
                pattern = _PATH_PATTERNS.get(param["name"])
                if pattern is not None and branch is not None and param["in"] != "header":
                    branch["pattern"] = pattern


def _search_parameters(operation: dict[str, Any]) -> None:
    for param in operation.get("parameters", ()):
        if param["name"] == "label":
            param["description"] = (
                param.get("description", "") + " A key may be asked with one value only, "
                "and at most 16 keys."
            ).strip()
        pattern = _QUERY_PATTERNS.get(param["name"])
        schema = param.get("schema", {})
        for branch in schema.get("anyOf", [schema]):
            target = branch.get("items") if branch.get("type") == "array" else branch
            if pattern is not None and target is not None and target.get("type") == "string":
                target["pattern"] = pattern
