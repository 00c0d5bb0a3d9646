"""The recall index over a session's conversation groups (``HistoryIndex`` for the compiler).

The compiler keeps one per session and asks it for the best ``k`` older
turns for every query, so a search must cost about the same at 10,000 turns
as at 100. ``add`` indexes only the new groups and ``truncate`` removes only
the dropped ones (postings, timeline, per-turn priors); nothing is rebuilt.

A search computes ``HybridRanker.explain``'s scores, but only for a small
candidate set:

1. BM25 over the query terms' postings. When they are short (``exhaustive``
   postings in all) every matching turn gets its exact score. Otherwise the
   rarest terms are read up to ``budget`` postings; the best partial sums
   are completed with the other terms, and adjacency reads partial sums for
   the rest. Pseudo-relevance feedback runs on the completed scores.
2. Candidates: the best turns by score (``max(seed_factor * k, min_seeds)``,
   ``max(2k, 16)`` when budgeted), the best few by a named author, inside a
   named period, or stating a time for "when" questions, their timeline
   neighbours (+-``adjacency_window``) and the newest turns of the last session.
3. A cheap upper bound of every candidate's base score; only those that can
   still reach the top k get every signal. MMR stops once the top k are settled.

Exactness: with exhaustive postings, a search bounds what any turn outside
the candidates could score; if the k-th hit beats that, the hits equal
``explain`` over the whole history (``last_exact``), and if not it widens the
candidates once when the wider bound could pass. Otherwise (flat scores,
long postings) the hits are an approximation that kept LoCoMo's evidence
recall. Either way a search depends on (items, query, now, weights) alone,
never on the add/truncate history, so a warm session equals a fresh compile.

Vectors, RRF fusion or the same (id, text) twice make every turn's score
depend on all the others; those searches rank the whole history (``scan``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, insort
from collections import Counter
from itertools import islice
from typing import TYPE_CHECKING, Any, Optional, Sequence

from aether_frame.core.items import Item

from .decay import freshness as decay_freshness
from .dedup import near_duplicate_features
from .features import CONVERSATIONAL_KINDS, ND, DocFeatures, QueryInfo, num, rnd
from .lexical import IdfOfDf, feedback_terms
from .mmr import mmr_lazy
from .temporal import DAY, temporal_score
from .text import content_hash

if TYPE_CHECKING:
  from .ranker import HybridRanker

_SLACK = 1e-5
"""Covers the 6-digit rounding of relevance, base and score in the exactness bound."""


class _Row:
  """One indexed group and the query-independent parts of its score."""

  __slots__ = ("item", "key", "f", "ts", "author", "la", "given", "access", "kind", "mtype", "meta", "conv", "tkey")

  def __init__(self, item: Item, key: tuple[str, str], f: DocFeatures, pos: int) -> None:
    meta = item.meta
    self.item = item
    self.key = key
    self.f = f
    self.ts = item.provenance.timestamp
    self.author = item.provenance.author
    self.meta = bool(meta)
    self.la = num(meta.get("last_access")) if meta else None
    self.given = num(meta.get("salience")) if meta else None
    self.access = math.log1p(max(0.0, num(meta.get("access_count")) or 0.0)) if meta else 0.0
    self.kind = item.kind
    self.mtype = meta.get("type") if meta else None
    self.conv = item.kind in CONVERSATIONAL_KINDS
    self.tkey = (self.ts is not None, self.ts or 0.0, pos)


class RecallIndex:
  """Incremental ``HistoryIndex``: add / truncate / search, scored as ``HybridRanker`` scores."""

  exhaustive = 1024
  """Query postings up to this many are all scored (exact BM25 for every turn)."""
  budget = 512
  """Otherwise: postings read for candidate generation (rarest terms first)."""
  seed_factor = 4
  min_seeds = 32
  """Candidates start from the best max(seed_factor * k, min_seeds) turns by BM25."""

  def __init__(self, ranker: "HybridRanker") -> None:
    self._ranker = ranker
    self._items: list[Item] = []
    self._rows: list[_Row] = []
    self._post: dict[str, dict[int, int]] = {}
    self._dl: list[int] = []
    self._total = 0
    self._keys: dict[tuple[str, str], int] = {}
    self._dup_keys = 0
    self._times: list[tuple[float, int]] = []
    """(timestamp, position), sorted: the newest time and period look-ups."""
    self._authors: Counter = Counter()
    self._access: Counter = Counter()
    self._working: list[int] = []
    self._tl: list[int] = []
    """Conversational positions in timeline order (timestamp, then position)."""
    self._tpos: list[int] = []
    self._link: list[bool] = []
    """``_link[i]``: timeline entries i and i+1 are in the same session (no long gap)."""
    self._breaks: list[int] = []
    """Timeline indices that start a session (a gap > adjacency_max_gap_s before them)."""
    self._stale_timeline = False
    self.last_exact: Optional[bool] = None
    """Whether the last search provably equals ``explain`` over the whole history (None: scanned)."""
    self.last_work = 0
    """Work units of the last search (see ``_Search.work``): bounded, not proportional to history."""
    self._idf_of_df = IdfOfDf(0)
    """idf by document frequency for the current number of groups (searches in a row share it)."""

  def __len__(self) -> int:
    return len(self._items)

  @property
  def held_bytes(self) -> int:
    """What its ranker holds of its own (a whole-history scan ranks through that ranker)."""
    return self._ranker.held_bytes

  # -- maintenance ------------------------------------------------------------

  def add(self, items: Sequence[Item]) -> None:
    """Queues ``items``; they are analysed and indexed by the next search.

    The compiler adds turns only once they are trimmed from the tail, and
    many sessions never trim; the analysis is paid only when recall runs.
    """
    self._items.extend(items)

  def _catch_up(self) -> None:
    """Analyses and indexes the queued items (the ranker's analysis cache keeps them for recall copies)."""
    rows, groups = self._rows, self._items
    if len(rows) == len(groups):
      return
    ranker = self._ranker
    index_text, features = ranker._index_text, ranker.features
    post = self._post
    dls, keys, times, tpos, tl = self._dl, self._keys, self._times, self._tpos, self._tl
    for pos in range(len(rows), len(groups)):
      item = groups[pos]
      text = index_text(item)
      h = content_hash(text)
      f = features(text, h)
      row = _Row(item, (item.id, h), f, pos)
      rows.append(row)
      tf = f.tf
      for term, count in tf.items():
        posting = post.get(term)
        if posting is None:
          post[term] = {pos: count}
        else:
          posting[pos] = count
      dls.append(f.length)
      self._total += f.length
      seen = keys.get(row.key, 0) + 1
      keys[row.key] = seen
      if seen == 2:
        self._dup_keys += 1
      ts = row.ts
      if ts is not None:
        if not times or times[-1] <= (ts, pos):
          times.append((ts, pos))
        else:
          insort(times, (ts, pos))
      if row.author:
        self._authors[row.author] += 1
      if row.access > 0.0:
        self._access[row.access] += 1
      if row.kind == "working":
        self._working.append(pos)
      tpos.append(-1)
      if row.conv:
        if not self._stale_timeline and (not tl or rows[tl[-1]].tkey < row.tkey):
          tl.append(pos)
          tpos[pos] = len(tl) - 1
          if len(tl) > 1:
            linked = self._linked(tl[-2], pos)
            self._link.append(linked)
            if not linked:
              self._breaks.append(len(tl) - 1)
        else:
          self._stale_timeline = True  # out of time order: rebuilt on the next search

  def truncate(self, n: int) -> None:
    n = max(0, n)
    for pos in range(len(self._rows) - 1, n - 1, -1):  # queued items have nothing indexed yet
      row = self._rows[pos]
      for term in row.f.tf:
        posting = self._post[term]
        del posting[pos]
        if not posting:
          del self._post[term]
      self._total -= row.f.length
      self._keys[row.key] -= 1
      if self._keys[row.key] == 1:
        self._dup_keys -= 1
      elif not self._keys[row.key]:
        del self._keys[row.key]
      if row.ts is not None:
        if self._times[-1] == (row.ts, pos):
          self._times.pop()
        else:
          del self._times[bisect_left(self._times, (row.ts, pos))]
      if row.author:
        self._authors[row.author] -= 1
        if not self._authors[row.author]:
          del self._authors[row.author]
      if row.access > 0.0:
        self._access[row.access] -= 1
        if not self._access[row.access]:
          del self._access[row.access]
      if self._working and self._working[-1] == pos:
        self._working.pop()
      if row.conv and not self._stale_timeline:
        if self._tl and self._tl[-1] == pos:
          self._tl.pop()
          del self._link[max(0, len(self._tl) - 1):]
          while self._breaks and self._breaks[-1] >= len(self._tl):
            self._breaks.pop()
        else:
          self._stale_timeline = True
    del self._items[n:]
    del self._rows[n:]
    del self._dl[n:]
    del self._tpos[n:]

  def _rebuild_timeline(self) -> None:
    rows = self._rows
    self._tl = sorted((p for p, r in enumerate(rows) if r.conv), key=lambda p: rows[p].tkey)
    self._tpos = [-1] * len(rows)
    for i, p in enumerate(self._tl):
      self._tpos[p] = i
    self._link = [self._linked(self._tl[i], self._tl[i + 1]) for i in range(len(self._tl) - 1)]
    self._breaks = [i + 1 for i, linked in enumerate(self._link) if not linked]
    self._stale_timeline = False

  def _idfs(self) -> IdfOfDf:
    if self._idf_of_df.n != len(self._rows):
      self._idf_of_df = IdfOfDf(len(self._rows))
    return self._idf_of_df

  def _linked(self, a: int, b: int) -> bool:
    ta, tb = self._rows[a].ts, self._rows[b].ts
    if ta is None or tb is None:
      return ta is None and tb is None
    return abs(tb - ta) <= self._ranker.weights.adjacency_max_gap_s

  # -- search -----------------------------------------------------------------

  def search(self, query: str, *, k: int, now: Optional[float]) -> list[tuple[int, float, dict[str, Any]]]:
    """Best first: (position, score, explain); only items with a positive score."""
    if k <= 0 or not self._items:
      return []
    self._catch_up()
    ranker = self._ranker
    q = ranker.query_info(query)
    vectors = ranker._vectors is not None and q.ew["similarity"] > 0.0
    if vectors or ranker.weights.fusion != "weighted" or self._dup_keys:
      return self.scan(query, k=k, now=now)
    if self._stale_timeline:
      self._rebuild_timeline()
    return _Search(self, q, k, now).run()

  def scan(self, query: str, *, k: int, now: Optional[float]) -> list[tuple[int, float, dict[str, Any]]]:
    """``explain`` over the whole history: exact for any weights, O(history) per call."""
    self.last_exact = None
    self.last_work = len(self._items)
    if k <= 0 or not self._items:
      return []
    explains = self._ranker.explain(query, self._items, now=now)
    order = sorted(range(len(explains)), key=lambda i: (-explains[i]["score"], i))
    return [(i, explains[i]["score"], explains[i]) for i in order[:k] if explains[i]["score"] > 0.0]


class _NormOfDl(dict):
  """Document length -> the length part of the BM25 denominator, computed on first use."""

  def __init__(self, k1: float, b: float, avgdl: float) -> None:
    super().__init__()
    self.k1, self.b, self.avgdl = k1, b, avgdl

  def __missing__(self, dl: int) -> float:
    out = self[dl] = self.k1 * (1.0 - self.b + self.b * dl / self.avgdl)
    return out


class _Search:
  """One search: the state shared by its stages."""

  def __init__(self, index: RecallIndex, q: QueryInfo, k: int, now: Optional[float]) -> None:
    self.ix = index
    self.q = q
    self.k = k
    w = self.w = index._ranker.weights
    self.rows = index._rows
    n = len(index._rows)
    self.n = n
    self.avgdl = (index._total / n) or 1.0
    self.k1, self.b = w.bm25_k1, w.bm25_b
    self.idf_of_df = index._idfs()
    self.norm_of_dl = _NormOfDl(self.k1, self.b, self.avgdl)
    self.ref_now = now if now is not None else (index._times[-1][0] if index._times else None)
    self._ranked: Optional[list[int]] = None
    self.exact1: dict[int, float] = {}
    self.work = 0
    """Postings read, query terms looked up and candidates scored: the search's cost in units."""

  # -- BM25 -------------------------------------------------------------------

  def _terms(self, terms: Sequence[str], weights: Optional[Sequence[float]] = None) -> list[tuple[str, dict, float]]:
    post = self.ix._post
    out = []
    for i, t in enumerate(terms):
      p = post.get(t)
      if p:
        out.append((t, p, self.idf_of_df[len(p)] * (weights[i] if weights is not None else 1.0)))
    return out

  def _accumulate(self, acc: dict[int, float], terms: list[tuple[str, dict, float]]) -> None:
    """Adds every posting of ``terms`` to ``acc`` (in the given term order)."""
    dl, norm_of_dl = self.ix._dl, self.norm_of_dl
    for _, p, idf in terms:
      self.work += len(p)
      get = acc.get
      for d, tf in p.items():
        acc[d] = get(d, 0.0) + idf * tf / (tf + norm_of_dl[dl[d]])

  def _exact(self, d: int, terms: list[tuple[str, dict, float]], s: float = 0.0) -> float:
    """One document's BM25 over ``terms``, summed in query-term order (as ``IncrementalBM25``)."""
    norm = self.norm_of_dl[self.ix._dl[d]]
    self.work += len(terms)
    for _, p, idf in terms:
      tf = p.get(d)
      if tf:
        s = s + idf * tf / (tf + norm)
    return s

  def _scores(self) -> None:
    """Exact scores (``self.s``) for the best documents; ``self.full``: for every document."""
    w, q = self.w, self.q
    t1 = self._terms(q.qterms)
    volume = sum(len(p) for _, p, _ in t1)
    self.full = volume <= self.ix.exhaustive
    if self.full:
      acc: dict[int, float] = {}
      self._accumulate(acc, t1)
      top = self._top_prf(acc)
    else:
      # Rarest terms first, up to the budget; the others only complete the best partial sums.
      order = sorted(range(len(t1)), key=lambda i: (len(t1[i][1]), i))
      acc = {}
      spent = 0
      for j, i in enumerate(order):
        size = len(t1[i][1])
        if j == 0 and size > 4 * self.ix.budget:
          # Every term is common: its newest postings seed the search (reading
          # none left no seeds, and recall offered the newest turns, unrelated).
          term, postings, idf = t1[i]
          self._accumulate(acc, [(term, dict(itertools.islice(reversed(postings.items()), self.ix.budget)), idf)])
          break
        if spent + size > self.ix.budget and j:
          break
        self._accumulate(acc, [t1[i]])
        spent += size
      best = heapq.nlargest(max(8, 2 * w.prf_docs), acc, key=acc.__getitem__)
      exact1 = self.exact1 = {d: self._exact(d, t1) for d in best}
      top = self._top_prf(exact1)
    self.t1, self.acc = t1, acc
    extra = self._expansion(top) if top else []
    te = self._terms([t for t, _ in extra], [w.prf_weight * v for _, v in extra]) if extra else []
    self.te = te
    if self.full:
      if te:
        acc2 = dict(acc)
        self._accumulate(acc2, te)
      else:
        acc2 = acc
      self.s = acc2
    else:
      if te:
        self._accumulate(acc, [t for t in te if len(t[1]) <= self.ix.budget // 4])
      self.s = {}

  def _top_prf(self, scores: dict[int, float]) -> list[tuple[int, float]]:
    """The pseudo-relevance-feedback documents: best first, ties by (id, content hash)."""
    w = self.w
    if w.prf_weight <= 0.0 or not scores:
      return []
    cut = heapq.nlargest(w.prf_docs, scores.values())[-1]
    tied = [(d, v) for d, v in scores.items() if v >= cut]
    rows = self.rows
    tied.sort(key=lambda dv: (-dv[1], rows[dv[0]].key))
    return tied[: w.prf_docs]

  def _expansion(self, top: list[tuple[int, float]]) -> list[tuple[str, float]]:
    """``IncrementalBM25.expansion_terms`` over this index."""
    post, rows, idf_of_df = self.ix._post, self.rows, self.idf_of_df

    def feedback(d: int) -> tuple[list[tuple[str, int]], int]:
      f = rows[d].f
      return [(t, c) for t, c in f.tf.items() if len(post[t]) > 1], f.length

    def idfs(terms: list[str]) -> list[float]:
      return [idf_of_df[len(post[t])] for t in terms]

    return feedback_terms(top, self.q.qset, self.w.prf_terms, feedback, idfs)

  def score(self, d: int) -> float:
    """Exact BM25 (both passes) of document ``d``."""
    s = self.s.get(d)
    if s is None:
      if self.full:
        return 0.0
      s1 = self.exact1.get(d)
      if s1 is None:
        s1 = self._exact(d, self.t1)
      s = self._exact(d, self.te, s1) if self.te else s1
      self.s[d] = s
    return s

  # -- candidates -------------------------------------------------------------

  def _order(self) -> list[int]:
    """Scored documents, best first (exact scores, or partial sums without exhaustive postings)."""
    if self._ranked is None:
      pool = self.s if self.full else self.acc
      self._ranked = sorted(pool, key=pool.__getitem__, reverse=True)
    return self._ranked

  def _seeds(self, m: int) -> tuple[list[int], float]:
    """The best ``m`` documents by score, and a bound on every other document's score."""
    ranked = self._order()
    if self.full:
      return ranked[:m], (self.s[ranked[m]] if len(ranked) > m else 0.0)
    return ranked[:m], math.inf

  def _extras(self, named: frozenset, span, when: bool, m: int) -> set[int]:
    """A few turns the priors favour: by a named author, in the period, stating a time."""
    rows, ix = self.rows, self.ix
    ranked = self._order()[: 16 * m]  # among the best scored only: the work stays bounded
    out: set[int] = set()
    if named:
      out.update(islice((d for d in ranked if rows[d].author in named), m))
    if span is not None:
      margin = self.w.temporal_margin_days * DAY
      start, end = span.start - margin, span.end + margin
      lo = bisect_left(ix._times, (start, -1))
      hi = bisect_left(ix._times, (end, -1))
      self.span_all = hi - lo <= m
      if self.span_all:
        out.update(p for _, p in ix._times[lo:hi])
      else:  # the best scored in the period, and its newest turns
        out.update(islice((d for d in ranked if rows[d].ts is not None and start <= rows[d].ts < end), m))
        out.update(p for _, p in ix._times[hi - m : hi])
    if when:
      out.update(islice((d for d in ranked if rows[d].f.time_expr), m))
    return out

  def _around(self, seeds, m_newest: int) -> set[int]:
    """Seeds, their timeline neighbours, the newest turns of the last session, working notes."""
    ix = self.ix
    tl, tpos, link, window = ix._tl, ix._tpos, ix._link, self.w.adjacency_window
    out = set(seeds)
    for d in seeds:
      p = tpos[d]
      if p < 0:
        continue
      lo = p
      while lo > 0 and p - lo < window and link[lo - 1]:
        lo -= 1
      hi = p
      while hi < len(link) and hi - p < window and link[hi]:
        hi += 1
      out.update(tl[lo : hi + 1])
    start = max(ix._breaks[-1] if ix._breaks else 0, len(tl) - m_newest)
    out.update(tl[start:])
    out.update(ix._working[-64:])
    return out

  # -- run --------------------------------------------------------------------

  def run(self) -> list[tuple[int, float, dict[str, Any]]]:
    ix, q, k = self.ix, self.q, self.k
    self._scores()
    ew, profile = q.ew, q.profile
    span = q.span(self.ref_now)
    when = span is None and q.when
    self.span_all = True
    named = frozenset(a for a in ix._authors if q.names(a))
    m = max(ix.seed_factor * k, ix.min_seeds) if self.full else max(2 * k, 16)
    seeds, bound = self._seeds(m)
    extras = self._extras(named, span, when, max(k, 8))
    if self.full:
      cands = self._around(set(seeds) | extras, max(k, 8))
    else:  # neighbours of the best seeds only: each candidate costs a completed score here
      for d in seeds:
        self.score(d)
      ranked = sorted(seeds, key=lambda d: (-self.s[d], d))
      newest = max(k, 8) if ew["continuity"] >= 0.05 else 2  # continuity only weighs in conversation mode
      cands = self._around(set(ranked[:k]) | extras, newest) | set(seeds)

    # Relevance (``explain``'s weighted fusion without vectors).
    tw = ew["text"]
    total = tw + 0.0
    s = self.s
    best = self.best = max(s.values(), default=0.0)
    on = best > 0.0 and total > 0.0

    def rel(docs, exact: bool = True) -> dict[int, float]:
      """Relevance of ``docs``: BM25 over the best, as ``explain`` fuses it without vectors.

      Without exhaustive postings, ``exact=False`` reads partial sums (what the rare
      terms gave) instead of completing each document's score.
      """
      if not on:
        return dict.fromkeys(docs, 0.0)
      if self.full:
        get = s.get
      elif exact:
        for d in docs:
          if d not in s:
            self.score(d)
        get = s.get
      else:
        acc = self.acc
        get = lambda d: s.get(d) or acc.get(d)  # noqa: E731
      # Scores are >= 0 (idf > 0, weights > 0), so max(0, x) and + 0 * 0 change nothing.
      return {d: (round(tw * (x / best) / total, ND) if (x := get(d)) else 0.0) for d in docs}

    top_rel = max(rel([max(s, key=s.__getitem__)]).values()) if (s and on) else 0.0
    hits = self._rank(cands, rel, top_rel, ew, profile, span, when, named)
    exact = self.full and self._verified(hits, bound, best, total, top_rel, ew, profile, span, when, named)
    if self.full and not exact and len(self.s) > m:
      # One wider try when the wider bound could pass (peaked scores with many matches).
      wide, wide_bound = self._seeds(4 * m)
      if self._verified(hits, wide_bound, best, total, top_rel, ew, profile, span, when, named, predict=True):
        cands = self._around(set(wide) | extras, max(k, 8))
        hits = self._rank(cands, rel, top_rel, ew, profile, span, when, named)
        exact = self._verified(hits, wide_bound, best, total, top_rel, ew, profile, span, when, named)
    ix.last_exact = exact
    ix.last_work = self.work
    return [(d, ex["score"], ex) for d, ex in hits]

  def _verified(self, hits, bound, best, total, top_rel, ew, profile, span, when, named, predict=False) -> bool:
    """Whether no turn outside the candidates can reach the hits (so they equal ``explain``'s).

    Such a turn scores at most ``bound`` (it is not a seed) and so do its
    neighbours (else it would be a candidate); its priors are at their maximum,
    except continuity (the newest turns are candidates) and the period (when
    every turn in it is a candidate).
    """
    w, ix = self.w, self.ix
    if best > 0.0 and total > 0.0:
      r_cut = (ew["text"] * (bound / best)) / total + _SLACK
    else:
      r_cut = 0.0
    a_cut = min(1.0, r_cut / top_rel) if top_rel > 0.0 else 0.0
    tl = ix._tl
    session = len(tl) - (ix._breaks[-1] if ix._breaks else 0)
    newest = max(self.k, 8)
    priors = (
        ew["temporal"] * (0.0 if span is None or self.span_all else 1.0)
        + w.time_cue * profile.temporal * (1.0 if when else 0.0)
        + ew["freshness"] * 1.0
        + ew["access"] * (1.0 if ix._access else 0.0)
        + ew["salience"] * 1.0
        + ew["continuity"] * (1.0 if len(ix._working) > 64 else math.exp(-newest / w.continuity_turns) if session > newest else 0.0)
        + ew["author"] * (1.0 if named else 0.0)
    )
    ceiling = w.mmr_lambda * (r_cut + ew["adjacency"] * a_cut + priors + _SLACK) + _SLACK
    if len(hits) < self.k:
      return ceiling <= 0.0 and not predict
    return hits[-1][1]["score"] > ceiling

  def _rank(self, cands: set[int], rel, top_rel: float, ew, profile, span, when: bool, named: frozenset):
    """Every signal for the candidates, MMR, and the top k with their explanations."""
    ix, w, rows, k = self.ix, self.w, self.rows, self.k
    tl, tpos, link = ix._tl, ix._tpos, ix._link
    window, decay = w.adjacency_window, w.adjacency_decay
    horizon = w.continuity_turns
    last = len(tl) - 1
    session = ix._breaks[-1] if ix._breaks else 0
    top_access = max(ix._access, default=0.0)
    cue_w = w.time_cue * profile.temporal
    w_adj, w_tmp, w_fr, w_acc, w_sal, w_con, w_au = (
        ew["adjacency"], ew["temporal"], ew["freshness"], ew["access"], ew["salience"], ew["continuity"], ew["author"]
    )
    boost, boost_kinds = profile.boost, profile.boost_kinds
    margin = w.temporal_margin_days
    decay_model, ref_now = w.decay, self.ref_now
    fresh_memo: dict[tuple, float] = {}
    spread = bool(window) and top_rel > 0.0
    # Relevance of the candidates and of the neighbours their adjacency reads.
    need = set(cands)
    if spread:
      for d in cands:
        p = tpos[d]
        if p >= 0:
          need.update(tl[max(0, p - window) : p + window + 1])
    # Without exhaustive postings, adjacency reads partial sums for turns whose score was
    # not completed (the rarest terms carry most of it); a candidate's own relevance is exact.
    rv = rel(need, exact=False)
    full = self.full
    info: dict[int, tuple] = {}
    base: dict[int, float] = {}

    def evaluate(d: int) -> float:
      self.work += 1
      row = rows[d]
      r = rv[d] if full else rel([d])[d]
      adj = 0.0
      p = tpos[d]
      if p >= 0:
        if spread:
          out = 0.0
          q = p
          for off in range(window):  # left: factor r * decay**off, stop at a session break
            if q == 0 or not link[q - 1]:
              break
            q -= 1
            v = rv[tl[q]]
            if v > 0.0:
              for _ in range(off):  # r, r*decay, (r*decay)*decay: the spreading order of ``explain``
                v *= decay
              if v > out:
                out = v
          q = p
          for off in range(window):
            if q == last or not link[q]:
              break
            q += 1
            v = rv[tl[q]]
            if v > 0.0:
              for _ in range(off):
                v *= decay
              if v > out:
                out = v
          if out:
            adj = round(out / top_rel, ND)
        con = round(math.exp(-(last - p) / horizon), ND) if p >= session else 0.0
      else:
        con = 1.0 if row.kind == "working" else 0.0
      fk = (row.ts, row.la)
      fresh = fresh_memo.get(fk)
      if fresh is None:
        fresh = fresh_memo[fk] = round(decay_freshness(decay_model, timestamp=row.ts, now=ref_now, last_access=row.la), ND)
      sal = row.f.salience
      if row.meta or boost:
        if row.given is not None:
          sal = min(1.0, max(0.0, row.given))
        if boost and (row.kind in boost_kinds or (row.meta and row.mtype in boost_kinds)):
          sal = min(1.0, sal + boost)
        sal = round(sal, ND)
      temporal = round(temporal_score(row.ts, span, margin), ND) if span is not None else 0.0
      cue = 1.0 if (when and row.f.time_expr) else 0.0
      author = 1.0 if (named and row.author in named) else 0.0
      access_n = row.access / top_access if top_access > 0.0 else 0.0
      b = base[d] = round(
          r + w_adj * adj + w_tmp * temporal + cue_w * cue + w_fr * fresh
          + w_acc * access_n + w_sal * sal + w_con * con + w_au * author,
          ND,
      )
      info[d] = (r, adj, con, fresh, access_n, sal, temporal, cue, author)
      return b

    # A cheap upper bound of each candidate's base (the small priors at their maximum),
    # so that only candidates that can still reach the top k are scored in full.
    small = w_fr + w_acc * (1.0 if top_access > 0.0 else 0.0) + w_sal + w_con + _SLACK
    ub: dict[int, float] = {}
    for d in cands:
      row = rows[d]
      u = rv[d] + small
      p = tpos[d]
      if spread and p >= 0:
        u += w_adj * max(map(rv.__getitem__, tl[max(0, p - window) : p + window + 1])) / top_rel + _SLACK
      if named and row.author in named:
        u += w_au
      if span is not None and row.ts is not None:
        u += w_tmp
      if when and row.f.time_expr:
        u += cue_w
      ub[d] = u
    order_ub = sorted(cands, key=lambda d: (-ub[d], d))
    lam = w.mmr_lambda
    done, n_c = 0, len(order_ub)
    kth: list[float] = []
    while done < n_c:
      d = order_ub[done]
      if len(kth) == k and ub[d] < kth[0]:
        break
      b = evaluate(d)
      done += 1
      if len(kth) < k:
        heapq.heappush(kth, b)
      elif b > kth[0]:
        heapq.heapreplace(kth, b)
    while True:
      hits = self._top(base, info)
      if done == n_c:
        return hits
      floor = hits[-1][1]["score"] if len(hits) == k else 0.0
      if lam * ub[order_ub[done]] < floor:
        return hits
      # MMR pushed the k-th hit below what an unscored candidate may reach: score those too.
      while done < n_c and lam * ub[order_ub[done]] >= floor:
        evaluate(order_ub[done])
        done += 1

  def _top(self, base: dict[int, float], info: dict[int, tuple]) -> list[tuple[int, dict[str, Any]]]:
    """MMR over the scored candidates, stopped once the top k are settled, with explanations."""
    w, rows, k = self.w, self.rows, self.k
    lam = w.mmr_lambda
    order = sorted(base, key=lambda d: (-base[d], d))
    pool, rest = order[: w.mmr_pool], order[w.mmr_pool :]
    fs = [rows[d].f for d in pool]
    threshold = w.mmr_threshold
    picks = mmr_lazy(
        [base[d] for d in pool], lambda a, b: near_duplicate_features(fs[a], fs[b], threshold),
        lam=lam, threshold=threshold, ndigits=ND, stop_below=k,
    )
    ranked = [(p.value, pool[p.index], rank, p.redundancy, p.similar_to) for rank, p in enumerate(picks, start=1)]
    ranked_rest_kth = 0.0
    for j, d in enumerate(rest):  # in base order: the first k (and ties with the k-th) can rank
      value = rnd(lam * base[d])
      if j >= k and value < ranked_rest_kth:
        break
      if j == k - 1:
        ranked_rest_kth = value
      ranked.append((value, d, len(pool) + 1 + j, 0.0, None))
    ranked.sort(key=lambda x: (-x[0], x[1]))
    hits = []
    mode = self.q.mode
    best = self.best
    for value, d, rank, red, src in ranked[:k]:
      if value <= 0.0:
        break
      r, adj, con, fresh, access_n, sal, temporal, cue, author = info[d]
      s = self.score(d)
      text = max(0.0, s) / best if best > 0.0 else 0.0
      ex = {
          "mode": mode,
          "bm25": round(s, ND) if s else 0.0,
          "text": round(text, ND) if text else 0.0,
          "similarity": 0.0,
          "relevance": r,
          "adjacency": adj,
          "continuity": con,
          "freshness": fresh,
          "access": round(access_n, ND) if access_n else 0.0,
          "salience": sal,
          "temporal": temporal,
          "time_cue": cue,
          "author": author,
          "base": base[d],
          "redundancy": red,
          "score": value,
          "rank": rank,
      }
      if src is not None and red > 0.0:
        ex["similar_to"] = rows[pool[src]].item.id
      hits.append((d, ex))
    return hits
