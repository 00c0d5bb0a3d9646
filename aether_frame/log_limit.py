"""Keyed, rate-limited log lines for conditions that repeat on every model call.

A fault or an outage that recurs on every call must neither flood the log
(thousands of identical tracebacks) nor go quiet for good after its first
line: an operator alerting on errors would see one line at start-up and
nothing for next week's outage. Each key logs at once, then at most once per
``interval`` while it keeps recurring, saying how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

REPEAT_INTERVAL_S = 600.0
"""A condition still recurring is reported again after this many seconds."""
MAX_KEYS = 1000
"""Keys remembered (the most recently seen), so a long-lived process does not grow."""


class RateLimitedLog:
  """``log(key, ...)`` logs at once, then again only ``interval`` seconds after the key's last line."""

  def __init__(self, logger: logging.Logger, *, interval: float = REPEAT_INTERVAL_S, max_keys: int = MAX_KEYS,
               clock: Callable[[], float] = time.monotonic):
    self.logger = logger
    self.interval = interval
    self.max_keys = max_keys
    self._clock = clock
    self._keys: OrderedDict[str, list[float | int]] = OrderedDict()
    """key → [when its last line was logged, occurrences held back since]."""
    self._lock = threading.Lock()  # (threads: sync ``Runner.run``)

  def log(self, key: str, level: int, msg: str, *args: Any, exc_info: Any = None) -> bool:
    """Logs unless ``key`` logged within ``interval``; True if it logged."""
    now = self._clock()
    with self._lock:
      seen = self._keys.get(key)
      if seen is not None:
        self._keys.move_to_end(key)
        if now - seen[0] < self.interval:
          seen[1] += 1
          return False
        held_back = int(seen[1])
        seen[0], seen[1] = now, 0
      else:
        held_back = 0
        self._keys[key] = [now, 0]
        if len(self._keys) > self.max_keys:
          self._keys.popitem(last=False)
    if held_back:
      msg += " (%d more like this since the last report, %.0f s or more ago)"
      args = (*args, held_back, self.interval)
    self.logger.log(level, msg, *args, exc_info=exc_info)
    return True

  def forget(self, prefix: str) -> None:
    """Keys starting with ``prefix`` log at once next time (their condition ended: a new one is news)."""
    with self._lock:
      for key in [k for k in self._keys if k.startswith(prefix)]:
        del self._keys[key]

  def __len__(self) -> int:
    return len(self._keys)

