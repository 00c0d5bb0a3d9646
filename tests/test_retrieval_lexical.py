"""The incremental BM25 index: same numbers as bm25s, no rebuilds, history-independent."""

from __future__ import annotations

import random

import pytest

from aether_frame.retrieval.lexical import IncrementalBM25
from aether_frame.retrieval.text import analyze, content_hash, tokenize

CORPUS = [
    "The deploy failed because the database password expired",
    "We rolled back the migration on Friday",
    "Caroline went to an LGBTQ support group yesterday",
    "Melanie painted a sunrise over the lake last year",
    "The database backups run every night at two",
    "Dancing is my go-to for stress relief; I dance every weekend",
    "She dances contemporary and ballet",
]


def key(i: int) -> tuple[str, str]:
  return (f"d{i}", content_hash(CORPUS[i]))


def test_matches_bm25s_lucene():
  bm25s = pytest.importorskip("bm25s")
  index = IncrementalBM25(k1=1.2, b=0.75)
  for i, text in enumerate(CORPUS):
    index.add(key(i), text)
  ref = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
  ref.index([analyze(t) for t in CORPUS], show_progress=False)
  for query in ("database password", "dance stress", "support group yesterday", "lake sunrise painted"):
    terms = list(dict.fromkeys(analyze(query)))
    ours = index.scores(terms)
    theirs = ref.get_scores(terms)
    for i in range(len(CORPUS)):
      assert ours.get(key(i), 0.0) == pytest.approx(float(theirs[i]), abs=1e-5), (query, i)


def test_analyze_folds_a_final_e_but_tokenize_is_unchanged():
  assert tokenize("dance dances dancing") == ["dance", "danc", "danc"]
  assert analyze("dance dances dancing") == ["danc", "danc", "danc"]


def test_incremental_equals_fresh_and_order_does_not_matter():
  rng = random.Random(5)
  grown = IncrementalBM25()
  order = list(range(len(CORPUS)))
  rng.shuffle(order)
  for i in order:
    grown.add(key(i), CORPUS[i])
  grown.remove(key(order[0]))
  grown.remove(key(order[1]))
  grown.add(key(order[0]), CORPUS[order[0]])  # back from the retired cache
  fresh = IncrementalBM25()
  for i in sorted(set(range(len(CORPUS))) - {order[1]}):
    fresh.add(key(i), CORPUS[i])
  terms = analyze("database migration dance support")
  assert grown.scores(terms) == fresh.scores(terms)  # exactly, not approximately
  assert len(grown) == len(fresh) == len(CORPUS) - 1


def test_sync_only_touches_what_changed():
  index = IncrementalBM25()
  docs = [(key(i), t) for i, t in enumerate(CORPUS)]
  index.sync(docs)
  assert index.adds == len(CORPUS)
  index.sync(docs)
  assert index.adds == len(CORPUS) and index.removes == 0
  index.sync(docs[1:])
  assert index.removes == 1
  # An edited item (same id, new text) is a new document.
  index.sync(docs[1:] + [(("d0", content_hash("new text")), "new text")])
  assert index.adds == len(CORPUS) + 1
  assert index.scores(["new"]) and list(index.scores(["new"])) == [("d0", content_hash("new text"))]


def test_prf_expansion_terms_are_deterministic():
  index = IncrementalBM25()
  for i, t in enumerate(CORPUS):
    index.add(key(i), t)
  hits = index.scores(analyze("database"))
  a = index.expansion_terms(hits, analyze("database"), docs=2, terms=3)
  b = index.expansion_terms(dict(reversed(list(hits.items()))), analyze("database"), docs=2, terms=3)
  assert a == b and a and a[0][1] == 1.0
  assert "databas" not in [t for t, _ in a]


def test_non_latin_scripts_are_terms():
  """Only [a-z0-9] used to count: Cyrillic and CJK text had no terms, "café" became "caf"."""
  assert tokenize("Встреча с поставщиком") == ["встреча", "с", "поставщиком"]
  assert tokenize("café naïve") == ["café", "naïve"]
  assert tokenize("我在北京工作") == ["我在", "在北", "北京", "京工", "工作"]  # CJK as overlapping bigrams
  assert tokenize("東") == ["東"]
  assert tokenize("ＡＢＣ ﬁle") == ["abc", "file"]  # NFKC: full-width and ligature forms are the same word
  # ASCII text is untouched.
  assert tokenize("Don't stop the 90s deploys") == ["don", "stop", "90s", "deploy"]


def test_the_ranker_finds_non_latin_text():
  from aether_frame.core.items import Item, Layer
  from aether_frame.retrieval import default_ranker

  docs = {"ru": "Встреча с поставщиком перенесена на пятницу", "zh": "我们在北京的办公室下个月搬迁",
          "ja": "東京タワーの見学は来週の火曜日です", "en": "Lunch order: two pizzas"}
  items = [Item(id=k, layer=Layer.MEMORY, kind="memory", text=v) for k, v in docs.items()]
  for query, want in (("Когда встреча с поставщиком?", "ru"), ("北京办公室什么时候搬迁", "zh"), ("東京タワー", "ja")):
    ranked = default_ranker().rank(query, items, layer=Layer.MEMORY, now=None)
    best = max(ranked, key=lambda it: it.score)
    assert best.id == want and best.meta["explain"]["bm25"] > 0, query
