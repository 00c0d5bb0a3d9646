"""``HybridRanker``: the ``Ranker`` the compiler calls for EVIDENCE and MEMORY items.

Pipeline per call (seed 002): detect the recall mode -> lexical BM25 (+ vector
similarity when an embedder is configured) -> fuse -> add the other signals
(adjacency, temporal, freshness, access, salience, continuity) -> MMR so that
near-duplicates do not crowd out other evidence. Every item leaves with its
components in ``meta["explain"]``, so a drop in the manifest says why.

The ranker object persists across the calls of one session: the BM25 index
and the vector cache are updated incrementally (keyed by item id + content
hash). Scores depend only on (query, items, now, weights), never on history.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from aether_frame.core.items import Item, Layer

from .dedup import NearDuplicateIndex
from .decay import freshness as decay_freshness
from .embed import Embedder, VectorCache
from .history import RecallIndex
from .fusion import max_normalise, min_max_normalise, ranks, rrf
from .lexical import DocKey, IncrementalBM25
from .mmr import mmr
from .modes import detect_mode
from .temporal import has_time_expression, is_when_question, parse_time_range, temporal_score
from .text import analyze, content_hash
from .weights import RetrievalWeights

logger = logging.getLogger(__name__)

ND = 6
"""Digits every score component is rounded to (determinism across platforms)."""

CONVERSATIONAL_KINDS = frozenset({"recall", "turn", "pending", "conversation"})
"""Kinds whose items form a timeline (adjacency and continuity apply)."""

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


@dataclass
class _Static:
  """Query-independent features of one indexed document, computed once."""

  salience: float
  time_expr: bool
  terms: frozenset


def _num(value: Any) -> Optional[float]:
  """A finite number from item meta, or None (meta is free-form JSON)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  value = float(value)
  return value if math.isfinite(value) else None


