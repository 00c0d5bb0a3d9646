"""Date parsing in queries, resolved against an explicit ``now`` (Thursday 15 June 2023, noon UTC)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.retrieval import HybridRanker, parse_time_range
from aether_frame.retrieval.temporal import has_time_expression, is_when_question, temporal_score


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
