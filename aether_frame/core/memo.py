"""Small memos for values a session computes again and again.

Every call of a session re-sends mostly the same system text, tools and
evidence. These memos make the repeats cheap while keeping memory bounded:
``BoundedMemo`` empties itself at a size cap, ``LastCallMemo`` keeps only what
the previous call used. Values must be immutable (or never mutated).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

MEMO_CHARS = 16_000_000
"""Text a process-wide memo keyed or valued by item text may hold (~16-64 MB): room
for every line of many long sessions, but not for thousands of pasted documents."""


class BoundedMemo:
  """A dict memo emptied when it reaches ``max_entries`` (hot keys come back at once).

  ``max_chars``: also emptied once the text it holds (``text_size`` of each key
  and value) passes this many characters, so a few hundred 100 KB messages
  cannot pin hundreds of megabytes where a count cap alone would allow it.
  """

  __slots__ = ("_entries", "_max", "_max_chars", "_chars")

  def __init__(self, max_entries: int, *, max_chars: Optional[int] = None) -> None:
    self._entries: dict[Hashable, Any] = {}
    self._max = max_entries
    self._max_chars = max_chars
    self._chars = 0

  def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
    value = self._entries.get(key)
    if value is None:
      value = make()
      size = text_size(key) + text_size(value) if self._max_chars is not None else 0
      if len(self._entries) >= self._max or (size and self._chars + size > self._max_chars):
        self._entries.clear()
        self._chars = 0
      self._entries[key] = value
      self._chars += size
    return value

  def clear(self) -> None:
    self._entries.clear()
    self._chars = 0

  def __len__(self) -> int:
    return len(self._entries)

  @property
  def chars(self) -> int:
    """Characters of text held (counted only with ``max_chars``)."""
    return self._chars


def text_size(value: Any) -> int:
  """Characters of the strings in ``value`` (a str, or a tuple of them and of scalars)."""
  if isinstance(value, str):
    return len(value)
  if isinstance(value, tuple):
    return sum(len(v) if isinstance(v, str) else text_size(v) if isinstance(v, tuple) else 0 for v in value)
  return 0


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
