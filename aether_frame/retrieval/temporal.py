"""Dates in the query: "last month", "in May 2023", "3 weeks ago" -> a time range.

Relative expressions resolve against an explicit ``now`` (seconds since the
epoch, read in UTC), never the wall clock, so a ranking replays identically.
Ranges are half-open ``[start, end)``. Only past-looking expressions are
understood: memory is about what happened.
"""

from __future__ import annotations

import re
from calendar import isleap, monthrange
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import AbstractSet, Optional

from .text import FOLD, PLAIN_WORDS

DAY = 86400.0

MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
WEEKDAYS = {d: i for i, d in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a few": 3, "few": 3, "several": 4,
}  # fmt: skip

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_NUM = r"(?P<n>\d+|a couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_PART = r"(?:(?P<part>early|mid|middle of|late|end of|beginning of|start of)[\s-]+)?"
_PREP = r"(?:in|during|since|on|by|of|from|around|early|mid|late|last|this|that)"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b")),
    (
        "day_month",
        re.compile(
            r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH + r"(?:,?\s+(?P<year>\d{4}))?\b",
            re.I,
        ),
    ),
    (
        "month_day",
        re.compile(r"\b" + _MONTH + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?\b", re.I),
    ),
    ("month_year", re.compile(r"\b" + _PART + _MONTH + r",?\s+(?P<year>\d{4})\b", re.I)),
    ("ago", re.compile(r"\b" + _NUM + r"\s+" + _UNIT + r"\s+(?:ago|back|earlier)\b", re.I)),
    ("last_n", re.compile(r"\b(?:last|past|previous)\s+" + _NUM + r"\s+" + _UNIT + r"\b", re.I)),
    ("rel_unit", re.compile(r"\b(?P<which>last|this|past|previous)\s+(?P<unit>week|month|year|weekend)\b", re.I)),
    ("weekday", re.compile(r"\blast\s+(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", re.I)),
    ("day_before_yesterday", re.compile(r"\bthe\s+day\s+before\s+yesterday\b", re.I)),
    ("yesterday", re.compile(r"\byesterday\b", re.I)),
    ("today", re.compile(r"\b(?:today|tonight|this\s+morning|this\s+afternoon|this\s+evening)\b", re.I)),
    ("month", re.compile(r"\b" + _PREP + r"\s+" + _PART + _MONTH + r"\b", re.I)),
    ("month_bare", re.compile(r"\b(?P<month>January|February|April|June|July|August|September|October|November|December)\b")),
    ("year", re.compile(r"\b(?:in|during|since|of|from|around|by)\s+(?P<year>(?:19|20)\d{2})\b", re.I)),
]


@dataclass(frozen=True)
class TimeRange:
  """A half-open interval of epoch seconds and the query text it came from."""

  start: float
  end: float
  label: str

  def contains(self, ts: float) -> bool:
    return self.start <= ts < self.end

  def distance_days(self, ts: float) -> float:
    if ts < self.start:
      return (self.start - ts) / DAY
    if ts >= self.end:
      return (ts - self.end) / DAY
    return 0.0


def _ts(dt: datetime | float) -> float:
  """Epoch seconds of a naive UTC datetime; a range end may already be seconds (``_after``)."""
  if isinstance(dt, float):
    return dt
  return dt.replace(tzinfo=timezone.utc).timestamp()


def _after(dt: datetime, days: int) -> float:
  """``_ts(dt + timedelta(days=days))`` in epoch seconds (the same float).

  A range that ends on 9999-12-31 ends at 10000-01-01, which ``datetime``
  cannot hold: "9999-12-31" was ignored, "December 9999" fell back to another
  December, and "since ..." on that day raised OverflowError.
  """
  return _ts(dt) + days * DAY


def _day(y: int, m: int, d: int) -> tuple[datetime, datetime | float]:
  start = datetime(y, m, d)
  return start, _after(start, 1)


def _month(y: int, m: int) -> tuple[datetime, datetime | float]:
  start = datetime(y, m, 1)
  return start, _after(start, monthrange(y, m)[1])


