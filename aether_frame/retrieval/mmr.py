"""Maximal marginal relevance: near-duplicates must not crowd out other evidence.

``value(i) = lam * rel(i) - (1 - lam) * redundancy(i)``, where redundancy is
the item's highest similarity to anything already picked, counted only above
``threshold`` (the seed-002 "diversity filter": near-duplicates pay the full
MMR penalty, merely related turns pay nothing). Greedy, lazily re-evaluated with a
heap: penalties only grow, so a popped entry whose value is still current is
the true maximum. Values picked are non-increasing, so sorting by them later
reproduces the pick order; ties go to the lower index, as in ``rank_layer``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

Neighbours = Callable[[int], Iterable[tuple[int, float]]]
"""``neighbours(i)`` -> (j, similarity) pairs for every j similar to i (others are 0)."""


@dataclass(frozen=True)
class Pick:
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
    if -neg != current:
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
