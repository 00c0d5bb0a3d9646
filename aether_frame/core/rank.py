"""The rank stage: order candidates within each layer, deterministically.

A pluggable ``Ranker`` (the hybrid retrieval in ``aether_frame.retrieval``)
scores evidence and memory against the query; the core then sorts stably by
(pinned, priority, score, input order), so equal scores keep input order.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from .items import Item, Layer


class Ranker(Protocol):
  """Scores candidates of one layer against the query.

  Implementations return new ``Item`` objects (``item.model_copy(update=...)``)
  with ``score`` set and ``meta["explain"]`` holding the score components,
  in any order; they must be deterministic and must not drop items (dropping
  is the compiler's job, so every drop is recorded).
  """

  def rank(
      self, query: str, items: Sequence[Item], *, layer: Layer, now: Optional[float]
  ) -> list[Item]: ...


def sort_key(indexed: tuple[int, Item]) -> tuple:
  index, item = indexed
  return (not item.pinned, -item.priority, -item.score, index)


def rank_layer(
    items: Sequence[Item],
    *,
    query: str,
    layer: Layer,
    ranker: Optional[Ranker],
    now: Optional[float],
) -> list[Item]:
  """Best first. Conversation keeps chronological order (recency is its rank)."""
  if layer is Layer.CONVERSATION:
    return list(items)
  scored = list(items)
  if ranker is not None and scored and layer in (Layer.EVIDENCE, Layer.MEMORY):
    by_id = {it.id: it for it in ranker.rank(query, scored, layer=layer, now=now)}
    if set(by_id) != {it.id for it in scored}:
      raise ValueError(f"ranker changed the set of {layer.value} items; rankers must not drop or add items")
    scored = [by_id[it.id] for it in scored]
  return [it for _, it in sorted(enumerate(scored), key=sort_key)]


class HistoryIndex(Protocol):
  """An incremental index over a session's conversation groups, for recall.

  The compiler appends groups as they arrive and asks for the best ``k``
  positions for a query; an efficient index makes warm compiles independent
  of history length.
  """

  def add(self, items: Sequence[Item]) -> None: ...

  def truncate(self, n: int) -> None: ...

  def search(self, query: str, *, k: int, now: Optional[float]) -> list[tuple[int, float, dict]]:
    """Best first: (position, score, explain components)."""
    ...


class ScanHistoryIndex:
  """Adapts any ``Ranker`` into a ``HistoryIndex`` by ranking every group.

  O(history) per search: correct for any ranker, the fallback when the
  ranker offers no index of its own.
  """

  def __init__(self, ranker: Ranker):
    self._ranker = ranker
    self._items: list[Item] = []

  def add(self, items: Sequence[Item]) -> None:
    self._items.extend(items)

  def truncate(self, n: int) -> None:
    del self._items[n:]

  def search(self, query: str, *, k: int, now: Optional[float]) -> list[tuple[int, float, dict]]:
    if k <= 0 or not self._items:
      return []
    pos = {it.id: i for i, it in enumerate(self._items)}
    probes = [it.model_copy(update={"layer": Layer.MEMORY, "pinned": False}) for it in self._items]
    ranked = self._ranker.rank(query, probes, layer=Layer.MEMORY, now=now)
    ranked = sorted(ranked, key=lambda it: (-it.score, pos[it.id]))
    return [(pos[it.id], it.score, dict(it.meta.get("explain", {}))) for it in ranked[:k] if it.score > 0]