def _year(y: int) -> tuple[datetime, datetime | float]:
  start = datetime(y, 1, 1)
  return start, _after(start, 366 if isleap(y) else 365)


def _part_of_month(part: Optional[str], y: int, m: int) -> tuple[datetime, datetime | float]:
  start, end = _month(y, m)
  if not part:
    return start, end
  part = part.lower()
  if part in ("early", "beginning of", "start of"):
    return start, start + timedelta(days=10)
  if part in ("mid", "middle of"):
    return start + timedelta(days=10), start + timedelta(days=20)
  return start + timedelta(days=20), end  # late, end of


def _number(text: str) -> int:
  text = text.lower()
  return int(text) if text.isdigit() else NUMBERS[text]


def _shift_months(y: int, m: int, delta: int) -> tuple[int, int]:
  index = y * 12 + (m - 1) + delta
  return index // 12, index % 12 + 1


def _latest_year_for(month: int, day: int, now: datetime) -> int:
  """The most recent year in which (month, day) exists and is not after ``now``.

  Year by year, not by comparing (month, day): Feb 29 must land on a leap year.
  """
  for year in range(now.year, now.year - 9, -1):  # leap days are at most 8 years apart
    try:
      if datetime(year, month, day) <= now:
        return year
    except ValueError:  # Feb 29 of a common year, April 31, year 0
      continue
  raise ValueError(f"no year has month {month} day {day}")


_MAY_PREPS = frozenset({"in", "during", "since", "from", "of", "last", "mid"})
"""Words that put a following lower-case "may" in the calendar: none can precede the verb."""
_THE_BEFORE = re.compile(r"\bthe\s+$", re.I)


def _names_month(kind: str, m: re.Match[str]) -> bool:
  """False when the "month" is lower-case "may" that reads as the verb.

  "this may be wrong", "decide on may be", "step 5 may fail": lower-case (or
  shouted) "may" counts as the month only with a year, a day after it ("may 5"),
  "of" between a day and it ("5th of may"), or after a word in ``_MAY_PREPS``
  ("in may", "last may", but not "the last may be"). Title-case "May" is the month.
  """
  month = m.group("month")
  if month == "May" or month.lower() != "may" or m.groupdict().get("year") or kind == "month_day":
    return True
  if kind == "day_month":
    return "of" in m.string[m.end("day") : m.start("month")].lower().split()
  if kind == "month":
    prep = m.group(0).split(None, 1)[0].lower()
    return prep in _MAY_PREPS and not (prep == "last" and _after_the(m.string, m.start()))
  return False


def _after_the(text: str, at: int) -> bool:
  """``_THE_BEFORE.search(text, 0, at)``, reading only the whitespace and word just before ``at``.

  A search from 0 reads the whole prefix for every "last may" that is not a date,
  so a text of many "the last may" took quadratic time (24 s for 100 KB).
  ``\\s`` is ``str.isspace`` and "the" is three characters even under ``re.I``.
  """
  i = at
  while i > 0 and text[i - 1].isspace():
    i -= 1
  return 3 <= i < at and _THE_BEFORE.match(text, i - 3, at) is not None


