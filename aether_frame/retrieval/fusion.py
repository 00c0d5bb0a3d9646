"""Fusing ranked lists and scores: reciprocal-rank fusion and max-normalised weighting.

Both return plain floats in [0, 1] per item index so they can sit next to the
other signals of the multi-signal score. Ties in a ranking are broken by
index, never by dict or set order.
"""

from __future__ import annotations

from typing import Mapping, Sequence


def max_normalise(scores: Sequence[float]) -> list[float]:
  """``s / max(s)``; all zeros (or negatives) stay zero. Keeps BM25's ratios intact."""
  top = max(scores, default=0.0)
  if top <= 0.0:
    return [0.0] * len(scores)
  return [max(0.0, s) / top for s in scores]


def min_max_normalise(scores: Sequence[float]) -> list[float]:
  """``(s - min) / (max - min)``: for cosines, whose floor is not zero."""
  if not scores:
    return []
  lo, hi = min(scores), max(scores)
  if hi <= lo:
    return [0.0] * len(scores)
  return [(s - lo) / (hi - lo) for s in scores]


def ranks(scores: Sequence[float], *, positive_only: bool = True) -> list[int | None]:
  """1-based rank of each index by descending score (ties by index); None if not ranked."""
  order = sorted(
      (i for i, s in enumerate(scores) if s > 0.0 or not positive_only), key=lambda i: (-scores[i], i)
  )
  out: list[int | None] = [None] * len(scores)
  for r, i in enumerate(order, start=1):
    out[i] = r
  return out


def rrf(rankings: Mapping[str, Sequence[int | None]], weights: Mapping[str, float], k: int = 60) -> list[float]:
  """Weighted reciprocal-rank fusion, scaled so an item ranked first everywhere scores 1.

  ``score_i = sum_s w_s / (k + rank_s(i)) / sum_s (w_s / (k + 1))``; an
  unranked item contributes nothing for that list.
  """
  names = sorted(rankings)
  n = len(next(iter(rankings.values()))) if rankings else 0
  best = sum(weights.get(s, 0.0) / (k + 1) for s in names)
  if best <= 0.0:
    return [0.0] * n
  out = []
  for i in range(n):
    total = 0.0
    for s in names:
      r = rankings[s][i]
      if r is not None:
        total += weights.get(s, 0.0) / (k + r)
    out.append(total / best)
  return out


def weighted(components: Mapping[str, Sequence[float]], weights: Mapping[str, float]) -> list[float]:
  """``sum_s w_s * c_s(i) / sum_s w_s``: a convex mix of already-normalised signals."""
  names = sorted(components)
  n = len(next(iter(components.values()))) if components else 0
  total_w = sum(weights.get(s, 0.0) for s in names)
  if total_w <= 0.0:
    return [0.0] * n
  return [sum(weights.get(s, 0.0) * components[s][i] for s in names) / total_w for i in range(n)]
