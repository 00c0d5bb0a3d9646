"""Per-content and per-query work, done once and shared.

The same text reaches the rankers many times: a history group is indexed by
the recall index and comes back as a ``recall:`` copy under another id every
call, and memory items rotate through a small pool. Analysis depends only on
the index text, so it is cached by content hash (shared by a ranker and its
children); query analysis depends only on the query string (and ``now`` for
time ranges), so it is memoised per query. Both caches are bounded LRUs.
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict
from typing import Any, Callable, Hashable, Optional

from .modes import detect_mode
from .temporal import RUN, TimeRange, has_time_expression, is_when_question, parse_time_range, time_expression_from_words
from .text import _WORD, analyze
from .weights import RetrievalWeights

ND = 6
"""Digits every score component is rounded to (determinism across platforms)."""

CONVERSATIONAL_KINDS = frozenset({"recall", "turn", "pending", "conversation"})
"""Kinds whose items form a timeline (adjacency and continuity apply)."""

_WORDS = re.compile(r"[a-z0-9]+")


def rnd(x: float) -> float:
  return round(x, ND) + 0.0  # + 0.0 turns -0.0 into 0.0


class LRU:
  """A small bounded mapping; the least recently used entry goes first."""

  __slots__ = ("_data", "maxsize", "hits", "misses")

  def __init__(self, maxsize: int) -> None:
    self._data: OrderedDict = OrderedDict()
    self.maxsize = maxsize
    self.hits = 0
    self.misses = 0

  def __len__(self) -> int:
    return len(self._data)

  def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
    data = self._data
    try:
      value = data[key]
    except KeyError:
      self.misses += 1
      value = data[key] = make()
      if len(data) > self.maxsize:
        data.popitem(last=False)
      return value
    self.hits += 1
    data.move_to_end(key)
    return value


SIGNATURE_BITS = 1024

_TERMS: dict[str, Optional[str]] = {}
_NONE = object()


def analyze_fast(text: str, lower: Optional[str] = None) -> list[str]:
  """``text.analyze`` with a per-word memo: the same terms, without re-stemming every word.

  ``analyze`` treats each regex match on its own (split at the apostrophe,
  stop word, suffixes, final "e"), so running it on the match alone and
  remembering the answer gives the identical list.
  """
  memo = _TERMS
  out = []
  for match in _WORD.findall(text.lower() if lower is None else lower):
    term = memo.get(match, _NONE)
    if term is _NONE:
      if len(memo) > 200_000:
        memo.clear()
      found = analyze(match)
      term = memo[match] = found[0] if found else None
    if term is not None:
      out.append(term)
  return out


class DocFeatures:
  """Query-independent features of one index text: BM25 counts, term set, priors."""

  __slots__ = ("tf", "length", "terms", "salience", "_text", "_time", "_sig")

  def __init__(self, text: str) -> None:
    lower = text.lower()
    terms = analyze_fast(text, lower)
    self.tf: Counter = Counter(terms)
    self.length = len(terms)
    self.terms = frozenset(self.tf)
    # Content-bearing turns state things; "haha, thanks!" does not.
    self.salience = rnd(min(1.0, len(self.terms) / 16.0))
    # Decided from the words when they suffice (most texts); the regex waits for first use.
    self._time = time_expression_from_words(text, set(RUN.findall(lower)) if text.isascii() else None)
    self._text: Optional[str] = text if self._time is None else None
    self._sig: Optional[tuple[int, int]] = None

  @property
  def time_expr(self) -> bool:
    """The text states a time; only "when" questions ask, so it is found on first use."""
    if self._time is None:
      self._time = has_time_expression(self._text or "")
      self._text = None
    return self._time

  @property
  def signature(self) -> tuple[int, int]:
    """(bitmask of hashed terms, terms that collided): bounds a shared-term count cheaply."""
    if self._sig is None:
      mask = 0
      for t in self.terms:
        mask |= 1 << (hash(t) % SIGNATURE_BITS)
      self._sig = (mask, len(self.terms) - mask.bit_count())
    return self._sig


class QueryInfo:
  """Everything ``explain`` derives from the query string alone."""

  __slots__ = ("text", "lower", "words", "mode", "ew", "profile", "qterms", "qset", "when", "_spans")

  def __init__(self, query: str, weights: RetrievalWeights) -> None:
    self.text = query
    self.lower = query.lower()
    self.words = frozenset(_WORDS.findall(self.lower))
    self.mode = detect_mode(query)
    self.ew = weights.for_mode(self.mode)
    self.profile = weights.modes.get(self.mode)
    self.qterms: list[str] = list(dict.fromkeys(analyze_fast(query)))
    self.qset = frozenset(self.qterms)
    self.when = is_when_question(query)
    self._spans: dict[Optional[float], Optional[TimeRange]] = {}

  def span(self, ref_now: Optional[float]) -> Optional[TimeRange]:
    """``parse_time_range(query, ref_now)``, memoised (a session's ``now`` moves slowly)."""
    try:
      return self._spans[ref_now]
    except KeyError:
      if len(self._spans) > 8:
        self._spans.clear()
      out = self._spans[ref_now] = parse_time_range(self.text, ref_now)
      return out

  def names(self, author: str) -> bool:
    """The author (or their first name) appears in the query."""
    parts = _author_parts(author)
    return bool(parts) and (parts[0] in self.words or author.lower() in self.lower)


_PARTS: dict[str, list[str]] = {}


def _author_parts(author: str) -> list[str]:
  parts = _PARTS.get(author)
  if parts is None:
    if len(_PARTS) > 4096:
      _PARTS.clear()
    parts = _PARTS[author] = _WORDS.findall(author.lower())
  return parts


def num(value: Any) -> Optional[float]:
  """A finite number from item meta, or None (meta is free-form JSON)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  value = float(value)
  return value if math.isfinite(value) else None