def _resolve(kind: str, m: re.Match[str], now: datetime) -> Optional[tuple[datetime, datetime | float]]:
  g = m.groupdict()
  if g.get("month") and not _names_month(kind, m):
    return None
  today = datetime(now.year, now.month, now.day)
  if kind == "iso":
    return _day(int(g["y"]), int(g["m"]), int(g["d"]))
  if kind in ("day_month", "month_day"):
    month, day = MONTHS[g["month"].lower()], int(g["day"])
    year = int(g["year"]) if g.get("year") else _latest_year_for(month, day, now)
    return _day(year, month, day)
  if kind == "month_year":
    return _part_of_month(g.get("part"), int(g["year"]), MONTHS[g["month"].lower()])
  if kind in ("month", "month_bare"):
    month = MONTHS[g["month"].lower()]
    year = _latest_year_for(month, 1, now)
    return _part_of_month(g.get("part"), year, month)
  if kind == "year":
    return _year(int(g["year"]))
  if kind == "ago":
    n, unit = _number(g["n"]), g["unit"].lower()
    if unit == "day":
      return _day(*(today - timedelta(days=n)).timetuple()[:3])
    if unit == "week":
      centre = today - timedelta(weeks=n)
      return centre - timedelta(days=3), _after(centre, 4)
    if unit == "month":
      return _month(*_shift_months(now.year, now.month, -n))
    return _year(now.year - n)
  if kind == "last_n":
    n, unit = _number(g["n"]), g["unit"].lower()
    days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
    return today - timedelta(days=days), _after(today, 1)
  if kind == "rel_unit":
    which, unit = g["which"].lower(), g["unit"].lower()
    back = 0 if which == "this" else 1
    if unit == "week":
      monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
      return monday, _after(monday, 7)
    if unit == "weekend":
      saturday = today - timedelta(days=(today.weekday() - 5) % 7)
      if which != "this" and saturday + timedelta(days=2) > today:
        saturday -= timedelta(weeks=1)
      return saturday, _after(saturday, 2)
    if unit == "month":
      return _month(*_shift_months(now.year, now.month, -back))
    return _year(now.year - back)
  if kind == "weekday":
    wd = WEEKDAYS[g["wd"].lower()]
    back = (today.weekday() - wd) % 7 or 7
    return _day(*(today - timedelta(days=back)).timetuple()[:3])
  if kind == "day_before_yesterday":
    return _day(*(today - timedelta(days=2)).timetuple()[:3])
  if kind == "yesterday":
    return _day(*(today - timedelta(days=1)).timetuple()[:3])
  if kind == "today":
    return today, _after(today, 1)
  return None


def _position(m: re.Match[str]) -> int:
  """Where the date itself starts: "in May 2023" and "May 2023" compete at "May"."""
  starts = [m.start(g) for g, v in m.groupdict().items() if v is not None]
  return min(starts) if starts else m.start()


_MONTH_WORDS = frozenset(MONTHS)
_NEEDS: dict[str, frozenset] = {
    "ago": frozenset({"ago", "back", "earlier"}),
    "last_n": frozenset({"last", "past", "previous"}),
    "rel_unit": frozenset({"last", "this", "past", "previous"}),
    "weekday": frozenset({"last"}),
    "day_before_yesterday": frozenset({"yesterday"}),
    "yesterday": frozenset({"yesterday"}),
    "today": frozenset({"today", "tonight", "this"}),
}
"""Words a pattern cannot match without (month patterns need a month, ``iso`` and ``year``
a four-digit number)."""


def _possible(query: str, words: Optional[AbstractSet[str]] = None) -> Optional[set[str]]:
  """Pattern kinds that may match an ASCII ``query``, from its words (None: try all).

  Every pattern starts its key words at a word boundary and ends them at one,
  so in ASCII text each key word is a whole ``[a-z0-9]+`` word of the lower-cased
  query; a pattern whose key words are all absent cannot match. ``words``:
  those words, when the caller has them already.
  """
  if not query.isascii():
    return None
  if words is None:
    words = set(PLAIN_WORDS(query.lower()))
  out = {kind for kind, need in _NEEDS.items() if not need.isdisjoint(words)}
  if not _MONTH_WORDS.isdisjoint(words):
    out.update(("day_month", "month_day", "month_year", "month", "month_bare"))
  years = [w for w in words if len(w) == 4 and w.isdigit()]
  if years:
    if "-" in query:
      out.add("iso")
    if any(w[:2] in ("19", "20") for w in years):
      out.add("year")
  return out


def _reference(now: Optional[float]) -> Optional[datetime]:
  """``now`` as a naive UTC datetime; None when it is None or no date (NaN, or a
  millisecond timestamp passed as seconds): relative expressions are then ignored
  instead of raising out of the ranker."""
  if now is None:
    return None
  try:
    return datetime.fromtimestamp(now, tz=timezone.utc).replace(tzinfo=None)
  except (OverflowError, ValueError, OSError):
    return None


