"""Errors raised by the Redis stores.

Each error names the Redis key involved, because "something is wrong in Redis"
is not actionable on a server holding millions of keys.
"""

from __future__ import annotations

from aether_frame.core.errors import AetherFrameError


class RedisStoreError(AetherFrameError, RuntimeError):
  """Base class: a Redis store operation failed; `key` names where."""

  def __init__(self, message: str, *, key: str | None = None) -> None:
    super().__init__(message)
    self.key = key


class CorruptDataError(RedisStoreError):
  """Data exists at `key` but cannot be read back (bad JSON, wrong type,
  missing fields). Raised instead of returning None so data is never hidden."""

  def __init__(self, key: str, detail: str) -> None:
    super().__init__(
        f"Corrupt or unreadable data at Redis key {key!r}: {detail}", key=key
    )
    self.detail = detail


class StoreUnavailableError(RedisStoreError, ConnectionError):
  """Redis could not be reached (connection refused, dropped, timed out or
  still loading its AOF) while running `operation` on `key`."""

  def __init__(
      self, operation: str, key: str, cause: BaseException, hint: str = ""
  ) -> None:
    message = (
        f"Redis unavailable during {operation} on key {key!r}:"
        f" {type(cause).__name__}: {cause}."
    )
    if hint:
      message += " " + hint
    super().__init__(message, key=key)
    self.operation = operation


class DuplicateEventIdError(RedisStoreError):
  """A different event with the same id is already stored in the session;
  appending it would make the event id ambiguous."""
