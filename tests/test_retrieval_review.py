"""Defects found reviewing the retrieval package, one test each (each failed before its fix).

- a NaN or infinite embedding made every score NaN: ``rank`` raised on the
  item's score, or MMR re-pushed the NaN forever;
- a ragged or empty embedding crashed ``rank`` outside its lexical fallback;
- a range ending on 9999-12-31 could not be represented: the date was
  ignored or replaced by another one, and "since ..." on that day raised;
- a ``now`` that is no date (milliseconds passed as seconds, NaN) raised
  out of the ranker for any relative date in the query.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from aether_frame.core.items import MAX_TIMESTAMP, Item, Layer, Provenance
from aether_frame.retrieval import HybridRanker, VectorCache, parse_time_range
from aether_frame.retrieval.embed import normalise
from aether_frame.retrieval.mmr import mmr, mmr_lazy


def ts(y: int, m: int, d: int) -> float:
  return datetime(y, m, d, tzinfo=timezone.utc).timestamp()


class BadEmbedder:
  """Plausible vectors, except for texts containing "bad": ``bad`` is returned for those."""

  name = "test:bad"

  def __init__(self, bad: list[float]) -> None:
    self.bad = bad

  def embed(self, texts, *, purpose="document"):
    out = []
    for t in texts:
      h = sum(map(ord, t))
      out.append(list(self.bad) if "bad" in t else [1.0, (h % 7) / 7, (h % 3) / 3])
    return out


def memory(*texts: str) -> list[Item]:
  return [Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=t) for i, t in enumerate(texts)]


# -- embed.py -----------------------------------------------------------------


def test_normalise_turns_a_non_finite_vector_into_zeros():
  assert normalise([float("nan"), 1.0, 0.0]) == [0.0, 0.0, 0.0]
  assert normalise([float("inf"), 1.0]) == [0.0, 0.0]
  assert normalise([3.0, 4.0]) == [0.6, 0.8]


@pytest.mark.parametrize("bad", [[float("nan"), 1.0, 0.0], [float("inf"), 0.0, 0.0]], ids=["nan", "inf"])
def test_rank_survives_a_non_finite_embedding(bad):
  items = memory("lentil soup recipe", "bad lentil soup", "football at the riverside")
  ranked = HybridRanker(embedder=BadEmbedder(bad)).rank("lentil soup", items, layer=Layer.MEMORY, now=None)
  assert all(math.isfinite(it.score) for it in ranked)
  assert ranked[1].meta["explain"]["similarity"] == 0.0  # no direction: the least similar
  assert max(ranked, key=lambda it: it.score).id == "m0"


def test_a_ragged_embedding_ranks_lexically_instead_of_raising():
  items = memory("lentil soup recipe", "bad lentil soup", "football at the riverside")
  for bad in ([], [1.0, 0.0]):  # no values (as a Gemini embedding may come back), wrong length
    ranker = HybridRanker(embedder=BadEmbedder(bad))
    got = ranker.rank("lentil soup", items, layer=Layer.MEMORY, now=None)
    assert ranker.embedder_error is not None
    lexical = HybridRanker().rank("lentil soup", items, layer=Layer.MEMORY, now=None)
    assert [(it.id, it.score) for it in got] == [(it.id, it.score) for it in lexical]


def test_vector_cache_rejects_a_vector_of_another_dimension():
  cache = VectorCache(BadEmbedder([1.0, 0.0]))
  cache.get_many(["good one"])
  with pytest.raises(RuntimeError, match="2-d vector, expected 3-d"):
    cache.get_many(["a bad one"])
  assert cache.get_many(["good two"])[0]  # the cache still serves the right dimension


# -- mmr.py -------------------------------------------------------------------


class Counted(list):
  """A relevance list that counts reads, so a loop that never ends fails instead of hanging."""

  reads = 0

  def __getitem__(self, i):
    self.reads += 1
    if self.reads > 10_000:
      raise RuntimeError("MMR did not settle")
    return super().__getitem__(i)


@pytest.mark.parametrize("lazy", [False, True], ids=["mmr", "mmr_lazy"])
def test_mmr_settles_with_a_nan_relevance(lazy):
  relevance = Counted([0.9, float("nan"), 0.5])
  if lazy:
    picks = mmr_lazy(relevance, lambda a, b: 0.0, lam=0.5, threshold=0.6)
  else:
    picks = mmr(relevance, lambda i: [], lam=0.5, threshold=0.6)
  assert sorted(p.index for p in picks) == [0, 1, 2]


# -- temporal.py --------------------------------------------------------------


def test_ranges_ending_on_the_last_representable_day():
  last = ts(9999, 12, 31)
  end = last + 86400.0  # 10000-01-01: past ``datetime``, still a float
  got = parse_time_range("the entry dated 9999-12-31", None)
  assert got is not None and (got.start, got.end) == (last, end)
  got = parse_time_range("what happened in early December 9999", None)
  assert got is not None and (got.start, got.end) == (ts(9999, 12, 1), ts(9999, 12, 11))
  got = parse_time_range("late December 9999", None)
  assert got is not None and (got.start, got.end) == (ts(9999, 12, 21), end)
  now = last + 3600.0
  for query in ("what changed today", "anything in the past 3 days", "this week", "this month"):
    got = parse_time_range(query, now)
    assert got is not None and got.end > now, query


def test_since_on_the_last_day_of_9999_runs_to_the_end_of_that_day():
  now = ts(9999, 12, 31) + 3600.0
  got = parse_time_range("what did we decide since last week", now)
  assert got is not None and (got.start, got.end) == (ts(9999, 12, 20), ts(9999, 12, 31) + 86400.0)
  items = [
      Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=f"decision {i}",
           provenance=Provenance(timestamp=MAX_TIMESTAMP - i * 86400.0))
      for i in range(3)
  ]
  ranked = HybridRanker().rank("what did we decide since last week", items, layer=Layer.MEMORY, now=None)
  assert all(it.meta["explain"]["temporal"] == 1.0 for it in ranked)


@pytest.mark.parametrize("now", [1.7e12, float("nan"), float("inf")], ids=["ms", "nan", "inf"])
def test_a_now_that_is_no_date_ignores_relative_dates(now):
  assert parse_time_range("what did we do last week", now) is None
  got = parse_time_range("since May 2023", now)  # absolute dates do not need it
  assert got is not None and (got.start, got.end) == (ts(2023, 5, 1), ts(2023, 6, 1))
  items = memory("we went to Lisbon last week", "the tax forms")
  ranked = HybridRanker().rank("what did we do last week", items, layer=Layer.MEMORY, now=now)
  assert [it.meta["explain"]["temporal"] for it in ranked] == [0.0, 0.0]
  index = HybridRanker().new_history_index()
  index.add([it.model_copy(update={"layer": Layer.CONVERSATION, "kind": "turn"}) for it in items])
  hits = index.search("what did we do in Lisbon last week", k=2, now=now)
  assert hits[0][0] == 0 and hits[0][2]["temporal"] == 0.0
