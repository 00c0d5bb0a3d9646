"""Near-duplicate pairs by term-set Jaccard, maintained incrementally.

MMR needs, for each item, the items it nearly duplicates. Jaccard over
content terms does not depend on corpus statistics, so pairs can be found
once, when a document arrives, and kept. Candidates come from prefix
filtering (Chaudhuri et al., 2006): under one fixed global term order, two
sets with Jaccard >= t share a term among the first ``|x| - ceil(t*|x|) + 1``
terms of each; the order puts long (usually rare) terms first so postings
stay short. Exact: every pair above the threshold is found.
"""

from __future__ import annotations

import math
from typing import Hashable, Iterable


def jaccard(a: frozenset, b: frozenset) -> float:
  if not a or not b:
    return 0.0
  inter = len(a & b)
  return inter / (len(a) + len(b) - inter)


def _order(term: str) -> tuple[int, str]:
  return (-len(term), term)


class NearDuplicateIndex:
  """Keeps every pair of active documents whose Jaccard exceeds ``threshold``."""

  def __init__(self, threshold: float) -> None:
    if not 0.0 <= threshold < 1.0:
      raise ValueError("threshold must be in [0, 1)")
    self.threshold = threshold
    self._sets: dict[Hashable, frozenset] = {}
    self._prefix: dict[Hashable, tuple[str, ...]] = {}
    self._postings: dict[str, dict[Hashable, None]] = {}
    self._pairs: dict[Hashable, dict[Hashable, float]] = {}

  def __contains__(self, key: Hashable) -> bool:
    return key in self._sets

  def _prefix_of(self, terms: frozenset) -> tuple[str, ...]:
    ordered = sorted(terms, key=_order)
    size = len(ordered) - math.ceil(self.threshold * len(ordered)) + 1
    return tuple(ordered[: max(1, size)])

  def add(self, key: Hashable, terms: frozenset) -> None:
    if key in self._sets:
      return
    prefix = self._prefix_of(terms) if terms else ()
    candidates: dict[Hashable, None] = {}
    for t in prefix:
      posting = self._postings.setdefault(t, {})
      candidates.update(posting)
      posting[key] = None
    for other in candidates:
      j = jaccard(terms, self._sets[other])
      if j > self.threshold:
        self._pairs.setdefault(key, {})[other] = j
        self._pairs.setdefault(other, {})[key] = j
    self._sets[key] = terms
    self._prefix[key] = prefix

  def remove(self, key: Hashable) -> None:
    if key not in self._sets:
      return
    del self._sets[key]
    for t in self._prefix.pop(key):
      posting = self._postings[t]
      del posting[key]
      if not posting:
        del self._postings[t]
    for other in self._pairs.pop(key, {}):
      partners = self._pairs[other]
      del partners[key]
      if not partners:
        del self._pairs[other]

  def sync(self, docs: Iterable[tuple[Hashable, frozenset]]) -> None:
    wanted = dict(docs)
    for key in [k for k in self._sets if k not in wanted]:
      self.remove(key)
    for key, terms in wanted.items():
      self.add(key, terms)

  def pairs(self, key: Hashable) -> dict[Hashable, float]:
    """Near-duplicates of ``key`` with their Jaccard (empty if none)."""
    return self._pairs.get(key, {})
