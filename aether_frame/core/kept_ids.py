"""``KeptIds``: the ids of the kept conversation, without copying them per call.

A 1M-token window keeps thousands of history groups; copying their ids into a
new list on every call would make a warm compile grow with the tail again.
A ``KeptIds`` is a read-only view of the session's id list (pinned ids first,
then ``ids[start:end]``). The session freezes live views into copies before it
truncates that list, so a pack never changes after it was returned.
"""

from __future__ import annotations

from typing import Iterator, Sequence, overload


class KeptIds(Sequence[str]):
  """A read-only sequence of history group ids; compares equal to the same ids in a list."""

  __slots__ = ("_pinned", "_ids", "_start", "_end", "_shared", "__weakref__")

  def __init__(self, pinned: list[str], ids: list[str], start: int, end: int) -> None:
    self._pinned = pinned
    self._ids = ids
    self._start = start
    self._end = end
    self._shared = True

  def release(self, n: int) -> None:
    """Called before the session's list is cut to ``n`` ids: copies the viewed ids if the cut reaches them."""
    if self._shared and self._end > n:
      self._ids = self._ids[self._start:self._end]
      self._start, self._end, self._shared = 0, len(self._ids), False

  def __len__(self) -> int:
    return len(self._pinned) + self._end - self._start

  @overload
  def __getitem__(self, i: int) -> str: ...

  @overload
  def __getitem__(self, i: slice) -> list[str]: ...

  def __getitem__(self, i):
    if isinstance(i, slice):
      return list(self)[i]
    n = len(self)
    if i < 0:
      i += n
    if not 0 <= i < n:
      raise IndexError("KeptIds index out of range")
    p = len(self._pinned)
    return self._pinned[i] if i < p else self._ids[self._start + i - p]

  def __iter__(self) -> Iterator[str]:
    yield from self._pinned
    ids = self._ids
    for pos in range(self._start, self._end):
      yield ids[pos]

  def __eq__(self, other: object) -> bool:
    if isinstance(other, (KeptIds, list, tuple)):
      return len(self) == len(other) and all(a == b for a, b in zip(self, other))
    return NotImplemented

  __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

  def __repr__(self) -> str:
    return f"KeptIds({list(self)!r})"
