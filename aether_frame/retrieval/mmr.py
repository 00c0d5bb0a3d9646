"""Maximal marginal relevance: near-duplicates must not crowd out other evidence.

``value(i) = lam * rel(i) - (1 - lam) * redundancy(i)``, where redundancy is
the item's highest similarity to anything already picked, counted only above
``threshold`` (the seed-002 "diversity filter": near-duplicates pay the full
MMR penalty, merely related turns pay nothing). Greedy, lazily re-evaluated with a
heap: penalties only grow, so a popped entry whose value is still current is
the true maximum. Values picked are non-increasing, so sorting by them later
reproduces the pick order; ties go to the lower index, as in ``rank_layer``.
``mmr_lazy`` makes the same picks but compares a pair only when it can matter.
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, NamedTuple, Sequence

Neighbours = Callable[[int], Iterable[tuple[int, float]]]
"""``neighbours(i)`` -> (j, similarity) pairs for every j similar to i (others are 0)."""


class Pick(NamedTuple):
  """One item in MMR order (a named tuple: cheap to make)."""

  index: int
  value: float
  redundancy: float
  similar_to: int | None
  """The already-picked item this one is most similar to (when redundant)."""


def redundancy(similarity: float, threshold: float) -> float:
  """Classic MMR's similarity term, gated: below ``threshold`` an item is not redundant."""
  if similarity <= threshold:
    return 0.0
  return min(1.0, similarity)


def mmr(
    relevance: Sequence[float],
    neighbours: Neighbours,
    *,
    lam: float,
    threshold: float,
    ndigits: int = 6,
) -> list[Pick]:
  """Every index of ``relevance`` in MMR order, with its value at pick time."""
  n = len(relevance)
  red = [0.0] * n
  src: list[int | None] = [None] * n
  picked = [False] * n

  def value(i: int) -> float:
    return round(lam * relevance[i] - (1.0 - lam) * red[i], ndigits)

  heap = [(-value(i), i) for i in range(n)]
  heapq.heapify(heap)
  out: list[Pick] = []
  while heap:
    neg, i = heapq.heappop(heap)
    if picked[i]:
      continue
    current = value(i)
    if current < -neg:  # values only fall; ``!=`` re-pushed a NaN forever
      heapq.heappush(heap, (-current, i))
      continue
    picked[i] = True
    out.append(Pick(i, current, round(red[i], ndigits), src[i]))
    for j, sim in neighbours(i):
      if j != i and not picked[j]:
        r = redundancy(sim, threshold)
        if r > red[j]:
          red[j] = r
          src[j] = i
  return out


def dense_neighbours(matrix: Sequence[Sequence[float]]) -> Neighbours:
  """Neighbours from a full similarity matrix (small pools and tests)."""

  def neighbours(i: int) -> Iterable[tuple[int, float]]:
    return ((j, s) for j, s in enumerate(matrix[i]) if j != i)

  return neighbours


Similarity = Callable[[int, int], float]
"""``similarity(picked, other)``: the similarity of a pair (0 when not similar)."""

Candidates = Callable[[int], int]
"""``candidates(i)``: a bitmask of every j that may be similar to i (bit j set); a
superset is fine, a missing j is not."""


def mmr_lazy(
    relevance: Sequence[float],
    similarity: Similarity,
    *,
    lam: float,
    threshold: float,
    ndigits: int = 6,
    candidates: Candidates | None = None,
    stop_below: int | None = None,
) -> list[Pick]:
  """``mmr`` with redundancy computed when an item is popped, not when a neighbour is picked.

  An item's redundancy is the max over the picks so far (the earliest pick
  wins a tie, as in ``mmr``), so the picks are exactly ``mmr``'s; but only
  pairs (popped item, earlier pick) are compared, only those ``candidates``
  allows, and with ``stop_below=k`` the loop ends once k picks are made and
  nothing left can tie the k-th: a top-k needs about k x k comparisons.
  """
  n = len(relevance)
  red = [0.0] * n
  src: list[int | None] = [None] * n
  seen = [0] * n
  picked = [False] * n
  order: list[int] = []
  rank_of = [0] * n
  upto = [0]
  """``upto[r]``: bitmask of the first r picks."""

  def value(i: int) -> float:
    return round(lam * relevance[i] - (1.0 - lam) * red[i], ndigits)

  heap = [(-value(i), i) for i in range(n)]
  heapq.heapify(heap)
  out: list[Pick] = []
  while heap:
    neg, i = heap[0]
    if stop_below is not None and len(out) >= stop_below and -neg < out[stop_below - 1].value:
      break
    heapq.heappop(heap)
    if picked[i]:
      continue
    done = len(order)
    if seen[i] < done:
      if candidates is None:
        new = order[seen[i]:]
      else:
        mask = candidates(i) & (upto[done] ^ upto[seen[i]])
        new = []
        while mask:
          low = mask & -mask
          new.append(low.bit_length() - 1)
          mask ^= low
        if len(new) > 1:
          new.sort(key=rank_of.__getitem__)
      r_i, s_i = red[i], src[i]
      for a in new:
        r = redundancy(similarity(a, i), threshold)
        if r > r_i:
          r_i, s_i = r, a
      red[i], src[i] = r_i, s_i
      seen[i] = done
    current = value(i)
    if current < -neg:  # as in ``mmr``: a NaN relevance must not loop forever
      heapq.heappush(heap, (-current, i))
      continue
    picked[i] = True
    rank_of[i] = len(order)
    order.append(i)
    upto.append(upto[-1] | (1 << i))
    out.append(Pick(i, current, round(red[i], ndigits), src[i]))
  return out
