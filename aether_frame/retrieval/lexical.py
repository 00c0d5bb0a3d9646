"""An incremental BM25 index: turns arrive one call at a time, the index never rebuilds.

Why not ``bm25s`` here: it precomputes a sparse score matrix whose IDF and
length norms depend on the whole corpus, so every new turn means a full
re-index (measured on 1,000 LoCoMo turns in ``docs/retrieval.md``). This index
keeps postings and document frequencies and scores only the query's terms at
query time, with the same Lucene BM25 formula as ``bm25s`` (``method="lucene"``:
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, term weight
``tf / (tf + k1 * (1 - b + b * dl / avgdl))``, no ``k1 + 1`` factor), checked
to 1e-5 in ``tests/test_retrieval_lexical.py``.

Documents are keyed by ``(item id, content hash)``; ``sync()`` makes the active
set equal to the items of the current call (adds new ones, retires the ones
that left), so statistics - and therefore scores - depend only on the current
inputs, never on the order in which earlier calls arrived.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Optional, Sequence

from .text import analyze

if TYPE_CHECKING:
  from .features import DocFeatures

DocKey = tuple[str, str]
"""(item id, content hash)."""


def lucene_idf(n: int, df: int) -> float:
  """``ln(1 + (N - df + 0.5) / (df + 0.5))``: one expression, so every index gets the same bits."""
  return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class IdfOfDf(dict):
  """df -> ``lucene_idf(n, df)`` for one document count, computed on first use."""

  def __init__(self, n: int) -> None:
    super().__init__()
    self.n = n

  def __missing__(self, df: int) -> float:
    out = self[df] = lucene_idf(self.n, df)
    return out


def heaviest_terms(weighted: list[tuple[str, float]], n: int) -> list[tuple[str, float]]:
  """The ``n`` heaviest (term, weight) pairs, ties by term: C sorts, no key tuples."""
  if len(weighted) > n:  # only weights up to the n-th heaviest can make it (ties included)
    cut = sorted(map(itemgetter(1), weighted))[-n]
    weighted = [tw for tw in weighted if tw[1] >= cut]
  weighted.sort()  # by term (terms are distinct)
  weighted.sort(key=itemgetter(1), reverse=True)  # stable: equal weights stay in term order
  return weighted[:n]


class IncrementalBM25:
  """Lucene-variant BM25 over a changing document set."""

  def __init__(
      self,
      *,
      k1: float = 1.2,
      b: float = 0.75,
      tokenizer: Callable[[str], list[str]] = analyze,
      max_cached: int = 50_000,
  ) -> None:
    self.k1 = k1
    self.b = b
    self._tokenize = tokenizer
    self._active: dict[DocKey, tuple[Counter, int]] = {}
    self._postings: dict[str, dict[DocKey, int]] = {}
    self._df: Counter = Counter()
    self._total_len = 0
    self.pairs = 0
    """(term, document) postings held: what the index's size grows with."""
    self._retired: dict[DocKey, tuple[Counter, int]] = {}
    """Tokenised docs that left the active set, kept so that returning is cheap."""
    self._max_cached = max_cached
    self.adds = 0
    self.removes = 0
    self.version = 0
    """Changes whenever the document set does (statistics-derived caches key on it)."""

  def __len__(self) -> int:
    return len(self._active)

  @property
  def avgdl(self) -> float:
    return self._total_len / len(self._active) if self._active else 0.0

  def terms(self, key: DocKey) -> Counter:
    return self._active[key][0]

  def _analyse(self, key: DocKey, text: str) -> tuple[Counter, int]:
    cached = self._retired.pop(key, None)
    if cached is not None:
      return cached
    terms = self._tokenize(text)
    return Counter(terms), len(terms)

  def add(self, key: DocKey, text: str, counts: Optional[tuple[Counter, int]] = None) -> None:
    """Indexes ``text``; ``counts`` (term counts, length) skips tokenising it again."""
    if key in self._active:
      return
    if counts is not None:
      self._retired.pop(key, None)
      tf, length = counts
    else:
      tf, length = self._analyse(key, text)
    self._active[key] = (tf, length)
    self._total_len += length
    self.pairs += len(tf)
    for term, count in tf.items():
      self._postings.setdefault(term, {})[key] = count
      self._df[term] += 1
    self.adds += 1
    self.version += 1

  def remove(self, key: DocKey) -> None:
    entry = self._active.pop(key, None)
    if entry is None:
      return
    tf, length = entry
    self._total_len -= length
    self.pairs -= len(tf)
    for term in tf:
      posting = self._postings[term]
      del posting[key]
      self._df[term] -= 1
      if not posting:
        del self._postings[term]
        del self._df[term]
    if len(self._retired) < self._max_cached:
      self._retired[key] = entry
    self.removes += 1
    self.version += 1

  def sync(self, docs: Iterable[tuple[DocKey, str]], counts: Optional[Callable[[DocKey], tuple[Counter, int]]] = None) -> None:
    """Makes the active set exactly ``docs``: O(new + retired) index work, O(n) key checks.

    ``counts(key)``, when given, supplies a new document's (term counts, length).
    """
    wanted: dict[DocKey, str] = dict(docs)
    active = self._active
    if len(active) > len(wanted) or any(k not in active for k in wanted):
      for key in [k for k in active if k not in wanted]:
        self.remove(key)
      for key, text in wanted.items():
        if key not in active:
          self.add(key, text, counts(key) if counts is not None else None)

  def df(self, term: str) -> int:
    return self._df.get(term, 0)

  def idf(self, term: str) -> float:
    return lucene_idf(len(self._active), self._df.get(term, 0))

  def scores(
      self, query_terms: Sequence[str], weights: Optional[Sequence[float]] = None, *, base: Optional[dict[DocKey, float]] = None
  ) -> dict[DocKey, float]:
    """BM25 of every active doc matching at least one term; summed in query-term order.

    Summation order is fixed by the query, so a doc's score does not depend on
    the history of the index (floating-point sums are order-sensitive).
    ``base``: the scores of earlier terms (weight 1), continued rather than
    summed again; ``scores(a + b, [1] * len(a) + w)`` equals
    ``scores(b, w, base=scores(a))`` exactly, being the same sums in the same order.
    """
    out: dict[DocKey, float] = dict(base) if base else {}
    if not self._active:
      return out
    avgdl = self.avgdl or 1.0
    k1, b = self.k1, self.b
    for qi, term in enumerate(query_terms):
      posting = self._postings.get(term)
      if not posting:
        continue
      idf = self.idf(term) * (weights[qi] if weights is not None else 1.0)
      for key, tf in posting.items():
        dl = self._active[key][1]
        part = idf * tf / (tf + k1 * (1.0 - b + b * dl / avgdl))
        out[key] = out.get(key, 0.0) + part
    return out

  def expansion_terms(
      self, doc_scores: dict[DocKey, float], exclude: Iterable[str], *, docs: int, terms: int
  ) -> list[tuple[str, float]]:
    """Pseudo-relevance feedback (RM3-like): the terms that best characterise the top docs.

    Each term of the ``docs`` best-scoring documents is weighted by
    ``sum(score/top * tf/len) * idf``; the ``terms`` heaviest not in ``exclude``
    come back with weights in (0, 1], heaviest first (ties by term).
    """
    df, idf_of_df = self._df, IdfOfDf(len(self._active))

    def feedback(key: DocKey) -> tuple[list[tuple[str, int]], int]:
      tf, length = self._active[key]
      return [(t, c) for t, c in tf.items() if df[t] > 1], length

    return feedback_terms(
        best_documents(doc_scores, docs), set(exclude), terms, feedback, lambda ts: [idf_of_df[df[t]] for t in ts]
    )