def parse_time_range(query: str, now: Optional[float], words: Optional[AbstractSet[str]] = None) -> Optional[TimeRange]:
  """The period the query refers to, or None.

  The earliest expression in the query wins (by where its date words start,
  ignoring a leading "in"/"on"); at the same position, the most specific
  pattern (the order of ``_PATTERNS``). Absolute dates parse without
  ``now``; relative ones need it and are ignored when it is None. "since X"
  runs from the start of X to the end of ``now``'s day (the user means "from
  X until now"); without ``now`` it is X alone.
  ``words``: the ``[a-z0-9]+`` words of ``query.lower()``, when the caller has them.
  """
  possible = _possible(query) if words is None else _possible(query, words)
  if possible is not None and not possible:
    return None
  ref = _reference(now)
  best: Optional[tuple[int, int, TimeRange]] = None
  for order, (kind, pattern) in enumerate(_PATTERNS):
    if possible is not None and kind not in possible:
      continue
    for m in pattern.finditer(query):
      pos = _position(m)
      if best is not None and (pos, order) >= best[:2]:
        break
      needs_now = kind not in ("iso", "month_year", "year") and not (
          kind in ("day_month", "month_day") and m.groupdict().get("year")
      )
      if needs_now and ref is None:
        continue
      try:
        span = _resolve(kind, m, ref or datetime(1970, 1, 1))
      except (ValueError, KeyError, OverflowError):
        continue
      if span is not None:
        best = (pos, order, TimeRange(_ts(span[0]), _ts(span[1]), m.group(0)))
        break
  if best is None:
    return None
  pos, _, out = best
  if ref is not None and _SINCE_BEFORE.search(query, 0, pos):
    until = _after(datetime(ref.year, ref.month, ref.day), 1)
    if out.start < until:
      return TimeRange(out.start, until, out.label)
  return out


_SINCE_BEFORE = re.compile(r"\bsince\s+$", re.I)
"""Ends just before a date that "since" governs ("since March", "since last week")."""


_AUX = r"(?:did|do|does|was|were|is|are|am|will|would|has|have|had|can|could|should|shall|might|must)"
_WHEN = re.compile(
    # "when" asks only where a question starts, before an auxiliary, or after a verb
    # of knowing; elsewhere it is the conjunction ("what do I do when the build fails").
    r"(?:^\W*|(?<=[.?!:;])\s*)when\b|\bwhen(?:'s\b|\s+(?:exactly\s+)?" + _AUX + r"\b)"
    r"|\b(?:remember|recall|remind\s+me|tell\s+(?:me|us)|know|ask(?:ed)?|wonder(?:ing)?|forg[eo]t|find\s+out|check)\s+when\b"
    r"|\b(?:what\s+(?:date|day|time|year|month|week)|which\s+(?:date|day|year|month|week)|how\s+long\s+ago|how\s+long\s+has|since\s+when)\b",
    re.I,
)

_TIME_EXPR = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last\s+(?:night|week|weekend|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|summer|winter|spring|fall)|"
    r"this\s+(?:morning|week|weekend|month|year|summer)|next\s+(?:week|month|year)|"
    r"(?:19|20)\d{2}|" + "|".join(m for m in MONTHS if len(m) > 3) + r"|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|recently|"
    r"the\s+other\s+day|a\s+(?:few|couple\s+of)\s+(?:days|weeks|months)|since)\b",
    re.I,
)


_WHEN_STARTS = frozenset({"when", "what", "which", "how", "since"})
"""Every ``_WHEN`` match has one of these as a whole word."""


def is_when_question(query: str, words: Optional[AbstractSet[str]] = None) -> bool:
  """Asks for a time ("when did...", "what year..."), with or without a range.

  ``words``: the ``[a-z0-9]+`` words of ``query.lower()``; in ASCII text a
  match contains one of ``_WHEN_STARTS`` whole, so without one the regex need not run.
  """
  if words is not None and _WHEN_STARTS.isdisjoint(words) and query.isascii():
    return False
  return bool(_WHEN.search(query))


