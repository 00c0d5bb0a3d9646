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
