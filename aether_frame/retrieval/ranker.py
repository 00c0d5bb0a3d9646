"""``HybridRanker``: the ``Ranker`` the compiler calls for EVIDENCE and MEMORY items.

Pipeline per call (seed 002): detect the recall mode -> lexical BM25 (+ vector
similarity when an embedder is configured) -> fuse -> add the other signals
(adjacency, temporal, freshness, access, salience, continuity) -> MMR so that
near-duplicates do not crowd out other evidence. Every item leaves with its
components in ``meta["explain"]``, so a drop in the manifest says why.

The ranker object persists across the calls of one session: one BM25 index
per layer and the vector cache are updated incrementally (keyed by item id +
content hash), text analysis is cached by content and query analysis by query.
Scores depend only on (query, items, now, weights), never on history.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from typing import Any, Callable, Optional, Sequence

from aether_frame.core.items import Item, Layer
from aether_frame.log_limit import RateLimitedLog

from .dedup import PrefixPool, near_duplicate_features, pair_candidates, prefix_length
from .decay import freshness_of
from .embed import Embedder, VectorCache
from .features import CONVERSATIONAL_KINDS, ND, LRU, DocFeatures, QueryInfo, num as _num, rnd as _r
from .history import RecallIndex
from .fusion import max_normalise, min_max_normalise, ranks, rrf
from .lexical import DocKey, IncrementalBM25, SmallBM25
from .mmr import mmr_lazy
from .temporal import temporal_score
from .text import content_hash
from .weights import RetrievalWeights

logger = logging.getLogger(__name__)


_RENDER_PREFIX = re.compile(r"^\s*\[[^\]\n]{1,64}\]\s*")


def default_index_text(item: Item) -> str:
  """What is indexed: ``meta["index_text"]`` or the text minus a rendered ``[date]`` prefix.

  The date prefix is the temporal signal's business; indexed as words it
  would make every turn of a month match "May".
  """
  explicit = item.meta.get("index_text")
  if isinstance(explicit, str):
    return explicit
  return _RENDER_PREFIX.sub("", item.text, count=1)


FEATURE_CACHE = 100_000
"""Analysed texts kept (by content hash): enough for a long session's history plus its recall copies."""
FEATURE_CACHE_BYTES = 128 * 2**20
"""...and at most this many bytes of analyses (``DocFeatures.cost``): ~27,000 short turns
(44 distinct terms each), or ~150 of 400 KB documents, not 100,000 of them."""
QUERY_CACHE = 256
QUERY_CACHE_CHARS = 8_000_000
"""Query analyses hold ~4 copies of the query's text: 256 pasted 400 KB messages would be 400 MB."""
SMALL_SETS_BYTES = 16 * 2**20
"""Small-layer BM25 sets kept per ranker, by what each holds of its own (``_small_cost``)."""
KEY_MEMO = 200_000
KEY_MEMO_BYTES = 256 * 2**20
"""The per-item memo holds each item's text, index text and analysis: emptied past either cap
(a session's memo also counts toward the plugin's ``session_cache_bytes``)."""
PAIR_SWEEP = 64
"""Pools up to this size test every pair's signature up front (integer work only)."""
SMALL_LAYER = 48
"""Calls with at most this many items score BM25 directly (``SmallBM25``) instead of
syncing a per-layer index: evidence and memory layers are small and churn every call."""


