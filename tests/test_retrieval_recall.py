"""The recall index and the ranker's shortcuts: same answers as the slow paths, bounded work.

``RecallIndex.search`` scores a candidate set instead of the whole history;
when it can prove that nothing outside could reach the hits (``last_exact``)
they must equal ``explain`` over every turn (``scan``). Whatever the proof
says, a search depends only on the indexed items, never on the order of the
add/truncate calls that built the index. The shortcuts under it (cached
analysis, query prefilters, direct BM25 for small layers, lazy MMR with
signature filters) must reproduce the slow computations exactly.
"""

from __future__ import annotations

import random
import statistics

import pytest

from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.retrieval import HybridRanker, RetrievalWeights, default_ranker, modes, temporal
from aether_frame.retrieval.dedup import jaccard, near_duplicate_features, pair_candidates
from aether_frame.retrieval.features import DocFeatures, QueryInfo, analyze_fast
from aether_frame.retrieval.lexical import IncrementalBM25, SmallBM25
from aether_frame.retrieval.mmr import dense_neighbours, mmr, mmr_lazy
from aether_frame.retrieval.text import analyze

DAY = 86400.0
T0 = 1_690_000_000.0
NAMES = ["Ann", "Bob", "Carol Smith", "user", "assistant"]
WORDS = (
    "deploy database password expired replica disk vacation lisbon tram movie comedy weekend yesterday "
    "garden recipe lentil soup football storage unit code riverside depot ukulele whales niece birthday "
    "decided rule lesson project sprint friend team earlier continue"
).split()
QUERIES = [
    "why did the database deploy fail", "what did Ann say about Lisbon?", "when did Bob go on vacation",
    "What happened in May 2023?", "go on", "the storage unit code at the riverside depot", "comedy movie",
    "who is Carol's friend", "what was decided last week", "tram", "", "the and of", "yesterday's recipe",
    "How do I set up the project sprint?", "what about the whales earlier",
]


def _text(rng: random.Random) -> str:
  words = [rng.choice(WORDS) for _ in range(rng.randint(0, 14))]
  if rng.random() < 0.1:
    words.append("last week")
  return " ".join(words)


def history(rng: random.Random, n: int, *, ordered: bool = True) -> list[Item]:
  """Conversation groups: sessions with gaps, some without timestamps, a few other kinds and meta."""
  items, ts = [], T0
  for i in range(n):
    ts += rng.choice([30.0, 60.0, 600.0, 3 * DAY]) if ordered else rng.uniform(-DAY, DAY)
    author = rng.choice(NAMES)
    meta = {"span": [i, i + 1]}
    if rng.random() < 0.1:
      meta["access_count"] = rng.randint(0, 5)
    if rng.random() < 0.1:
      meta["salience"] = rng.random()
    items.append(Item(
        id=f"t{i}-x", layer=Layer.CONVERSATION, kind=rng.choice(["turn"] * 8 + ["pending", "working", "note"]),
        text=f"[2023-05-0{1 + i % 9}] {author}: {_text(rng)}",
        provenance=Provenance(timestamp=None if rng.random() < 0.05 else ts, author=author), meta=meta,
    ))
  return items


def _index(ranker: HybridRanker, items: list[Item], **params):
  index = ranker.new_history_index()
  for name, value in params.items():
    setattr(index, name, value)
  index.add(items)
  return index


@pytest.mark.parametrize("seed", range(6))
def test_search_equals_scan_whenever_it_says_so(seed):
  rng = random.Random(seed)
  items = history(rng, rng.randint(5, 120))
  index = _index(default_ranker(), items)
  exact = 0
  for query in QUERIES:
    for now in (None, T0 + 400 * DAY):
      for k in (1, 8):
        hits = index.search(query, k=k, now=now)
        assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))
        assert all(score > 0.0 and ex["score"] == score for _, score, ex in hits)
        if index.last_exact:
          exact += 1
          assert hits == index.scan(query, k=k, now=now), (seed, query, now, k)
  assert exact >= len(QUERIES)  # the proof usually holds on small histories