_TIME_PAIRS = re.compile(
    r"\b(?:last\s+(?:night|week|weekend|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|summer|winter|spring|fall)|"
    r"this\s+(?:morning|week|weekend|month|year|summer)|next\s+(?:week|month|year)|"
    r"the\s+other\s+day|a\s+(?:few|couple\s+of)\s+(?:days|weeks|months))\b",
    re.I,
)
"""The multi-word alternatives of ``_TIME_EXPR`` alone."""
_DAYS = frozenset(WEEKDAYS)
_TIME_WORDS = frozenset({"yesterday", "today", "tonight", "tomorrow", "ago", "weekend", "recently", "since"}) | _DAYS | frozenset(
    m for m in MONTHS if len(m) > 3
)
_AFTER = {
    "last": frozenset({"night", "week", "weekend", "month", "year", "summer", "winter", "spring", "fall"}) | _DAYS,
    "this": frozenset({"morning", "week", "weekend", "month", "year", "summer"}),
    "next": frozenset({"week", "month", "year"}),
}


def _names_year(words: set[str]) -> bool:
  """A word is a 19xx or 20xx year."""
  return any(len(w) == 4 and w[:2] in ("19", "20") and w.isdigit() for w in words)


def _may_state_time(words: set[str], year: bool) -> bool:
  """False only if ``_TIME_EXPR`` cannot match: none of its words (or word pairs) occur."""
  if not _TIME_WORDS.isdisjoint(words):
    return True
  for first, seconds in _AFTER.items():
    if first in words and not seconds.isdisjoint(words):
      return True
  if "other" in words and "day" in words:
    return True
  if ("few" in words or "couple" in words) and not words.isdisjoint(("days", "weeks", "months")):
    return True
  return year


_YEAR_RUN = re.compile(r"\b(?:19|20)\d\d\b")


def has_time_expression(text: str) -> bool:
  """States a time ("yesterday", "last week", "in 2022"): what answers a "when" question."""
  if text.isascii() and "_" not in text:
    # The RUN words are then the [a-z0-9] runs: fold the rest to spaces (in C) and split.
    folded = text.encode().translate(FOLD).decode()
    return time_expression_from_words(text, set(folded.split()), _YEAR_RUN.search(folded) is not None)
  out = time_expression_from_words(text, set(RUN.findall(text.lower())) if text.isascii() else None)
  return bool(_TIME_EXPR.search(text)) if out is None else out


RUN = re.compile(r"[a-z0-9_]+")
"""Word runs (``\\w+`` of lower-cased ASCII text): what ``\\b...\\b`` alternatives match whole."""


def time_expression_from_words(text: str, runs: Optional[set[str]], year: Optional[bool] = None) -> Optional[bool]:
  """``has_time_expression`` decided from the ``RUN`` words of ASCII ``text`` (None: not ASCII).

  Every alternative of the pattern is whole words between word boundaries:
  without any of its words it cannot match; a single-word alternative (a
  month, "yesterday", a year) present as a whole run matches; otherwise only
  the word pairs ("last week") can, and a much smaller regex decides.
  ``year``: whether a run is a year (``_names_year``), when the caller knows.
  """
  if runs is None:
    return None
  if year is None:
    year = _names_year(runs)
  if not _may_state_time(runs, year):
    return False
  if not _TIME_WORDS.isdisjoint(runs) or year:
    return True
  return bool(_TIME_PAIRS.search(text))


def temporal_score(ts: Optional[float], span: Optional[TimeRange], margin_days: float) -> float:
  """1 inside the range, falling linearly to 0 at ``margin_days`` outside it."""
  if span is None or ts is None:
    return 0.0
  dist = span.distance_days(ts)
  if dist == 0.0:
    return 1.0
  if margin_days <= 0.0:
    return 0.0
  return max(0.0, 1.0 - dist / margin_days)
