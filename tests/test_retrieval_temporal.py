"""Date parsing in queries, resolved against an explicit ``now`` (Thursday 15 June 2023, noon UTC)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.retrieval import HybridRanker, parse_time_range
from aether_frame.retrieval.temporal import _WHEN, has_time_expression, is_when_question, temporal_score
from aether_frame.retrieval.text import PLAIN_WORDS


def ts(y: int, m: int, d: int) -> float:
  return datetime(y, m, d, tzinfo=timezone.utc).timestamp()


NOW = datetime(2023, 6, 15, 12, 0, tzinfo=timezone.utc).timestamp()

CASES = [
    ("what did we discuss last month?", (2023, 5, 1), (2023, 6, 1)),
    ("what happened in May 2023", (2023, 5, 1), (2023, 6, 1)),
    ("the talk on 8 May, 2023", (2023, 5, 8), (2023, 5, 9)),
    ("the talk on May 8th, 2023", (2023, 5, 8), (2023, 5, 9)),
    ("logs from 2023-05-08", (2023, 5, 8), (2023, 5, 9)),
    ("what did I say yesterday", (2023, 6, 14), (2023, 6, 15)),
    ("anything new today?", (2023, 6, 15), (2023, 6, 16)),
    ("the bug from 3 days ago", (2023, 6, 12), (2023, 6, 13)),
    ("the plan from two weeks ago", (2023, 5, 29), (2023, 6, 5)),
    ("what did we decide last week", (2023, 6, 5), (2023, 6, 12)),
    ("what changed this week", (2023, 6, 12), (2023, 6, 19)),
    ("goals we set last year", (2022, 1, 1), (2023, 1, 1)),
    ("what did we ship in 2021", (2021, 1, 1), (2022, 1, 1)),
    ("the offsite in March", (2023, 3, 1), (2023, 4, 1)),
    ("the offsite in September", (2022, 9, 1), (2022, 10, 1)),
    ("the call last Monday", (2023, 6, 12), (2023, 6, 13)),
    ("early May 2023", (2023, 5, 1), (2023, 5, 11)),
    ("late May 2023", (2023, 5, 21), (2023, 6, 1)),
    ("errors in the past 3 days", (2023, 6, 12), (2023, 6, 16)),
    ("what did we do last weekend", (2023, 6, 10), (2023, 6, 12)),
    ("a couple of months ago", (2023, 4, 1), (2023, 5, 1)),
    ("the day before yesterday", (2023, 6, 13), (2023, 6, 14)),
]


@pytest.mark.parametrize("query,start,end", CASES)
def test_parse_time_range(query, start, end):
  span = parse_time_range(query, NOW)
  assert span is not None, query
  assert (span.start, span.end) == (ts(*start), ts(*end)), (query, span)


@pytest.mark.parametrize(
    "query", ["what is the capital of France", "I may go later", "may I ask a question", "how do I deploy"]
)
def test_no_time_no_range(query):
  assert parse_time_range(query, NOW) is None


def test_relative_needs_now_absolute_does_not():
  assert parse_time_range("last month", None) is None
  span = parse_time_range("in May 2023", None)
  assert span is not None and span.start == ts(2023, 5, 1)


def test_earliest_expression_wins():
  span = parse_time_range("in May 2023, or was it last week?", NOW)
  assert span is not None and span.start == ts(2023, 5, 1) and span.end == ts(2023, 6, 1)


def test_when_questions_and_time_expressions():
  assert is_when_question("When did Caroline go to the LGBTQ support group?")
  assert is_when_question("What year did she move?")
  assert not is_when_question("Where does she live?")
  assert has_time_expression("I went to a support group yesterday")
  assert has_time_expression("we met in 2019")
  assert not has_time_expression("I love pottery")


def test_temporal_score_inside_and_margin():
  span = parse_time_range("in May 2023", NOW)
  assert temporal_score(ts(2023, 5, 20), span, 3.0) == 1.0
  assert temporal_score(ts(2023, 6, 1) + 1.5 * 86400, span, 3.0) == pytest.approx(0.5)
  assert temporal_score(ts(2023, 7, 1), span, 3.0) == 0.0
  assert temporal_score(None, span, 3.0) == 0.0
  assert temporal_score(ts(2023, 5, 20), None, 3.0) == 0.0


def test_ranker_favours_items_from_the_named_period():
  def turn(i: str, when: float) -> Item:
    return Item(
        id=i, layer=Layer.MEMORY, kind="memory", text="we reviewed the quarterly budget numbers", tokens=8,
        provenance=Provenance(timestamp=when),
    )

  items = [turn("june", ts(2023, 6, 10)), turn("may", ts(2023, 5, 10)), turn("april", ts(2023, 4, 10))]
  ranked = sorted(HybridRanker().rank("budget review last month", items, layer=Layer.MEMORY, now=NOW), key=lambda it: -it.score)
  assert ranked[0].id == "may"
  assert ranked[0].meta["explain"]["temporal"] == 1.0
  assert {it.id: it.meta["explain"]["temporal"] for it in ranked}["april"] == 0.0


def _span(query: str, now: float | None = NOW) -> tuple[float, float] | None:
  span = parse_time_range(query, now)
  return None if span is None else (span.start, span.end)


def test_feb_29_without_a_year_is_the_latest_leap_day_not_after_now():
  assert _span("Feb 29", datetime(2025, 3, 1, 12, tzinfo=timezone.utc).timestamp()) == (ts(2024, 2, 29), ts(2024, 3, 1))
  assert _span("29th of February", datetime(2025, 3, 1, 12, tzinfo=timezone.utc).timestamp()) == (
      ts(2024, 2, 29), ts(2024, 3, 1)
  )
  # Feb 29 2024 is still ahead on Feb 28 2024: four years back.
  assert _span("on February 29th", datetime(2024, 2, 28, 12, tzinfo=timezone.utc).timestamp()) == (
      ts(2020, 2, 29), ts(2020, 3, 1)
  )
  assert _span("Feb 29", datetime(2024, 3, 1, 12, tzinfo=timezone.utc).timestamp()) == (ts(2024, 2, 29), ts(2024, 3, 1))
  assert _span("Feb 30") is None  # no year has it


MAY_2023 = (ts(2023, 5, 1), ts(2023, 6, 1))


def test_may_the_month_and_may_the_verb():
  months = {
      "what did we do in may": MAY_2023,
      "the offsite in May": MAY_2023,
      "what happened during may?": MAY_2023,
      "the numbers from may": MAY_2023,
      "by the end of may": MAY_2023,
      "what did we ship last may": MAY_2023,
      "what did we decide on May": MAY_2023,
      "this May": MAY_2023,
      "around May": MAY_2023,
      "IN MAY": MAY_2023,
      "in late may": (ts(2023, 5, 21), ts(2023, 6, 1)),
      "in mid-may": (ts(2023, 5, 11), ts(2023, 5, 21)),
      "the call on may 5": (ts(2023, 5, 5), ts(2023, 5, 6)),
      "the 5th of may": (ts(2023, 5, 5), ts(2023, 5, 6)),
      "what we did in may 2022": (ts(2022, 5, 1), ts(2022, 6, 1)),
  }
  verbs = [
      "is there anything in the notes that may explain the outage?",
      "this may be wrong, what did we decide about redis?",
      "what did we decide on may be relevant",
      "whatever we settle by may change",
      "arriving late may cause a timeout",
      "leaving early may help",
      "the last may be the hardest",
      "anyone around may join",
      "THIS MAY BE WRONG",
  ]
  assert {q: _span(q) for q in months} == months
  assert {q: _span(q) for q in verbs} == dict.fromkeys(verbs)
  for q in [*months, *verbs]:  # the word prefilter agrees
    assert parse_time_range(q, NOW, frozenset(PLAIN_WORDS(q.lower()))) == parse_time_range(q, NOW), q


def test_since_runs_from_the_date_to_the_end_of_today():
  end = ts(2023, 6, 16)  # NOW is Thursday 15 June 2023
  assert _span("what changed since March") == (ts(2023, 3, 1), end)
  assert _span("ever since 2021") == (ts(2021, 1, 1), end)
  assert _span("since may") == (ts(2023, 5, 1), end)
  assert _span("since early May 2023") == (ts(2023, 5, 1), end)
  assert _span("errors since last week") == (ts(2023, 6, 5), end)
  assert _span("since yesterday") == (ts(2023, 6, 14), end)
  assert _span("since we met in 2021") == (ts(2021, 1, 1), ts(2022, 1, 1))  # "since" does not govern "in 2021"
  assert _span("since 2021", None) == (ts(2021, 1, 1), ts(2022, 1, 1))  # no now: the named period only


def test_when_as_a_conjunction_is_not_a_when_question():
  asks = [
      "When did we deploy?",
      "When Jon has lost his job as a banker?",  # LoCoMo's verbless form
      "and when exactly was the outage",
      "so when's the release",
      "The build broke. When did it start?",
      "do you remember when we moved the database?",
      "since when is this broken",
  ]
  conjunctions = [
      "What should I do when the build fails?",
      "Who supports Caroline when she has a negative experience?",
      "What does Maria say she feels when doing yoga?",
  ]
  assert {q: is_when_question(q) for q in asks} == dict.fromkeys(asks, True)
  assert {q: is_when_question(q) for q in conjunctions} == dict.fromkeys(conjunctions, False)
  for q in [*asks, *conjunctions, "(when did", "x.when was", "_when did", "x_when", "I know when", "WHEN"]:
    assert is_when_question(q, frozenset(PLAIN_WORDS(q.lower()))) == bool(_WHEN.search(q)), q