@pytest.mark.parametrize("params", [{}, {"exhaustive": 0, "budget": 16}], ids=["exhaustive", "budgeted"])
def test_search_depends_on_the_items_not_on_how_the_index_got_them(params):
  rng = random.Random(7)
  items = history(rng, 150)
  fresh = _index(default_ranker(), items, **params)
  warm = _index(default_ranker(), [], **params)
  warm.add(items[:40])
  warm.truncate(10)
  warm.add(items[10:120])
  warm.add([it.model_copy(update={"id": "gone"}) for it in items[:3]])
  warm.truncate(120)
  warm.add(items[120:])
  for query in QUERIES:
    now = T0 + 30 * DAY
    assert warm.search(query, k=8, now=now) == fresh.search(query, k=8, now=now), query


def test_out_of_order_timestamps_rebuild_the_timeline():
  rng = random.Random(3)
  items = history(rng, 60, ordered=False)
  index = _index(default_ranker(), items[:30])
  index.add(items[30:])
  index.truncate(45)
  fresh = _index(default_ranker(), items[:45])
  for query in QUERIES:
    hits = index.search(query, k=5, now=None)
    assert hits == fresh.search(query, k=5, now=None)
    if index.last_exact:
      assert hits == index.scan(query, k=5, now=None)


def test_duplicates_and_rrf_rank_the_whole_history():
  items = history(random.Random(1), 30)
  index = _index(default_ranker(), items + [items[4]])  # the same (id, text) twice
  assert index.search("vacation", k=3, now=None) == index.scan("vacation", k=3, now=None)
  assert index.last_exact is None
  rrf = _index(HybridRanker(RetrievalWeights(fusion="rrf")), items)
  assert rrf.search("vacation", k=3, now=None) == rrf.scan("vacation", k=3, now=None)
  assert rrf.last_exact is None


def test_search_work_does_not_grow_with_history():
  rng = random.Random(9)
  vocab = [f"w{i}" for i in range(400)]

  def session(n: int) -> list[Item]:
    rng2 = random.Random(4)
    return [
        Item(id=f"g{i}", layer=Layer.CONVERSATION, kind="turn",
             text=" ".join(rng2.choice(vocab[: 20 + rng2.randint(0, 380)]) for _ in range(rng2.randint(5, 30))),
             provenance=Provenance(timestamp=T0 + 60.0 * i, author="user" if i % 2 else "assistant"))
        for i in range(n)
    ]

  queries = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 25))) for _ in range(30)]
  work = {}
  for n in (1500, 15000):
    index = _index(default_ranker(), session(n))
    work[n] = []
    for q in queries:
      index.search(q, k=8, now=None)
      work[n].append(index.last_work)
  # Ten times the history, about the same work: the postings budget, not the history, bounds it.
  assert statistics.median(work[15000]) <= 1.3 * statistics.median(work[1500])
  assert max(work[15000]) < 3000


def test_recall_copies_reuse_the_history_analysis():
  ranker = default_ranker()
  items = history(random.Random(2), 40)
  index = ranker.new_history_index()
  index.add(items)
  index.search("vacation", k=8, now=None)  # the recall search analyses the queued history
  misses = ranker._features.misses
  copies = [
      Item(id=f"recall:{it.id}", layer=Layer.MEMORY, kind="recall", text=it.text, provenance=it.provenance)
      for it in items[:8]
  ]
  ranker.rank("vacation", copies, layer=Layer.MEMORY, now=None)
  assert ranker._features.misses == misses  # same content: no new analysis


def test_layers_keep_their_own_index_and_scores_do_not_change():
  rng = random.Random(5)
  big_e = [it.model_copy(update={"layer": Layer.EVIDENCE, "kind": "evidence", "id": f"e{i}"}) for i, it in enumerate(history(rng, 80))]
  big_m = [it.model_copy(update={"layer": Layer.MEMORY, "kind": "memory", "id": f"m{i}"}) for i, it in enumerate(history(rng, 70))]
  ranker = HybridRanker()
  for _ in range(2):
    for query in ("vacation", "database deploy"):
      e = ranker.rank(query, big_e, layer=Layer.EVIDENCE, now=None)
      m = ranker.rank(query, big_m, layer=Layer.MEMORY, now=None)
      assert e == HybridRanker().rank(query, big_e, layer=Layer.EVIDENCE, now=None)
      assert m == HybridRanker().rank(query, big_m, layer=Layer.MEMORY, now=None)
  adds = ranker._layers[Layer.EVIDENCE].adds
  ranker.rank("tram", big_m, layer=Layer.MEMORY, now=None)
  ranker.rank("tram", big_e, layer=Layer.EVIDENCE, now=None)
  assert ranker._layers[Layer.EVIDENCE].adds == adds  # no churn between the layers


