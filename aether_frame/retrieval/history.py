"""The recall index over a session's conversation groups (``HistoryIndex`` for the compiler).

The compiler keeps one per session and asks it for the best ``k`` older
turns for each query. It owns a child ``HybridRanker`` (same weights, same
embedder and vector cache as its parent) so that its BM25 index follows the
session's history alone: turns are appended, never re-indexed, and the
memory-layer calls of the shared parent ranker do not churn it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from aether_frame.core.items import Item

if TYPE_CHECKING:
  from .ranker import HybridRanker


class RecallIndex:
  """Incremental ``HistoryIndex``: add / truncate / search, scored by a ``HybridRanker``."""

  def __init__(self, ranker: "HybridRanker") -> None:
    self._ranker = ranker
    self._items: list[Item] = []

  def __len__(self) -> int:
    return len(self._items)

  def add(self, items: Sequence[Item]) -> None:
    self._items.extend(items)

  def truncate(self, n: int) -> None:
    del self._items[n:]

  def search(self, query: str, *, k: int, now: Optional[float]) -> list[tuple[int, float, dict[str, Any]]]:
    """Best first: (position, score, explain); only items with a positive score."""
    if k <= 0 or not self._items:
      return []
    explains = self._ranker.explain(query, self._items, now=now)
    order = sorted(range(len(explains)), key=lambda i: (-explains[i]["score"], i))
    return [(i, explains[i]["score"], explains[i]) for i in order[:k] if explains[i]["score"] > 0.0]