def best_documents(doc_scores: dict, n: int) -> list[tuple]:
  """The ``n`` best (key, score) pairs, ties by key."""
  return heapq.nsmallest(n, doc_scores.items(), key=lambda kv: (-kv[1], kv[0]))


def feedback_terms(
    top: Sequence[tuple[Any, float]],
    exclude: Collection[str],
    n: int,
    feedback: Callable[[Any], tuple[list[tuple[str, int]], int]],
    idfs: Callable[[list[str]], list[float]],
) -> list[tuple[str, float]]:
  """Pseudo-relevance feedback (RM3-like), shared by every index.

  ``top``: the feedback documents as (key, score), best first; ``feedback(key)``:
  a document's (term, count) pairs for the terms in more than one document,
  and its length; ``idfs(terms)``: their idfs. Each term not in ``exclude`` is
  weighted by ``sum(score/top * tf/len) * idf``; the ``n`` heaviest come back
  with weights in (0, 1], heaviest first (ties by term).
  """
  if not top or top[0][1] <= 0.0:
    return []
  best = top[0][1]
  acc: dict[str, float] = {}
  for key, score in top:  # each term sums over the documents in rank order
    pairs, length = feedback(key)
    ratio, length = score / best, max(1, length)
    get = acc.get
    acc.update({term: get(term, 0.0) + ratio * c / length for term, c in pairs if term not in exclude})
  weighted = heaviest_terms([(t, v * x) for (t, v), x in zip(acc.items(), idfs(list(acc)))], n)
  if not weighted:
    return []
  norm = weighted[0][1]
  return [(t, v / norm) for t, v in weighted]


