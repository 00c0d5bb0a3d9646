"""Near-duplicate pairs by term-set Jaccard, for MMR.

MMR needs, for each item, the items it nearly duplicates, and only among the
members of its pool. The rankers find them on demand, exactly:

- ``near_duplicate`` / ``near_duplicate_features``: one pair, after a size
  test and (with ``DocFeatures``) a term-bitmask bound that rules out most
  pairs with integer work;
- ``pair_candidates``: every pair of a small pool, by those tests alone;
- ``PrefixPool``: prefix filtering (Chaudhuri et al., 2006) in a large pool.

``NearDuplicateIndex`` keeps pairs incrementally over a whole document set.
The rankers no longer use it: on chat text its prefix terms are common words
and every new turn met most of the others (19 s of 25 s at ~1,850 turns).
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import Hashable, Iterable


def jaccard(a: frozenset, b: frozenset) -> float:
  if not a or not b:
    return 0.0
  inter = len(a & b)
  return inter / (len(a) + len(b) - inter)


def near_duplicate(a: frozenset, b: frozenset, threshold: float) -> float:
  """``jaccard(a, b)`` when it exceeds ``threshold``, else 0.0.

  Jaccard <= min/max of the sizes, and float division rounds monotonically,
  so the size test never rejects a pair that would pass.
  """
  la, lb = len(a), len(b)
  if not la or not lb:
    return 0.0
  if (la / lb if la < lb else lb / la) <= threshold:
    return 0.0
  inter = len(a & b)
  j = inter / (la + lb - inter)
  return j if j > threshold else 0.0


def near_duplicate_features(a, b, threshold: float) -> float:
  """``near_duplicate`` of two ``DocFeatures``, rejecting most pairs by their signatures.

  With term bitmasks ``ma``, ``mb`` (one bit per hashed term) and ``ca`` terms
  of ``a`` that share a bit with another of its terms, ``|a & b| <=
  popcount(ma & mb) + ca``: a pair whose Jaccard cannot exceed the threshold
  even at that bound is never intersected. Exact either way.
  """
  ta, tb = a.terms, b.terms
  la, lb = len(ta), len(tb)
  if not la or not lb:
    return 0.0
  if (la / lb if la < lb else lb / la) <= threshold:
    return 0.0
  ma, ca = a.signature
  mb, cb = b.signature
  bound = min((ma & mb).bit_count() + min(ca, cb), la, lb)
  if bound / (la + lb - bound) <= threshold:
    return 0.0
  inter = len(ta & tb)
  j = inter / (la + lb - inter)
  return j if j > threshold else 0.0


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
    return tuple(ordered[: prefix_length(len(ordered), self.threshold)])

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
      j = near_duplicate(terms, self._sets[other], self.threshold)
      if j:
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


class PrefixPool:
  """Candidate near-duplicates inside one MMR pool, by prefix filtering.

  Under one global term order, two sets with Jaccard >= t share a term among
  the first ``|x| - ceil(t|x|) + 1`` of each (the prefixes): ``candidates(a)``
  is the bitmask of members whose prefix meets ``a``'s. The ranker orders terms
  by ascending document frequency in the layer's index (then by term), so
  prefixes hold rare words and meet rarely; they depend on that index alone
  and are cached while its documents stay the same.
  """

  __slots__ = ("_prefixes", "_bits", "_masks")

  def __init__(self, prefixes: list[tuple[str, ...]]) -> None:
    self._prefixes = prefixes
    bits: dict[str, int] = {}
    for i, prefix in enumerate(prefixes):
      bit = 1 << i
      for t in prefix:
        bits[t] = bits.get(t, 0) | bit
    self._bits = bits
    self._masks: dict[int, int] = {}

  def candidates(self, a: int) -> int:
    mask = self._masks.get(a)
    if mask is None:
      mask = 0
      bits = self._bits
      for t in self._prefixes[a]:
        mask |= bits[t]
      mask = self._masks[a] = mask & ~(1 << a)
    return mask


def prefix_length(size: int, threshold: float) -> int:
  """How many leading terms of a ``size``-term set every near-duplicate must meet."""
  return max(1, size - math.ceil(threshold * size) + 1) if size else 0


def pair_candidates(feats: list, threshold: float) -> list[int]:
  """For each of a few ``DocFeatures``: a bitmask of the others it may nearly duplicate.

  Every pair passes the size and signature tests of ``near_duplicate_features``
  (cheap integer work, no set intersections); only the survivors can exceed
  the threshold. All zeros, the usual case, means MMR has nothing to penalise.
  Visited smallest first, so each set stops at the first partner too large
  for the size test (the ratio only falls from there).
  """
  out = [0] * len(feats)
  by_size = []
  for i, f in enumerate(feats):
    size = len(f.terms)
    if size:
      by_size.append((size, *f.signature, i))
  by_size.sort(key=itemgetter(0))  # which pairs pass does not depend on the order of equal sizes
  for x, (la, ma, ca, a) in enumerate(by_size):
    for lb, mb, cb, b in by_size[x + 1 :]:
      if la / lb <= threshold:
        break
      bound = (ma & mb).bit_count() + (ca if ca < cb else cb)
      if bound > la:  # la <= lb
        bound = la
      if bound / (la + lb - bound) > threshold:
        out[a] |= 1 << b
        out[b] |= 1 << a
  return out