def _r(x: float) -> float:
  return round(x, ND) + 0.0  # + 0.0 turns -0.0 into 0.0


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
    self._lex = IncrementalBM25(k1=self.weights.bm25_k1, b=self.weights.bm25_b)
    self.embedder = embedder
    self._vectors = VectorCache(embedder) if embedder is not None else None
    self._index_text = index_text
    self._static: dict[DocKey, _Static] = {}
    self._dups = NearDuplicateIndex(self.weights.mmr_threshold)
    self._key_memo: dict[str, tuple[str, str, DocKey, Any]] = {}
    self._rows: dict[DocKey, Any] = {}
    """Document vectors by key (numpy rows once numpy is seen), so a call only embeds new items."""
    self._last_matrix: Any = None
    self.last_mode: Optional[str] = None
    self.embedder_error: Optional[str] = None

  # -- public ---------------------------------------------------------------

  def child(self) -> "HybridRanker":
    """A ranker with the same weights, embedder and vector cache, but its own indexes."""
    twin = HybridRanker(self.weights, embedder=self.embedder, index_text=self._index_text)
    twin._vectors = self._vectors
    return twin

  def new_history_index(self) -> RecallIndex:
    """The compiler's per-session recall index (see ``aether_frame.core.rank.HistoryIndex``)."""
    return RecallIndex(self.child())

  def rank(self, query: str, items: Sequence[Item], *, layer: Layer, now: Optional[float]) -> list[Item]:
    explains = self.explain(query, items, now=now)
    out = []
    for item, ex in zip(items, explains):
      meta = dict(item.meta)
      meta["explain"] = ex
      out.append(item.model_copy(update={"score": ex["score"], "meta": meta}))
    return out

  def explain(self, query: str, items: Sequence[Item], *, now: Optional[float]) -> list[dict[str, Any]]:
    """The score components of every item, in input order (``rank`` without the copies)."""
    n = len(items)
    if n == 0:
      return []
    w = self.weights
    mode = detect_mode(query)
    self.last_mode = mode
    ew = w.for_mode(mode)
    profile = w.modes.get(mode)

    texts, keys = self._keys(items)
    self._lex.sync(zip(keys, texts))
    statics = [self._static_for(k, t) for k, t in zip(keys, texts)]
    self._dups.sync((k, st.terms) for k, st in zip(keys, statics))

    # Relevance: BM25 and (optionally) vector similarity, fused.
    qterms = list(dict.fromkeys(analyze(query)))
    bm = self._lex.scores(qterms)
    if w.prf_weight > 0.0 and bm:
      extra = self._lex.expansion_terms(bm, qterms, docs=w.prf_docs, terms=w.prf_terms)
      if extra:
        terms = qterms + [t for t, _ in extra]
        tw = [1.0] * len(qterms) + [w.prf_weight * v for _, v in extra]
        bm = self._lex.scores(terms, tw)
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
    span = parse_time_range(query, ref_now)
    when = span is None and is_when_question(query)

    access_n = max_normalise([math.log1p(max(0.0, _num(it.meta.get("access_count")) or 0.0)) for it in items])

    cue_w = w.time_cue * profile.temporal
    authors = self._authors_named(query, items)
    w_adj, w_tmp, w_fr, w_acc, w_sal, w_con, w_au = (
        ew["adjacency"], ew["temporal"], ew["freshness"], ew["access"], ew["salience"], ew["continuity"], ew["author"]
    )
    boost, boost_kinds = profile.boost, profile.boost_kinds
    has_sims = sims is not None
    fresh_memo: dict[tuple, float] = {}
    base: list[float] = []
    comps: list[dict[str, Any]] = []
    for i, it in enumerate(items):
      meta = it.meta
      ts = it.provenance.timestamp
      la = _num(meta.get("last_access")) if meta else None
      fk = (ts, la)
      fresh = fresh_memo.get(fk)
      if fresh is None:
        fresh = fresh_memo[fk] = round(decay_freshness(w.decay, timestamp=ts, now=ref_now, last_access=la), ND)
      sal = statics[i].salience
      if meta or boost:
        given = _num(meta.get("salience")) if meta else None
        if given is not None:
          sal = min(1.0, max(0.0, given))
        if boost and (it.kind in boost_kinds or (meta and meta.get("type") in boost_kinds)):
          sal = min(1.0, sal + boost)
        sal = round(sal, ND)
      temporal = round(temporal_score(ts, span, w.temporal_margin_days), ND) if span is not None else 0.0
      cue = 1.0 if (when and statics[i].time_expr) else 0.0
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

    picks = self._diversify(base, keys, statics, sims)
    for rank, (i, value, red, similar_to) in enumerate(picks, start=1):
      ex = comps[i]
      ex["redundancy"] = red
      ex["score"] = value
      ex["rank"] = rank
      if similar_to is not None and red > 0.0:
        ex["similar_to"] = items[similar_to].id
    return comps

  # -- pieces ---------------------------------------------------------------

  def _keys(self, items: Sequence[Item]) -> tuple[list[str], list[DocKey]]:
    """Index text and (id, content hash) per item; memoised on (id, raw text)."""
    memo = self._key_memo
    texts: list[str] = []
    keys: list[DocKey] = []
    for it in items:
      hit = memo.get(it.id)
      if hit is None or hit[0] != it.text or hit[3] != it.meta.get("index_text"):
        t = self._index_text(it)
        hit = (it.text, t, (it.id, content_hash(t)), it.meta.get("index_text"))
        if len(memo) > 200_000:
          memo.clear()
        memo[it.id] = hit
      texts.append(hit[1])
      keys.append(hit[2])
    return texts, keys

  @staticmethod
  def _authors_named(query: str, items: Sequence[Item]) -> frozenset:
    """Authors of the candidates whose name (or first name) appears in the query."""
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    named = set()
    for author in {it.provenance.author for it in items if it.provenance.author}:
      parts = re.findall(r"[a-z0-9]+", author.lower())
      if parts and (parts[0] in words or author.lower() in query.lower()):
        named.add(author)
    return frozenset(named)

  def _static_for(self, key: DocKey, text: str) -> _Static:
    st = self._static.get(key)
    if st is None:
      terms = frozenset(analyze(text))
      # Content-bearing turns state things; "haha, thanks!" does not.
      st = _Static(salience=_r(min(1.0, len(terms) / 16.0)), time_expr=has_time_expression(text), terms=terms)
      if len(self._static) > 200_000:
        self._static.clear()
      self._static[key] = st
    return st

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
      if self.embedder_error is None:
        logger.warning("aether-frame: embedder %s failed (%s); ranking lexically", self.embedder.name, e)
      self.embedder_error = f"{type(e).__name__}: {e}"
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
      self, base: list[float], keys: list[DocKey], statics: list[_Static], sims: Optional[list[float]]
  ) -> list[tuple[int, float, float, Optional[int]]]:
    """MMR over the best ``mmr_pool`` items; the rest keep ``lam * base`` in base order."""
    w = self.weights
    lam, n = w.mmr_lambda, len(base)
    order = sorted(range(n), key=lambda i: (-base[i], i))
    pool = order[: w.mmr_pool]
    rest = order[w.mmr_pool :]
    neighbours = self._neighbours(pool, keys, sims)
    picks = mmr([base[i] for i in pool], neighbours, lam=lam, threshold=w.mmr_threshold, ndigits=ND)
    out = [(pool[p.index], p.value, p.redundancy, pool[p.similar_to] if p.similar_to is not None else None) for p in picks]
    out.extend((i, _r(lam * base[i]), 0.0, None) for i in rest)
    return out

  def _neighbours(self, pool: list[int], keys: list[DocKey], sims: Optional[list[float]]):
    """Pairs above the MMR threshold: term-set Jaccard from the near-duplicate index, and
    embedding cosine when vectors exist (the larger of the two counts)."""
    threshold = self.weights.mmr_threshold
    where: dict[DocKey, list[int]] = {}
    for p, i in enumerate(pool):
      where.setdefault(keys[i], []).append(p)
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

    def neighbours(p: int) -> Iterable[tuple[int, float]]:
      # Each neighbour appears once, so iteration order cannot change MMR's result.
      me = keys[pool[p]]
      row: dict[int, float] = {q: 1.0 for q in where[me] if q != p}  # same id and text twice
      for other, j in self._dups.pairs(me).items():
        for q in where.get(other, ()):
          if j > row.get(q, 0.0):
            row[q] = j
      if dense is not None:
        for q, s in dense.get(p, {}).items():
          if s > row.get(q, 0.0):
            row[q] = s
      return row.items()

    return neighbours


def default_ranker(*, embedder: Optional[Embedder] = None, weights: Optional[RetrievalWeights] = None) -> HybridRanker:
  """The ranker the plugin uses when none is given: lexical hybrid, no extra packages."""
  return HybridRanker(weights, embedder=embedder)
