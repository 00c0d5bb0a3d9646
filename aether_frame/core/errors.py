"""``AetherFrameError``: the base of every error the library raises on purpose.

One ``except AetherFrameError`` catches them all, and each also keeps its
standard base (``ValueError``, ``LookupError``, ...) for callers that catch
those. Errors cross process boundaries (multiprocessing, Celery, Ray) and
get copied: those pickle an exception by calling its class with ``args``,
which fails for an ``__init__`` with other parameters, so the base restores
the instance as it was instead (its message and attributes).
"""

from __future__ import annotations

from typing import Any


class AetherFrameError(Exception):
  """Base class of aether-frame's errors (picklable whatever a subclass's ``__init__`` takes)."""

  def __reduce__(self) -> tuple[Any, ...]:
    return _restore, (type(self), self.args, dict(self.__dict__))


def _restore(cls: type, args: tuple, state: dict) -> AetherFrameError:
  # ``cls.__new__`` is the first base's, which refuses a class laid out by another
  # builtin base (``StoreUnavailableError`` is a RuntimeError and an OSError): use
  # the first ``__new__`` along the MRO that accepts it.
  for base in cls.__mro__:
    new = base.__dict__.get("__new__")
    if new is not None:
      try:
        error = new(cls)
        break
      except TypeError:
        continue
  error.args = args
  error.__dict__.update(state)
  return error