class HybridRanker:
  """BM25 (+ optional vectors) fused with adjacency, time and prior signals, then MMR."""

  def __init__(
      self,
      weights: Optional[RetrievalWeights] = None,
      *,
      embedder: Optional[Embedder] = None,
      index_text: Callable[[Item], str] = default_index_text,
  ) -> None:
    self.weights = weights or RetrievalWeights()
    self._lex = self._new_lexical()
    self._layers: dict[Any, IncrementalBM25] = {None: self._lex}
    """One BM25 index per layer: evidence and memory calls alternate, and each index
    follows its own layer's items instead of being torn down and rebuilt every call."""
    self.embedder = embedder
    self._vectors = VectorCache(embedder) if embedder is not None else None
    self._index_text = index_text
    self._features = LRU(FEATURE_CACHE, max_cost=FEATURE_CACHE_BYTES, cost=_features_cost)
    """Analysis by content hash, shared with children: a recall copy is not re-analysed."""
    self._queries = LRU(QUERY_CACHE, max_cost=QUERY_CACHE_CHARS, cost=_query_cost)
    self._small = LRU(4, max_cost=SMALL_SETS_BYTES, cost=_small_cost)
    """Small-layer BM25 by document set: the evidence layer is usually the same every call."""
    self._pairs = LRU(8)
    """Near-duplicate candidates by item set (small layers), for MMR."""
    self._prefix_cache: dict[int, tuple[int, IncrementalBM25, dict]] = {}
    self._key_memo: dict[str, tuple[str, str, DocKey, Any, DocFeatures, int]] = {}
    """Item id -> (raw text, index text, key, explicit index text, analysis, bytes held)."""
    self._key_memo_bytes = 0
    self._rows: dict[DocKey, Any] = {}
    """Document vectors by key (numpy rows once numpy is seen), so a call only embeds new items."""
    self._last_matrix: Any = None
    self.last_mode: Optional[str] = None
    self.embedder_error: Optional[str] = None
    """Why the embedder failed, when it did (that ranking was lexical); kept until the caller
    clears it, so a call that ranks twice reports a failure of either."""
    self._log = RateLimitedLog(logger)
    """Shared with ``child()`` rankers: an outage is one line, not one per session."""

  # -- public ---------------------------------------------------------------

  def describe(self) -> dict[str, Any]:
    """What decides its scores, for the manifest and the input hash: two packs
    ranked with other weights or another embedder must not share a pack id."""
    from aether_frame.core.canonical import digest

    return {
        "name": "hybrid",
        "weights": digest(self.weights.model_dump(mode="json")),
        "embedder": self.embedder.name if self.embedder is not None else None,
    }

  def child(self) -> "HybridRanker":
    """A ranker with the same weights, embedder and caches, but its own indexes."""
    twin = HybridRanker(self.weights, embedder=self.embedder, index_text=self._index_text)
    twin._vectors = self._vectors
    twin._features = self._features
    twin._queries = self._queries
    twin._log = self._log
    return twin

  def new_history_index(self) -> RecallIndex:
    """The compiler's per-session recall index (see ``aether_frame.core.rank.HistoryIndex``)."""
    return RecallIndex(self.child())

  def rank(self, query: str, items: Sequence[Item], *, layer: Layer, now: Optional[float]) -> list[Item]:
    explains = self.explain(query, items, now=now, layer=layer)
    out = []
    for item, ex in zip(items, explains):
      meta = dict(item.meta)
      meta["explain"] = ex
      out.append(item.model_copy(update={"score": ex["score"], "meta": meta}))
    return out

  def query_info(self, query: str) -> QueryInfo:
    """Mode, terms and time cues of ``query``, memoised per query string."""
    return self._queries.get(query, lambda: QueryInfo(query, self.weights))

  def features(self, text: str, digest: Optional[str] = None) -> DocFeatures:
    """Analysis of one index text, cached by content hash."""
    return self._features.get(digest or content_hash(text), lambda: DocFeatures(text))

  def explain(
      self, query: str, items: Sequence[Item], *, now: Optional[float], layer: Any = None
  ) -> list[dict[str, Any]]:
    """The score components of every item, in input order (``rank`` without the copies).

    ``layer`` picks the BM25 index that follows these items (one per layer).
    """
    n = len(items)
    if n == 0:
      return []
    w = self.weights
    q = self.query_info(query)
    mode = q.mode
    self.last_mode = mode
    ew = q.ew
    profile = q.profile

    texts, keys, feats = self._keys(items)
    lex: Any
    if n <= SMALL_LAYER:
      docs = dict(zip(keys, feats))
      lex = self._small.get(tuple(docs), lambda: SmallBM25(docs, k1=w.bm25_k1, b=w.bm25_b))
    else:
      lex = self._layers.get(layer)
      if lex is None:
        lex = self._layers[layer] = self._new_lexical()
      by_key = None

      def counts(key: DocKey) -> tuple[Any, int]:
        nonlocal by_key
        if by_key is None:
          by_key = dict(zip(keys, feats))
        f = by_key[key]
        return f.tf, f.length

      lex.sync(zip(keys, texts), counts)

    # Relevance: BM25 and (optionally) vector similarity, fused.
    qterms = q.qterms
    bm = lex.scores(qterms)
    if w.prf_weight > 0.0 and bm:
      extra = lex.expansion_terms(bm, qterms, docs=w.prf_docs, terms=w.prf_terms)
      if extra:  # the query terms' sums carry on with the expansion terms
        bm = lex.scores([t for t, _ in extra], [w.prf_weight * v for _, v in extra], base=bm)
    bm25 = [bm.get(k, 0.0) for k in keys]
    text_n = max_normalise(bm25)
    sims = self._similarities(query, texts, keys) if ew["similarity"] > 0.0 else None
    sim_n = min_max_normalise(sims) if sims is not None else [0.0] * n
    rel_w = {"text": ew["text"], "similarity": ew["similarity"] if sims is not None else 0.0}
    if w.fusion == "rrf":
      rankings = {"text": ranks(text_n)}
      if sims is not None:
        rankings["similarity"] = ranks(sim_n)
      relevance = rrf(rankings, rel_w, w.rrf_k)
    else:
      total = rel_w["text"] + rel_w["similarity"]
      if total <= 0.0:  # text weighted 0 and no vectors this call: no relevance signal
        relevance = [0.0] * n
      else:
        relevance = [(rel_w["text"] * a + rel_w["similarity"] * b) / total for a, b in zip(text_n, sim_n)]
    relevance = [round(x, ND) if x else 0.0 for x in relevance]

    # Timeline signals for conversation turns: adjacency and continuity.
    timeline = self._timeline(items)
    links = self._links(items, timeline)
    adjacency = self._adjacency(relevance, timeline, links)
    continuity = self._continuity(items, timeline, links)

    # Time: explicit ranges in the query, else a cue for "when ..." questions.
    ref_now = now
    if ref_now is None:
      stamps = [it.provenance.timestamp for it in items if it.provenance.timestamp is not None]
      ref_now = max(stamps) if stamps else None
    span = q.span(ref_now)
    when = span is None and q.when

    access_n = max_normalise([math.log1p(max(0.0, _num(it.meta.get("access_count")) or 0.0)) if it.meta else 0.0
                              for it in items])

    cue_w = w.time_cue * profile.temporal
    authors = frozenset(a for a in {it.provenance.author for it in items if it.provenance.author} if q.names(a))
    w_adj, w_tmp, w_fr, w_acc, w_sal, w_con, w_au = (
        ew["adjacency"], ew["temporal"], ew["freshness"], ew["access"], ew["salience"], ew["continuity"], ew["author"]
    )
    boost, boost_kinds = profile.boost, profile.boost_kinds
    has_sims = sims is not None
    fresh_memo: dict[tuple, float] = {}
    fresh_of = freshness_of(w.decay, ref_now)
    base: list[float] = []
    comps: list[dict[str, Any]] = []
    for i, it in enumerate(items):
      meta = it.meta
      ts = it.provenance.timestamp
      la = _num(meta.get("last_access")) if meta else None
      fk = (ts, la)
      fresh = fresh_memo.get(fk)
      if fresh is None:
        fresh = fresh_memo[fk] = round(fresh_of(ts, la), ND)
      sal = feats[i].salience
      if meta or boost:
        given = _num(meta.get("salience")) if meta else None
        if given is not None:
          sal = min(1.0, max(0.0, given))
        if boost and (it.kind in boost_kinds or (meta and meta.get("type") in boost_kinds)):
          sal = min(1.0, sal + boost)
        sal = round(sal, ND)
      temporal = round(temporal_score(ts, span, w.temporal_margin_days), ND) if span is not None else 0.0
      cue = 1.0 if (when and feats[i].time_expr) else 0.0
      author = 1.0 if (authors and it.provenance.author in authors) else 0.0
      adj = round(adjacency[i], ND) if adjacency[i] else 0.0
      con = round(continuity[i], ND) if continuity[i] else 0.0
      b = round(
          relevance[i] + w_adj * adj + w_tmp * temporal + cue_w * cue + w_fr * fresh
          + w_acc * access_n[i] + w_sal * sal + w_con * con + w_au * author,
          ND,
      )
      base.append(b)
      comps.append({
          "mode": mode,
          "bm25": round(bm25[i], ND) if bm25[i] else 0.0,
          "text": round(text_n[i], ND) if text_n[i] else 0.0,
          "similarity": round(sim_n[i], ND) if has_sims else 0.0,
          "relevance": relevance[i],
          "adjacency": adj,
          "continuity": con,
          "freshness": fresh,
          "access": round(access_n[i], ND) if access_n[i] else 0.0,
          "salience": sal,
          "temporal": temporal,
          "time_cue": cue,
          "author": author,
          "base": b,
      })

    picks = self._diversify(base, keys, feats, sims, lex)
    for rank, (i, value, red, similar_to) in enumerate(picks, start=1):
      ex = comps[i]
      ex["redundancy"] = red
      ex["score"] = value
      ex["rank"] = rank
      if similar_to is not None and red > 0.0:
        ex["similar_to"] = items[similar_to].id
    return comps

  # -- pieces ---------------------------------------------------------------

  def _prefixes(self, lex: IncrementalBM25) -> dict[DocKey, tuple[str, ...]]:
    """Near-duplicate prefixes by document for ``lex``'s current document set."""
    cached = self._prefix_cache.get(id(lex))
    if cached is None or cached[0] != lex.version or cached[1] is not lex:
      cached = self._prefix_cache[id(lex)] = (lex.version, lex, {})
    return cached[2]

  def _new_lexical(self) -> IncrementalBM25:
    # No retired-document cache: analysis is already cached by content.
    return IncrementalBM25(k1=self.weights.bm25_k1, b=self.weights.bm25_b, max_cached=0)

  def _keys(self, items: Sequence[Item]) -> tuple[list[str], list[DocKey], list[DocFeatures]]:
    """Index text, (id, content hash) and features per item; memoised on (id, raw text).

    The memo keeps each item's analysis too, so a whole-history scan or a large
    layer never re-analyses what the shared cache let go; what it holds is
    counted in ``held_bytes`` (and so in the plugin's ``session_cache_bytes``).
    """
    memo = self._key_memo
    texts: list[str] = []
    keys: list[DocKey] = []
    feats: list[DocFeatures] = []
    for it in items:
      hit = memo.get(it.id)
      explicit = it.meta.get("index_text")
      if hit is None or hit[0] != it.text or hit[3] != explicit:
        t = self._index_text(it)
        h = content_hash(t)
        f = self.features(t, h)
        size = len(it.text) + (len(t) if t is not it.text else 0) + 256 + 112 * len(f.tf)
        if hit is not None:
          self._key_memo_bytes -= hit[5]
        if len(memo) >= KEY_MEMO or self._key_memo_bytes + size > KEY_MEMO_BYTES:
          memo.clear()
          self._key_memo_bytes = 0
        hit = memo[it.id] = (it.text, t, (it.id, h), explicit, f, size)
        self._key_memo_bytes += size
      texts.append(hit[1])
      keys.append(hit[2])
      feats.append(hit[4])
    return texts, keys, feats

  @property
  def held_bytes(self) -> int:
    """Roughly what this ranker holds of its own (a session's child does, apart from the shared
    analysis cache): its per-item memo (texts and analyses), its small-layer BM25 sets and its
    per-layer indexes (~200 bytes per posting: the entry and the term counts it points at)."""
    postings = sum(lex.pairs for lex in self._layers.values())
    return self._key_memo_bytes + self._small.total_cost + 200 * postings

  def _similarities(self, query: str, texts: list[str], keys: list[DocKey]) -> Optional[list[float]]:
    """Cosine of each item to the query; None (lexical only) if the embedder fails."""
    self._last_matrix = None
    if self._vectors is None:
      return None
    try:
      qv = self._vectors.get_many([query], purpose="query")[0]
      missing = [i for i, k in enumerate(keys) if k not in self._rows]
      if missing:
        vecs = self._vectors.get_many([texts[i] for i in missing], purpose="document")
        for i, v in zip(missing, vecs):
          self._rows[keys[i]] = v
    except Exception as e:  # an offline Gemini must not take the pack down
      self._log.log("embedder", logging.WARNING, "aether-frame: embedder %s failed (%r); ranking lexically",
                    self.embedder.name, e)
      self.embedder_error = f"{type(e).__name__}: {e}"[:500]  # until the caller clears it (once per call)
      return None
    if len(self._rows) > 4 * len(keys) + 10_000:  # forget rows of items long gone
      live = set(keys)
      self._rows = {k: v for k, v in self._rows.items() if k in live}
    try:
      import numpy as np
    except ImportError:
      from .embed import dot

      return [_r(dot(qv, self._rows[k])) for k in keys]
    rows = []
    for k in keys:
      r = self._rows[k]
      if not isinstance(r, np.ndarray):
        r = self._rows[k] = np.asarray(r, dtype=np.float64)
      rows.append(r)
    mat = np.stack(rows) if rows else np.zeros((0, 0))
    self._last_matrix = mat
    return [_r(x) for x in (mat @ np.asarray(qv, dtype=np.float64)).tolist()]

  def _timeline(self, items: Sequence[Item]) -> list[int]:
    """Indices of conversational items in time order (ties: input order)."""
    conv = [i for i, it in enumerate(items) if it.kind in CONVERSATIONAL_KINDS]
    return sorted(conv, key=lambda i: (items[i].provenance.timestamp is not None, items[i].provenance.timestamp or 0.0, i))

  def _linked(self, items: Sequence[Item], a: int, b: int) -> bool:
    ta, tb = items[a].provenance.timestamp, items[b].provenance.timestamp
    if ta is None or tb is None:
      return ta is None and tb is None
    return abs(tb - ta) <= self.weights.adjacency_max_gap_s

  def _links(self, items: Sequence[Item], timeline: list[int]) -> list[bool]:
    """``links[p]``: timeline positions p and p+1 are in the same session (no long gap)."""
    return [self._linked(items, timeline[p], timeline[p + 1]) for p in range(len(timeline) - 1)]

  def _adjacency(self, relevance: list[float], timeline: list[int], links: list[bool]) -> list[float]:
    """For each turn: the best relevance among its neighbours, discounted by distance."""
    out = [0.0] * len(relevance)
    window, decay = self.weights.adjacency_window, self.weights.adjacency_decay
    top = max(relevance, default=0.0)
    if window == 0 or not timeline or top <= 0.0:
      return out
    last = len(timeline) - 1
    for p, i in enumerate(timeline):
      r = relevance[i]
      if r <= 0.0:
        continue
      # Spread i's relevance to its neighbours within the window, stopping at session breaks.
      q, factor = p, r
      for _ in range(window):
        if q == 0 or not links[q - 1]:
          break
        q -= 1
        j = timeline[q]
        if factor > out[j]:
          out[j] = factor
        factor *= decay
      q, factor = p, r
      for _ in range(window):
        if q == last or not links[q]:
          break
        q += 1
        j = timeline[q]
        if factor > out[j]:
          out[j] = factor
        factor *= decay
    return [x / top for x in out]

  def _continuity(self, items: Sequence[Item], timeline: list[int], links: list[bool]) -> list[float]:
    """Turns of the newest session, decaying with distance from its end; working notes 1."""
    out = [1.0 if it.kind == "working" else 0.0 for it in items]
    horizon = self.weights.continuity_turns
    for back, p in enumerate(range(len(timeline) - 1, -1, -1)):
      if back > 0 and not links[p]:
        break
      out[timeline[p]] = math.exp(-back / horizon)
    return out

  def _diversify(
      self, base: list[float], keys: list[DocKey], feats: list[DocFeatures], sims: Optional[list[float]], lex: Any = None
  ) -> list[tuple[int, float, float, Optional[int]]]:
    """MMR over the best ``mmr_pool`` items; the rest keep ``lam * base`` in base order."""
    w = self.weights
    lam, n = w.mmr_lambda, len(base)
    order = sorted(range(n), key=lambda i: (-base[i], i))
    pool = order[: w.mmr_pool]
    rest = order[w.mmr_pool :]
    similarity, candidates = self._similarity(pool, keys, feats, sims, lex)
    if candidates is None:  # no pair can be redundant: MMR keeps base order
      out = [(i, _r(lam * base[i]), 0.0, None) for i in pool]
      out.sort(key=lambda x: -x[1])  # stable: ties keep (base, index) order, as MMR's heap does
    else:
      picks = mmr_lazy(
          [base[i] for i in pool], similarity, candidates=candidates, lam=lam, threshold=w.mmr_threshold, ndigits=ND
      )
      out = [(pool[p.index], p.value, p.redundancy, pool[p.similar_to] if p.similar_to is not None else None) for p in picks]
    out.extend((i, _r(lam * base[i]), 0.0, None) for i in rest)
    return out

  def _pool_pairs(
      self, pool: list[int], keys: list[DocKey], feats: list[DocFeatures], fs: list[DocFeatures], threshold: float
  ) -> list[int]:
    """``pair_candidates`` over the pool; when the pool is every item, from a cache by item set
    (the evidence layer is usually the same every call, only its order changes)."""
    if len(pool) < len(keys):
      return pair_candidates(fs, threshold)
    near = self._pairs.get((threshold, tuple(keys)), lambda: pair_candidates(feats, threshold))
    masks = [0] * len(pool)
    if any(near):  # item order -> pool order
      at = [0] * len(pool)
      for p, i in enumerate(pool):
        at[i] = p
      for p, i in enumerate(pool):
        m = near[i]
        while m:
          low = m & -m
          masks[p] |= 1 << at[low.bit_length() - 1]
          m ^= low
    return masks

  def _similarity(
      self, pool: list[int], keys: list[DocKey], feats: list[DocFeatures], sims: Optional[list[float]], lex: Any = None
  ):
    """Pair similarity in the pool for the pairs MMR asks about, and a bitmask of the members
    that may be similar to one (None: no pair can be): 1 for the same id and text twice,
    term-set Jaccard above the MMR threshold, embedding cosine when vectors exist."""
    threshold = self.weights.mmr_threshold
    extra: dict[int, int] = {}
    where: dict[DocKey, int] = {}
    for p, i in enumerate(pool):
      where[keys[i]] = where.get(keys[i], 0) | (1 << p)
    if len(where) < len(pool):
      for p, i in enumerate(pool):
        same = where[keys[i]] & ~(1 << p)
        if same:
          extra[p] = same
    dense: Optional[dict[int, dict[int, float]]] = None
    if sims is not None and self._last_matrix is not None:
      import numpy as np

      sub = self._last_matrix[pool]
      gram = sub @ sub.T
      vt = self.weights.mmr_vector_threshold
      dense = {}
      rows, cols = np.nonzero(gram > vt)
      for a, b in zip(rows.tolist(), cols.tolist()):
        if a != b:
          # Rescale so that vt maps onto the Jaccard threshold: one redundancy scale for both.
          dense.setdefault(a, {})[b] = threshold + (float(gram[a, b]) - vt) / (1.0 - vt) * (1.0 - threshold)
          extra[b] = extra.get(b, 0) | (1 << a)
    fs = [feats[i] for i in pool]

    def similarity(a: int, b: int) -> float:
      s = 1.0 if keys[pool[a]] == keys[pool[b]] else near_duplicate_features(fs[a], fs[b], threshold)
      if dense is not None:
        d = dense.get(a, {}).get(b, 0.0)
        if d > s:
          s = d
      return s

    if len(pool) <= PAIR_SWEEP:
      masks = self._pool_pairs(pool, keys, feats, fs, threshold)
      for p, m in extra.items():
        masks[p] |= m
      if not any(masks):
        return similarity, None
      return similarity, masks.__getitem__
    prefixes = self._prefixes(lex) if isinstance(lex, IncrementalBM25) else None
    if prefixes is None:  # no layer index to order terms by: order them within the pool
      df: Counter = Counter()
      for f in fs:
        df.update(f.terms)
      order = lambda t: (df[t], t)  # noqa: E731
      pre = [tuple(sorted(f.terms, key=order)[: prefix_length(len(f.terms), threshold)]) for f in fs]
    else:
      pre = []
      for i in pool:
        got = prefixes.get(keys[i])
        if got is None:
          f, df = feats[i], lex._df
          got = prefixes[keys[i]] = tuple(
              sorted(f.terms, key=lambda t: (df[t], t))[: prefix_length(len(f.terms), threshold)]
          )
        pre.append(got)
    jaccard = PrefixPool(pre)

    def candidates(p: int) -> int:
      return jaccard.candidates(p) | extra.get(p, 0)

    return similarity, candidates


def _small_cost(lex: SmallBM25) -> int:
  """A set's own structures: a document frequency per distinct term (its feedback lists are
  filled for the few best documents only). Its analyses are the per-item memo's, counted there."""
  return 256 + 100 * len(lex._df)


def _features_cost(f: DocFeatures) -> int:
  return f.cost


def _query_cost(q: QueryInfo) -> int:
  return 512 + 4 * len(q.text)


def default_ranker(*, embedder: Optional[Embedder] = None, weights: Optional[RetrievalWeights] = None) -> HybridRanker:
  """The ranker the plugin uses when none is given: lexical hybrid, no extra packages."""
  return HybridRanker(weights, embedder=embedder)