# -- the shortcuts ------------------------------------------------------------


def _texts() -> list[str]:
  rng = random.Random(11)
  pieces = WORDS + [
      "don't", "it's", "dances", "dancing", "stores", "hiking", "studies", "Ünïcödé", "naïve", "x_y", "ſince",
      "2023-05-01", "8th of May", "early May 2023", "3 days ago", "last Monday", "the day before yesterday",
      "a couple of weeks ago", "this weekend", "past 3 days", "around 2021", "Jan.", "mid-may", "in charge",
      "you just said", "as I said", "go on.", "continue!", "trade-off", "set up", "setup", "PR", "issue #12",
      "the usual way", "why did we", "should we", "what about", "and then", "K", "İstanbul",
      "last_week", "x_yesterday", "yesterday_x", "2023_1", "last  week", "this\tmonth", "next year", "the other day",
      "a few days", "a couple of months", "since", "recently", "Sept", "sept.", "20231", "1999x", "o'clock",
      "x'yesterday2", "today's",
  ]
  return [" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(2000)]


def test_analysis_shortcuts_are_exact():
  for text in _texts() + QUERIES:
    assert analyze_fast(text) == analyze(text)
    f = DocFeatures(text)
    slow = bool(temporal._TIME_EXPR.search(text))
    assert f.time_expr == temporal.has_time_expression(text) == slow, text


def test_query_prefilters_are_exact(monkeypatch):
  texts = _texts() + QUERIES
  infos = [QueryInfo(t, RetrievalWeights()) for t in texts]  # the words the ranker passes along
  fast_modes = [modes.mode_scores(t) for t in texts]
  assert fast_modes == [modes.mode_scores(t, q.words) for t, q in zip(texts, infos)]
  assert [q.when for q in infos] == [bool(temporal._WHEN.search(t)) for t in texts]
  fast_spans = [temporal.parse_time_range(t, T0) for t in texts]
  assert fast_spans == [temporal.parse_time_range(t, T0, q.words) for t, q in zip(texts, infos)]
  monkeypatch.setattr(temporal, "_possible", lambda query, words=None: None)
  assert fast_spans == [temporal.parse_time_range(t, T0) for t in texts]
  slow = [{m: len(modes._COMPILED[m].findall(t)) for m in modes.PRECEDENCE if m in modes._COMPILED} for t in texts]
  assert fast_modes == slow


def test_small_bm25_equals_the_index():
  rng = random.Random(4)
  texts = [_text(rng) for _ in range(30)]
  docs = {(f"d{i}", t): DocFeatures(t) for i, t in enumerate(texts)}
  index = IncrementalBM25()
  for key, f in docs.items():
    index.add(key, key[1])
  small = SmallBM25(docs)
  for query in QUERIES:
    terms = list(dict.fromkeys(analyze(query)))
    assert small.scores(terms) == index.scores(terms)
    weights = [1.0 + i / 7 for i in range(len(terms))]
    assert small.scores(terms, weights) == index.scores(terms, weights)
    hits = index.scores(terms)
    assert small.expansion_terms(hits, terms, docs=3, terms=5) == index.expansion_terms(hits, terms, docs=3, terms=5)


def test_near_duplicate_filters_are_exact():
  rng = random.Random(8)
  vocab = [f"w{i}" for i in range(40)]
  sets = [frozenset(rng.sample(vocab, rng.randint(0, 12))) for _ in range(70)]
  sets += [frozenset(list(s)[:-1]) for s in sets[:20]] + [sets[3], frozenset()]
  feats = []
  for s in sets:
    f = DocFeatures("")
    f.terms = s
    feats.append(f)
  masks = pair_candidates(feats, 0.5)
  for a in range(len(sets)):
    for b in range(len(sets)):
      if a == b:
        continue
      j = jaccard(sets[a], sets[b])
      expected = j if j > 0.5 else 0.0
      assert near_duplicate_features(feats[a], feats[b], 0.5) == expected
      if expected:
        assert (masks[a] >> b) & 1


def test_lazy_mmr_equals_mmr():
  rng = random.Random(6)
  for _ in range(50):
    n = rng.randint(1, 30)
    rel = [round(rng.random(), 3) for _ in range(n)]
    sim = [[0.0] * n for _ in range(n)]
    for i in range(n):
      for j in range(i + 1, n):
        if rng.random() < 0.2:
          sim[i][j] = sim[j][i] = round(rng.uniform(0.4, 1.0), 3)
    picks = mmr(rel, dense_neighbours(sim), lam=0.5, threshold=0.6)
    assert mmr_lazy(rel, lambda a, b: sim[a][b], lam=0.5, threshold=0.6) == picks
    masks = [sum(1 << j for j in range(n) if sim[i][j]) for i in range(n)]
    assert mmr_lazy(rel, lambda a, b: sim[a][b], candidates=masks.__getitem__, lam=0.5, threshold=0.6) == picks
    k = rng.randint(1, n)
    top = mmr_lazy(rel, lambda a, b: sim[a][b], lam=0.5, threshold=0.6, stop_below=k)
    assert top[:k] == picks[:k]


def test_heaviest_terms_sorts_like_a_key_tuple():
  from aether_frame.retrieval.lexical import heaviest_terms

  rng = random.Random(2)
  for _ in range(200):
    pairs = [(f"t{i}", rng.choice([0.5, 0.25, rng.random()])) for i in rng.sample(range(60), rng.randint(0, 40))]
    expected = sorted(pairs, key=lambda kv: (-kv[1], kv[0]))[:5]
    assert heaviest_terms(list(pairs), 5) == expected


@pytest.mark.parametrize("n", [30, 200])
def test_mmr_in_explain_equals_brute_force_jaccard(n):
  """Pool pairs come from signatures (small pools) or prefix filtering (large ones): exact."""
  rng = random.Random(n)
  base_words = [rng.sample(WORDS, 8) for _ in range(12)]
  items = []
  for i in range(n):
    words = list(rng.choice(base_words))
    for _ in range(rng.randint(0, 3)):
      words[rng.randrange(len(words))] = rng.choice(WORDS)
    items.append(Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=" ".join(words)))
  ranker = HybridRanker()
  query = "deploy the database for the vacation"
  ex = ranker.explain(query, items, now=None, layer=Layer.MEMORY)
  w = ranker.weights
  order = sorted(range(n), key=lambda i: (-ex[i]["base"], i))
  pool = order[: w.mmr_pool]
  terms = [frozenset(analyze(items[i].text)) for i in pool]

  def neighbours(p):
    return [(q, jaccard(terms[p], terms[q])) for q in range(len(pool)) if q != p and jaccard(terms[p], terms[q]) > w.mmr_threshold]

  picks = mmr([ex[i]["base"] for i in pool], neighbours, lam=w.mmr_lambda, threshold=w.mmr_threshold)
  assert any(p.redundancy > 0.0 for p in picks)
  for rank, p in enumerate(picks, start=1):
    got = ex[pool[p.index]]
    assert (got["score"], got["redundancy"], got["rank"]) == (p.value, p.redundancy, rank)
    if p.similar_to is not None and p.redundancy > 0.0:
      assert got["similar_to"] == items[pool[p.similar_to]].id


def test_a_query_of_only_common_terms_still_finds_relevant_turns():
  """When even the rarest query term is in more turns than the search may read, it read
  none: no turn had any relevance, and recall offered the newest turns, unrelated."""
  rng = random.Random(3)
  filler = "status update from the weekly sync about the aether rollout and the billing service".split()
  items = [Item(id=f"g{i}", layer=Layer.CONVERSATION, kind="turn", text=" ".join(rng.choice(filler) for _ in range(10)),
                provenance=Provenance(timestamp=T0 + 60 * i, author="user" if i % 2 == 0 else "assistant"))
           for i in range(6000)]
  index = _index(default_ranker(), items)
  hits = index.search("aether billing rollout", k=5, now=T0 + 60 * 6000)
  assert not index.last_exact and len(hits) == 5
  assert all(explain["relevance"] > 0.0 for _, _, explain in hits), hits
