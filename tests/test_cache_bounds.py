"""The process-wide and per-ranker caches are bounded by the text they hold, not only by
their entry count: a long-lived server that sees many large documents must not keep
every one of them (a 100 KB item's analysis alone is ~330 KB)."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from aether_frame.core import compiler, render
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.core.memo import BoundedMemo, text_size
from aether_frame.retrieval import ranker as ranker_mod
from aether_frame.retrieval.features import LRU, DocFeatures

_WORDS = [f"w{i}x" for i in range(20_000)]


def _document(rng: random.Random, chars: int) -> str:
  out, n = [], 0
  while n < chars:
    w = rng.choice(_WORDS)
    out.append(w)
    n += len(w) + 1
  return " ".join(out)


def _evidence(i: int, text: str) -> Item:
  return Item(id=f"evidence:doc{i}", layer=Layer.EVIDENCE, kind="evidence", text=text,
              provenance=Provenance(source=f"artifact://doc{i}.md", timestamp=1_750_000_000.0))


def _held_after(fn):
  """``fn()`` and the traced bytes still allocated once it returns (after a collection)."""
  gc.collect()
  tracemalloc.start()
  try:
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    gc.collect()
    return out, tracemalloc.get_traced_memory()[0] - base
  finally:
    tracemalloc.stop()


def test_bounded_memo_empties_past_its_text_cap():
  memo = BoundedMemo(1_000, max_chars=10_000)
  for i in range(30):
    memo.get(("k", str(i), "x" * 1_000), lambda: "y" * 1_000)
    assert memo.chars <= 10_000
  assert 0 < len(memo) < 30
  # Without a text cap it is the entry cap alone, as before.
  plain = BoundedMemo(1_000)
  for i in range(30):
    plain.get(("k", str(i), "x" * 1_000), lambda: "y" * 1_000)
  assert len(plain) == 30 and plain.chars == 0


def test_text_size_counts_nested_strings():
  assert text_size(("ab", 1, None, ("cde", 2.0, ("f",)))) == 6
  assert text_size("abcd") == 4 and text_size(42) == 0


def test_lru_evicts_oldest_past_its_cost_cap_and_keeps_the_newest():
  lru = LRU(100, max_cost=10, cost=len)
  for k in "abcdef":
    lru.get(k, lambda k=k: k * 3)
  assert lru.total_cost <= 10 and len(lru) == 3
  assert lru.get("f", lambda: pytest.fail("the newest entry was evicted")) == "fff"
  big = lru.get("big", lambda: "z" * 50)  # larger than the cap alone: kept, the rest go
  assert big == "z" * 50 and len(lru) == 1 and lru.total_cost == 50
  lru.get("g", lambda: "ggg")
  assert len(lru) == 1 and lru.total_cost == 3  # and it goes first when the next comes


def test_doc_features_cost_tracks_its_distinct_terms():
  rng = random.Random(1)
  small, big = DocFeatures(_document(rng, 500)), DocFeatures(_document(rng, 100_000))
  assert big.cost > 100 * small.cost // 2
  assert big.cost >= 112 * len(big.tf)


def test_ranker_memory_stays_bounded_with_many_large_documents(monkeypatch):
  """Rank 60 calls of one new 100 KB document each: with small caps the ranker keeps a
  bounded amount, where entry caps alone (100,000 analyses) kept all 60 (~25 MB)."""
  monkeypatch.setattr(ranker_mod, "FEATURE_CACHE_BYTES", 4 * 2**20)
  monkeypatch.setattr(ranker_mod, "KEY_MEMO_BYTES", 2 * 2**20)
  rng = random.Random(7)
  docs = [_document(rng, 100_000) for _ in range(60)]

  def run():
    r = ranker_mod.HybridRanker()
    for i, text in enumerate(docs):
      r.rank("which w10x document mentions w77x", [_evidence(i, text)], layer=Layer.EVIDENCE, now=1_750_000_100.0)
    return r

  r, held = _held_after(run)
  assert r._features.total_cost <= 4 * 2**20
  assert len(r._features) < 60
  assert held < 12 * 2**20, f"the ranker holds {held / 2**20:.1f} MiB after 60 large documents"


def test_child_rankers_account_for_what_they_hold(monkeypatch):
  """Each session ranks with a child ranker, whose memos keep analyses the shared, capped
  cache may let go: all of it must show in ``held_bytes``, which the plugin's session cap
  weighs (8 children x 10 documents of 100 KB)."""
  monkeypatch.setattr(ranker_mod, "FEATURE_CACHE_BYTES", 4 * 2**20)
  rng = random.Random(9)
  docs = [_document(rng, 100_000) for _ in range(80)]

  def run():
    parent = ranker_mod.HybridRanker()
    children = [parent.child() for _ in range(8)]
    for i, text in enumerate(docs):
      children[i % 8].rank("what does w10x say", [_evidence(i, text)], layer=Layer.EVIDENCE, now=1_750_000_100.0)
    docs.clear()  # only the rankers hold the texts now
    return children

  children, held = _held_after(run)
  own = sum(c.held_bytes for c in children)
  memos = sum(c._key_memo_bytes for c in children)
  assert 0 < memos <= own
  # All that stays is what the children account for (toward the plugin's session cap) and
  # the shared cache's cap. The count errs high (a distinct term costs ~110 bytes in the
  # estimate, less once words repeat across documents), but within reason.
  assert held < own + 4 * 2**20 + 2 * 2**20, f"{held / 2**20:.1f} MiB held; the children account for {own / 2**20:.1f} MiB"
  assert own < 2.5 * held, f"the children claim {own / 2**20:.1f} MiB of {held / 2**20:.1f} MiB held"


def test_the_item_memo_counts_a_replaced_text_once():
  r = ranker_mod.HybridRanker()
  for n in range(200):  # one id whose text changes every call
    r.rank("w1x", [_evidence(0, f"version {n} " + "w1x w2x " * 100)], layer=Layer.EVIDENCE, now=1.0)
  assert len(r._key_memo) == 1
  assert r._key_memo_bytes == r._key_memo["evidence:doc0"][5] == len(r._key_memo["evidence:doc0"][0]) + 256 + 112 * len(r._key_memo["evidence:doc0"][4].tf)


def test_an_entry_evicted_before_it_is_charged_is_not_counted():
  """Threads share the analysis cache: another thread's eviction can land between
  a miss's insert and its charge. The late charge must not count what is gone."""
  lru = LRU(100, max_cost=10, cost=len)
  lru.get("a", lambda: "aaa")
  lru._data["b"] = "bbbb"  # inserted by a miss whose charge is still to come...
  del lru._data["b"]  # ...and evicted by another thread meanwhile
  lru._charge("b", "bbbb")
  assert lru.total_cost == 3 and "b" not in lru._costs
  lru._data["c"] = "cc"
  lru._data["c"] = "ccccc"  # replaced by a concurrent miss: only the value kept is charged
  lru._charge("c", "cc")
  lru._charge("c", "ccccc")
  assert lru.total_cost == 8 and lru._costs["c"] == 5


