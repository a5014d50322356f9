"""The grammar of schedules: what users may write, read into fields, or refused.

Two notations, both validated before anything is stored:

* cron: five fields (minute hour day-of-month month day-of-week) or a macro
  (``@daily`` ...). Fields take numbers, ranges, lists and steps, month and
  weekday names (``JAN-DEC``, ``SUN-SAT``), ``L`` (last day of the month),
  Quartz's day forms ``15W``, ``LW``, ``L-3``, ``MON#3`` and ``FRIL``, business
  days ``2BD`` and ``LBD`` (:mod:`cluster.cron.day_forms`) and Jenkins' ``H`` (a value fixed by a seed,
  to spread many jobs over the hour).
* intervals: ``every 15m``, ``every 1h30m fixed-delay``.

A parsed cron expression is a :class:`CronFields`; when and how it fires in a
time zone (DST included) is :mod:`cluster.cron.wall_clock`'s business. Fields are
parsed here rather than by croniter so that hostile input is refused by a small,
linear grammar with messages a person can act on. Besides syntax, an expression
is refused when its ranges run backwards, when its days never occur
(``0 0 30 2 *``) and when it may fire more often than the caller allows.
"""

from __future__ import annotations

import calendar
import hashlib
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from cluster.cron.day_forms import DayForms, parse_dom_form, parse_dow_form
from cluster.errors import InvalidRequest

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_INTERVAL",
    "MAX_LIST_ITEMS",
    "MIN_INTERVAL",
    "CronFields",
    "Expression",
    "Interval",
    "InvalidSchedule",
    "is_wildcard",
    "parse_expression",
    "slot_seconds",
    "stable_digest",
]

MAX_EXPRESSION_LENGTH = 200
# No interval schedule may be shorter than this, whatever min_interval says: the
# materializer works at minute resolution.
MIN_INTERVAL = timedelta(minutes=1)
MAX_INTERVAL = timedelta(days=365)
# A field never has more distinct values than this (minutes); longer lists are
# either repetitive or hostile.
MAX_LIST_ITEMS = 60

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_DOW_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
_MONTH_TITLES = {i: calendar.month_name[i] for i in range(1, 13)}
# Longest each month can be: February has 29 days in leap years.
_MAX_MONTH_DAYS = {m: calendar.monthrange(2000, m)[1] for m in range(1, 13)}
_NO_FORMS = DayForms()


class InvalidSchedule(InvalidRequest, ValueError):
    """An expression, interval or time zone that cannot be scheduled.

    The message says what is wrong and, where it can, what to write instead. It is
    an :class:`InvalidRequest` (the API answers 422) and a ``ValueError``.
    """


