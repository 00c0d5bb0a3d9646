"""Small memos for values a session computes again and again.

Every call of a session re-sends mostly the same system text, tools and
evidence. These memos make the repeats cheap while keeping memory bounded:
``BoundedMemo`` empties itself at a size cap, ``LastCallMemo`` keeps only what
the previous call used. Values must be immutable (or never mutated).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable


class BoundedMemo:
  """A dict memo emptied when it reaches ``max_entries`` (hot keys come back at once)."""

  __slots__ = ("_entries", "_max")

  def __init__(self, max_entries: int) -> None:
    self._entries: dict[Hashable, Any] = {}
    self._max = max_entries

  def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
    value = self._entries.get(key)
    if value is None:
      if len(self._entries) >= self._max:
        self._entries.clear()
      value = self._entries[key] = make()
    return value

  def clear(self) -> None:
    self._entries.clear()

  def __len__(self) -> int:
    return len(self._entries)


class LastCallMemo:
  """A memo that keeps only what the previous call used (``next_call`` starts a call).

  Bounded by one call's entries however long the session runs, and still a
  hit for everything that recurs from one call to the next.
  """

  __slots__ = ("_prev", "_cur")

  def __init__(self) -> None:
    self._prev: dict[Hashable, Any] = {}
    self._cur: dict[Hashable, Any] = {}

  def get(self, key: Hashable) -> Any:
    value = self._cur.get(key)
    if value is None:
      value = self._prev.get(key)
      if value is not None:
        self._cur[key] = value
    return value

  def put(self, key: Hashable, value: Any) -> None:
    self._cur[key] = value

  def next_call(self) -> None:
    self._prev, self._cur = self._cur, {}

  def __len__(self) -> int:
    return len(self._prev.keys() | self._cur.keys())