def test_module_memos_are_capped_by_text(monkeypatch):
  """The payload line memo and the item digest memo key on item text."""
  monkeypatch.setattr(render, "_LINE_MEMO", BoundedMemo(8192, max_chars=300_000))
  monkeypatch.setattr(compiler, "_DIGEST_MEMO", BoundedMemo(4096, max_chars=300_000))
  rng = random.Random(5)
  for i in range(40):
    item = _evidence(i, _document(rng, 20_000))
    render.item_line(item)
    compiler._item_digest(item)
    assert render._LINE_MEMO.chars <= 300_000
    assert compiler._DIGEST_MEMO.chars <= 300_000
  assert len(render._LINE_MEMO) < 40 and len(compiler._DIGEST_MEMO) < 40


def test_shipped_memos_have_text_caps():
  from aether_frame.core.memo import MEMO_CHARS

  for memo in (render._LINE_MEMO, compiler._DIGEST_MEMO):
    assert memo._max_chars == MEMO_CHARS
  r = ranker_mod.HybridRanker()
  assert r._features.max_cost == ranker_mod.FEATURE_CACHE_BYTES
  assert r._queries.max_cost == ranker_mod.QUERY_CACHE_CHARS


def test_a_scan_does_not_re_analyse_what_the_shared_cache_let_go(monkeypatch):
  """The per-item memo keeps each analysis: ranking the same 200 items again analyses none."""
  monkeypatch.setattr(ranker_mod, "FEATURE_CACHE_BYTES", 50_000)
  rng = random.Random(4)
  items = [_evidence(i, _document(rng, 600)) for i in range(200)]
  r = ranker_mod.HybridRanker()
  r.rank("w5x", items, layer=Layer.EVIDENCE, now=1.0)
  misses = r._features.misses
  r.rank("w6x", items, layer=Layer.EVIDENCE, now=2.0)
  assert r._features.misses == misses


def test_a_large_layer_index_counts_in_held_bytes():
  rng = random.Random(6)
  r = ranker_mod.HybridRanker()
  r.rank("w5x", [_evidence(i, _document(rng, 600)) for i in range(60)], layer=Layer.EVIDENCE, now=1.0)
  assert r.held_bytes - r._key_memo_bytes - r._small.total_cost > 0