@dataclass(frozen=True)
class CronFields:
    """A cron expression read into sets of values; times of day are in its zone."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    # Vixie cron: a day field whose text starts with "*" is "unrestricted"; when
    # either day field is, a day must match both, otherwise either one suffices.
    dom_star: bool
    dow_star: bool
    wildcard: bool
    # L, L-n, nW, LW, x#n, xL: days found per month rather than listed.
    forms: DayForms = _NO_FORMS


def slot_seconds(fields: CronFields) -> list[int]:
    """Seconds after local midnight of every slot of a matching day, ascending."""
    return sorted(h * 3600 + m * 60 for h in fields.hours for m in fields.minutes)


def stable_digest(text: str) -> int:
    """A 64-bit hash of ``text``, the same in every process (never ``hash()``)."""
    # 64 bits: the modulo bias over field ranges and jitter windows is negligible.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@dataclass(frozen=True)
class Interval:
    """An ``every …`` schedule read: its period and whether it counts from the last finish."""

    period: timedelta
    fixed_delay: bool


@dataclass(frozen=True)
class Expression:
    """An expression the grammar accepted: its text (stripped) and what it says."""

    text: str
    rule: CronFields | Interval


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    star_high: int  # "*" stops here: day-of-week 7 is Sunday again
    hash_low: int
    hash_high: int
    names: dict[str, int]
    names_hint: str = ""


_FIELDS = (
    _FieldSpec("minute", 0, 59, 59, 0, 59, {}),
    _FieldSpec("hour", 0, 23, 23, 0, 23, {}),
    # H picks a day from 1-28, as Jenkins does, so that it fires every month.
    _FieldSpec("day-of-month", 1, 31, 31, 1, 28, {}),
    _FieldSpec("month", 1, 12, 12, 1, 12, _MONTH_NAMES, "1-12 or JAN-DEC"),
    _FieldSpec("day-of-week", 0, 7, 6, 0, 6, _DOW_NAMES, "0-7 or SUN-SAT"),
)

# One item of a comma list. No nested quantifiers, so matching is linear even for
# hostile input (which is also capped at MAX_EXPRESSION_LENGTH characters).
_ITEM = re.compile(
    r"""
    (?:
        (?P<star>\*)
      | (?P<hash>H)(?:\((?P<hlow>[0-9]+|[A-Z]+)-(?P<hhigh>[0-9]+|[A-Z]+)\))?
      | (?P<last>L)
      | (?P<low>[0-9]+|[A-Z]+)(?:-(?P<high>[0-9]+|[A-Z]+))?
    )
    (?:/(?P<step>[0-9]+))?
    """,
    re.VERBOSE,
)
_NEAREST_MARK = re.compile(r"[0-9L]W")
_CRON_CHARS = re.compile(r"[A-Za-z0-9*/,()#\- \t]+")
_INTERVAL = re.compile(
    r"every\s+(?P<amount>\S+)(?:\s+(?P<mode>fixed-delay|fixed-rate))?", re.IGNORECASE
)
_DURATION = re.compile(
    r"(?:(?P<d>[0-9]{1,4})d)?(?:(?P<h>[0-9]{1,6})h)?(?:(?P<m>[0-9]{1,8})m)?(?:(?P<s>[0-9]{1,10})s)?",
    re.IGNORECASE,
)


def parse_expression(
    expression: str, *, seed: str = "", min_interval: timedelta = MIN_INTERVAL
) -> Expression:
    """Read a cron expression, macro or interval; raise :class:`InvalidSchedule` if unfit.

    ``seed`` (the cron job's id) fixes the values that ``H`` fields pick.
    ``min_interval`` refuses expressions that may fire more often than that.
    """
    if not isinstance(expression, str):
        raise InvalidSchedule(f"a schedule must be a string, got {type(expression).__name__}")
    # Checked before any other work so that huge input costs nothing.
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidSchedule(
            f"schedule is {len(expression)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    text = expression.strip()
    if not text:
        raise InvalidSchedule("schedule is empty: write e.g. '0 3 * * *' or 'every 15m'")
    if min_interval < timedelta(0):
        raise ValueError(f"min_interval must not be negative, got {min_interval}")
    if text[:5].lower() == "every":
        return Expression(text, _parse_interval(text, min_interval))
    return Expression(text, _parse_cron(text, seed, min_interval))


def is_wildcard(expression: str) -> bool:
    """Whether DST treats ``expression`` as wildcard (see :mod:`cluster.cron.wall_clock`).

    A cron expression is wildcard when its minute or hour field starts with ``*``
    (macros are expanded first: ``@hourly`` is, ``@daily`` is not). Interval
    schedules count real elapsed time, which DST never moves or repeats, as a
    wildcard schedule does: they answer True. Raises :class:`InvalidSchedule` for
    an expression that does not parse.
    """
    # A full parse, so that garbage is refused, not classified.
    rule = parse_expression(expression, min_interval=timedelta(0)).rule
    return not isinstance(rule, CronFields) or rule.wildcard


def _parse_interval(text: str, min_interval: timedelta) -> Interval:
    """Read ``every <duration> [fixed-delay|fixed-rate]``; refuse too short or too long."""
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise InvalidSchedule(
            f"cannot read {text!r}: write e.g. 'every 15m', 'every 1h30m' "
            "or 'every 15m fixed-delay'"
        )
    amount = match["amount"]
    duration = _DURATION.fullmatch(amount)
    if duration is None or not any(duration.groupdict().values()):
        raise InvalidSchedule(
            f"cannot read the interval {amount!r} in {text!r}: use whole numbers with "
            "units d, h, m, s in that order, e.g. '15m', '1h30m', '90s'"
        )
    parts = {unit: int(value or 0) for unit, value in duration.groupdict().items()}
    period = timedelta(days=parts["d"], hours=parts["h"], minutes=parts["m"], seconds=parts["s"])
    floor = max(MIN_INTERVAL, min_interval)
    if period < floor:
        raise InvalidSchedule(
            f"{text!r} fires every {_describe(period)}; the minimum interval is {_describe(floor)}"
        )
    if period > MAX_INTERVAL:
        raise InvalidSchedule(
            f"{text!r} fires every {_describe(period)}; the longest interval is "
            f"{_describe(MAX_INTERVAL)}: use a cron expression such as '0 0 1 1 *'"
        )
    return Interval(period, fixed_delay=(match["mode"] or "").lower() == "fixed-delay")


def _describe(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def _parse_cron(text: str, seed: str, min_interval: timedelta) -> CronFields:
    """Read a cron expression or macro; refuse one that never fires or fires too often."""
    fields = _read_cron(text, seed)
    _check_fires(fields, text)
    _check_frequency(fields, text, min_interval)
    return fields


def _read_cron(text: str, seed: str) -> CronFields:
    expression = text
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            known = ", ".join(_MACROS)
            raise InvalidSchedule(f"unknown macro {text!r}: use one of {known}")
        text = macro
    if "?" in text:
        raise InvalidSchedule(f"'?' is Quartz syntax: write '*' in {expression!r}")
    if not text.isascii() or not _CRON_CHARS.fullmatch(text):
        bad = next(c for c in text if not (c.isascii() and _CRON_CHARS.fullmatch(c)))
        raise InvalidSchedule(f"unexpected character {bad!r} in {expression!r}")
    parts = text.split()
    if len(parts) != 5:
        extra = ""
        if len(parts) in (6, 7):
            extra = ": seconds and year fields are not supported"
        raise InvalidSchedule(
            f"{expression!r} has {len(parts)} fields; a schedule has 5 "
            f"(minute hour day-of-month month day-of-week){extra}"
        )
    parsed = [_parse_field(part, index, seed, expression) for index, part in enumerate(parts)]
    return CronFields(
        minutes=parsed[0][0],
        hours=parsed[1][0],
        days=parsed[2][0],
        months=parsed[3][0],
        weekdays=parsed[4][0],
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
        forms=parsed[2][1].merged(parsed[4][1]),
    )


def _parse_field(
    text: str, index: int, seed: str, expression: str
) -> tuple[frozenset[int], DayForms]:
    spec = _FIELDS[index]
    items = text.upper().split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise InvalidSchedule(
            f"the {spec.name} field of {expression!r} lists {len(items)} items; "
            f"the limit is {MAX_LIST_ITEMS}"
        )
    values: set[int] = set()
    forms = DayForms()
    for item in items:
        form = _day_form(item, index, spec, expression)
        if form is not None:
            forms = forms.merged(form)
            continue
        match = _ITEM.fullmatch(item)
        if match is None:
            raise InvalidSchedule(
                f"cannot read {item!r} in the {spec.name} field of {expression!r}"
            )
        step = _step(match["step"], spec, expression)
        if match["star"]:
            low, high = spec.low, spec.star_high
        elif match["hash"]:
            if match["hlow"]:
                low = _value(match["hlow"], spec, expression)
                high = _value(match["hhigh"], spec, expression)
                _check_order(low, high, spec, expression)
            else:
                low, high = spec.hash_low, spec.hash_high
            # Jenkins' H: a value that looks random but is the same on every node
            # and every run, so that many "hourly" jobs do not all start at :00.
            digest = stable_digest(f"{seed}{index}")
            if step is None:
                values.add(low + digest % (high - low + 1))
                continue
            low += digest % step
        elif match["last"]:
            if index != 2:
                raise InvalidSchedule(
                    f"'L' (last day of the month) belongs in the day-of-month field, "
                    f"not the {spec.name} field of {expression!r}"
                )
            if step is not None:
                raise InvalidSchedule(f"'L' takes no step in {expression!r}")
            forms = forms.merged(DayForms(last_offsets=frozenset({0})))
            continue
        else:
            low = _value(match["low"], spec, expression)
            if match["high"]:
                high = _value(match["high"], spec, expression)
                # SUN is 0, but FRI-SUN plainly means Friday to Sunday.
                if index == 4 and high == 0 and low > 0:
                    high = 7
                _check_order(low, high, spec, expression)
            else:
                # "5/15" (Quartz style) runs from 5 to the end of the field.
                high = spec.star_high if step is not None else low
        values.update(range(low, high + 1, step or 1))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values), forms


def _day_form(item: str, index: int, spec: _FieldSpec, expression: str) -> DayForms | None:
    """A Quartz day form (``15W``, ``LW``, ``L-3``, ``MON#3``, ``FRIL``), or None if
    ``item`` is none; a form in the wrong field, or misspelt, is refused here with
    a message that names the right spelling."""
    if index == 2:
        read = parse_dom_form(item)
    elif index == 4:
        read = parse_dow_form(item, spec.names)
    else:
        read = None
    if isinstance(read, str):
        raise InvalidSchedule(f"{read} (in {expression!r})")
    if read is not None:
        return read
    # No month or weekday name holds a '#', and only WED a 'W': after a digit
    # or 'L' it can only be meant as "nearest weekday".
    if "#" in item and index != 4:
        raise InvalidSchedule(
            f"'#' (n-th weekday) belongs in the day-of-week field, not the {spec.name} "
            f"field of {expression!r}: write e.g. '0 9 * * MON#3'"
        )
    if "BD" in item and index != 2:
        raise InvalidSchedule(
            f"'BD' (business day) belongs in the day-of-month field, not the {spec.name} "
            f"field of {expression!r}: write e.g. '0 9 2BD * *' or '0 9 LBD * *'"
        )
    if _NEAREST_MARK.search(item) and index != 2:
        raise InvalidSchedule(
            f"'W' (nearest weekday) belongs in the day-of-month field, not the "
            f"{spec.name} field of {expression!r}: write e.g. '0 9 15W * *'"
        )
    if index == 2 and ("W" in item or "BD" in item or item.startswith("L-")):
        raise InvalidSchedule(
            f"cannot read {item!r} in the day-of-month field of {expression!r}: write 'nW' "
            "(the weekday nearest the n-th, e.g. '15W'), 'LW', 'L-n' (e.g. 'L-3'), 'nBD' "
            "(the n-th business day, e.g. '2BD') or 'LBD', each alone, without ranges or steps"
        )
    if index == 4 and item == "L":
        raise InvalidSchedule(
            f"'L' alone in the day-of-week field of {expression!r} is ambiguous: write SAT, "
            "or e.g. 'FRIL' for the month's last Friday"
        )
    if index == 4 and ("#" in item or (item.endswith("L") and len(item) > 1)):
        raise InvalidSchedule(
            f"cannot read {item!r} in the day-of-week field of {expression!r}: write 'x#n' "
            "(the n-th weekday x of the month, e.g. 'MON#3' or '2#1') or 'xL' (the last "
            "x, e.g. 'FRIL'), each alone, without ranges or steps"
        )
    return None


def _step(text: str | None, spec: _FieldSpec, expression: str) -> int | None:
    if text is None:
        return None
    width = spec.high - spec.low + 1
    if len(text) > 3 or not 1 <= int(text) <= width:
        raise InvalidSchedule(
            f"step /{text} in the {spec.name} field of {expression!r} must be between 1 and {width}"
        )
    return int(text)


def _value(token: str, spec: _FieldSpec, expression: str) -> int:
    if token.isdigit():
        if len(token) <= 3 and spec.low <= int(token) <= spec.high:
            return int(token)
        raise InvalidSchedule(
            f"{token} is out of range for the {spec.name} field of {expression!r} "
            f"({spec.low}-{spec.high})"
        )
    if token in spec.names:
        return spec.names[token]
    if not spec.names:
        raise InvalidSchedule(
            f"cannot read {token!r} in the {spec.name} field of {expression!r}: "
            "names are allowed only for months (JAN-DEC) and weekdays (SUN-SAT)"
        )
    raise InvalidSchedule(
        f"unknown name {token!r} in the {spec.name} field of {expression!r} (use {spec.names_hint})"
    )


def _check_order(low: int, high: int, spec: _FieldSpec, expression: str) -> None:
    if low > high:
        raise InvalidSchedule(
            f"range {low}-{high} in the {spec.name} field of {expression!r} runs "
            f"backwards: write {low}-{spec.high},{spec.low}-{high}"
        )


def _check_fires(fields: CronFields, expression: str) -> None:
    """Refuse an expression whose days never exist (``0 0 30 2 *``, ``0 0 L-29 2 *``)."""
    # When both day fields are restricted either one suffices, and every weekday
    # occurs in every month (a fifth one in some February of a leap year).
    # Otherwise the day of month must exist in some listed month; the weekday
    # then comes round within 28 years (Feb 29 included).
    if not (fields.dom_star or fields.dow_star):
        return
    for month in fields.months:
        length = _MAX_MONTH_DAYS[month]
        if (fields.days and min(fields.days) <= length) or fields.forms.fires_in_month_of(length):
            return
    days = expression.split()[2] if fields.forms.dom else ",".join(map(str, sorted(fields.days)))
    months = [_MONTH_TITLES[m] for m in sorted(fields.months)]
    in_months = months[0] if len(months) == 1 else f"{', '.join(months[:-1])} or {months[-1]}"
    raise InvalidSchedule(
        f"day-of-month {days} never occurs in {in_months}: {expression!r} would never fire"
    )


def _check_frequency(fields: CronFields, expression: str, min_interval: timedelta) -> None:
    """Refuse an expression that may fire more often than ``min_interval``."""
    # Conservative: any two consecutive days are assumed to match, so the gap
    # from the last slot of a day to the first of the next counts as well.
    seconds = slot_seconds(fields)
    gaps: Iterable[int] = (b - a for a, b in itertools.pairwise(seconds))
    shortest = min(itertools.chain(gaps, [86400 - seconds[-1] + seconds[0]]))
    if timedelta(seconds=shortest) < min_interval:
        raise InvalidSchedule(
            f"{expression!r} fires every {_describe(timedelta(seconds=shortest))}; "
            f"the minimum interval is {_describe(min_interval)}"
        )
