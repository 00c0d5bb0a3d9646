"""Budgeted selection: fill a layer's budget with its best items, in rank order.

This is the one selection routine for EVIDENCE and MEMORY, used by the
compiler and by ``benchmarks/locomo_recall.py`` alike, so what the benchmark
measures is what the plugin sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .items import Item


@dataclass
class Selection:
  kept: list[Item] = field(default_factory=list)
  """In rank order (best first)."""
  dropped: list[Item] = field(default_factory=list)
  used: int = 0


def select_within_budget(ranked: Sequence[Item], budget: int) -> Selection:
  """Greedy in rank order; an item that does not fit is skipped, not cut.

  Skipping (rather than stopping) lets a short lower-ranked item use the
  space a long higher-ranked one could not, which matters at small budgets.
  Pinned items are always kept; the caller guarantees they fit.
  Every item needs ``tokens`` set.
  """
  out = Selection()
  for item in ranked:
    cost = item.tokens or 0
    if item.pinned:
      out.kept.append(item)
      out.used += cost
      continue
    if out.used + cost <= budget:
      out.kept.append(item)
      out.used += cost
    else:
      out.dropped.append(item)
  return out