class SmallBM25:
  """``IncrementalBM25``'s scores for a handful of documents, built from scratch per call.

  A memory layer of ~20 items changes every call (memory rotates, recall
  copies come and go); adding and retiring their postings in an index costs
  more than scoring the few documents directly from their cached features
  (``DocFeatures``: term counts, length, term set). Same formulas, same
  summation order (query-term order per document), so the numbers are
  identical. An instance may be reused while the document set is unchanged.
  """

  def __init__(self, docs: dict[DocKey, "DocFeatures"], *, k1: float = 1.2, b: float = 0.75) -> None:
    self.k1 = k1
    self.b = b
    self._docs = docs
    self._df: Counter = Counter(chain.from_iterable(f.tf for f in docs.values()))
    self._n = len(docs)
    self.avgdl = sum(f.length for f in docs.values()) / self._n if self._n else 0.0
    avgdl = self.avgdl or 1.0
    self._norm = {key: k1 * (1.0 - b + b * f.length / avgdl) for key, f in docs.items()}
    """The length part of the BM25 denominator, per document (the same expression as ``scores``)."""
    self._idf_of_df = [lucene_idf(self._n, df) for df in range(self._n + 1)]
    self._feedback: dict[DocKey, tuple[list[tuple[str, int]], int]] = {}

  def __len__(self) -> int:
    return self._n

  def idf(self, term: str) -> float:
    return self._idf_of_df[self._df.get(term, 0)]

  def scores(
      self, query_terms: Sequence[str], weights: Optional[Sequence[float]] = None, *, base: Optional[dict[DocKey, float]] = None
  ) -> dict[DocKey, float]:
    """As ``IncrementalBM25.scores``."""
    out: dict[DocKey, float] = dict(base) if base else {}
    df, idf_of_df = self._df, self._idf_of_df
    # Document-major: with a handful of documents, probing each one's term
    # counts beats building postings. Each document still sums its terms in
    # query order, from its ``base`` score, so the floats are the same.
    terms = []
    for qi, term in enumerate(query_terms):
      n = df.get(term)
      if n:
        terms.append((term, idf_of_df[n] * (weights[qi] if weights is not None else 1.0)))
    if not terms:
      return out
    norms = self._norm
    for key, f in self._docs.items():
      tf = f.tf
      got = None
      for term, idf in terms:
        c = tf.get(term)
        if c:
          if got is None:
            got = out.get(key, 0.0)
          got = got + idf * c / (c + norms[key])
      if got is not None:
        out[key] = got
    return out

  def expansion_terms(
      self, doc_scores: dict[DocKey, float], exclude: Iterable[str], *, docs: int, terms: int
  ) -> list[tuple[str, float]]:
    """As ``IncrementalBM25.expansion_terms``."""
    return feedback_terms(best_documents(doc_scores, docs), set(exclude), terms, self._feedback_terms, self._idfs)

  def _idfs(self, terms: list[str]) -> list[float]:
    df, idf_of_df = self._df, self._idf_of_df
    return [idf_of_df[df[t]] for t in terms]

  def _feedback_terms(self, key: DocKey) -> tuple[list[tuple[str, int]], int]:
    got = self._feedback.get(key)
    if got is None:
      f, df = self._docs[key], self._df
      got = self._feedback[key] = ([(t, c) for t, c in f.tf.items() if df[t] > 1], f.length)
    return got
