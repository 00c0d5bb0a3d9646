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
import threading
from collections import Counter, OrderedDict
from typing import Any, Callable, Hashable, Optional

from .modes import detect_mode
from .temporal import TimeRange, has_time_expression, is_when_question, parse_time_range
from .text import PLAIN_WORDS, analyze, words
from .weights import RetrievalWeights

ND = 6
"""Digits every score component is rounded to (determinism across platforms)."""

CONVERSATIONAL_KINDS = frozenset({"recall", "turn", "pending", "conversation"})
"""Kinds whose items form a timeline (adjacency and continuity apply)."""



def rnd(x: float) -> float:
  return round(x, ND) + 0.0  # + 0.0 turns -0.0 into 0.0


class LRU:
  """A small bounded mapping; the least recently used entry goes first.

  ``max_cost``: entries also go, oldest first, while their summed ``cost(value)``
  is above it (the newest always stays), so a cap sized for short turns does not
  let thousands of large documents stay in memory.
  """

  __slots__ = ("_data", "maxsize", "hits", "misses", "_cost", "max_cost", "_costs", "total_cost", "_lock")

  def __init__(self, maxsize: int, *, max_cost: Optional[int] = None, cost: Optional[Callable[[Any], int]] = None) -> None:
    self._data: OrderedDict = OrderedDict()
    self.maxsize = maxsize
    self.hits = 0
    self.misses = 0
    self._cost = cost if max_cost is not None else None
    self.max_cost = max_cost
    self._costs: dict = {}
    self.total_cost = 0
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self._data)

  def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
    data = self._data
    try:
      value = data[key]
    except KeyError:
      self.misses += 1
      value = data[key] = make()
      if self._cost is not None:
        self._charge(key, value)
      elif len(data) > self.maxsize:
        data.popitem(last=False)
      return value
    self.hits += 1
    try:
      data.move_to_end(key)
    except KeyError:  # evicted meanwhile by another thread (sessions share the analysis caches)
      pass
    return value

  def _charge(self, key: Hashable, value: Any) -> None:
    data, costs = self._data, self._costs
    c = self._cost(value)
    with self._lock:  # misses only; the running total must not drift under threads
      if data.get(key) is not value:  # evicted or replaced by another thread since it went in
        return
      self.total_cost += c - costs.get(key, 0)
      costs[key] = c
      while len(data) > 1 and (len(data) > self.maxsize or self.total_cost > self.max_cost):
        try:
          old, _ = data.popitem(last=False)
        except KeyError:  # emptied meanwhile by another thread
          break
        self.total_cost -= costs.pop(old, 0)


SIGNATURE_BITS = 1024


class _TermMemo(dict):
  """Word (``str`` or ASCII ``bytes``, see ``text.words``) -> its ``analyze`` term, or None."""

  def __missing__(self, word):
    if len(self) > 200_000:
      self.clear()
    found = analyze(word.decode() if isinstance(word, bytes) else word)
    term = self[word] = found[0] if found else None
    return term


_TERMS = _TermMemo()


def analyze_fast(text: str) -> list[str]:
  """``text.analyze`` with a per-word memo: the same terms, without re-stemming every word.

  ``analyze`` treats each regex match on its own (split at the apostrophe,
  stop word, suffixes, final "e"), so running it on the match alone and
  remembering the answer gives the identical list; looking the words up with
  ``map`` keeps the per-word work in C.
  """
  return list(filter(None, map(_TERMS.__getitem__, words(text))))


class DocFeatures:
  """Query-independent features of one index text: BM25 counts, term set, priors.

  Only the counts are computed up front: a recall index analyses every turn of
  a long history, and reads the term set, salience and time expression of a
  few candidates per search.
  """

  __slots__ = ("tf", "length", "_terms", "_salience", "_text", "_time", "_sig")

  def __init__(self, text: str) -> None:
    found = words(text)
    tf = Counter(map(_TERMS.__getitem__, found))  # stop words count under None
    self.length = len(found) - tf.pop(None, 0)
    self.tf = tf
    self._terms: Optional[frozenset] = None
    self._salience: Optional[float] = None
    self._text = text
    self._time: Optional[bool] = None
    self._sig: Optional[tuple[int, int]] = None

  @property
  def cost(self) -> int:
    """Rough bytes held: the counts and term set (~110 per distinct term) and the text until read."""
    return 256 + 112 * len(self.tf) + (len(self._text) if self._text is not None else 0)

  @property
  def terms(self) -> frozenset:
    if self._terms is None:
      self._terms = frozenset(self.tf)
    return self._terms

  @terms.setter
  def terms(self, value: frozenset) -> None:
    self._terms = value

  @property
  def salience(self) -> float:
    """Content-bearing turns state things; "haha, thanks!" does not."""
    if self._salience is None:
      self._salience = rnd(min(1.0, len(self.terms) / 16.0))
    return self._salience

  @property
  def time_expr(self) -> bool:
    """The text states a time; only "when" questions ask, so it is found on first use."""
    if self._time is None:
      self._time = has_time_expression(self._text)
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


CUE_CHARS = 2_000
"""A long message's mode, "when" and time-range cues are read from its first and
last this many characters: that is where its question is ("here is the log:
... why did it fail?"). The middle of a pasted log or document is full of
timestamps and cue words that are data, not the question, and reading them
made query analysis of a 100 KB message cost ~10x its tokenization."""


def cue_view(query: str) -> str:
  """``query``, or its head and tail (cut at whitespace, so no word is split into a false cue)."""
  if len(query) <= 2 * CUE_CHARS:
    return query
  head, tail = query[:CUE_CHARS], query[-CUE_CHARS:]
  cut = head.rsplit(None, 1)
  head = cut[0] if len(cut) == 2 else head
  cut = tail.split(None, 1)
  tail = cut[1] if len(cut) == 2 else tail
  return f"{head}\n\n{tail}"


class QueryInfo:
  """Everything ``explain`` derives from the query string alone.

  BM25 terms and named authors come from the whole query; mode, "when" and
  time range from ``cue_view(query)``.
  """

  __slots__ = ("text", "lower", "words", "cue", "cue_words", "mode", "ew", "profile", "qterms", "qset", "when", "_spans")

  def __init__(self, query: str, weights: RetrievalWeights) -> None:
    self.text = query
    self.lower = query.lower()
    self.words = frozenset(PLAIN_WORDS(self.lower))
    self.cue = cue_view(query)
    self.cue_words = self.words if self.cue is query else frozenset(PLAIN_WORDS(self.cue.lower()))
    self.mode = detect_mode(self.cue, self.cue_words)
    self.ew = weights.for_mode(self.mode)
    self.profile = weights.modes.get(self.mode)
    self.qterms: list[str] = list(dict.fromkeys(analyze_fast(query)))
    self.qset = frozenset(self.qterms)
    self.when = is_when_question(self.cue, self.cue_words)
    self._spans: dict[Optional[float], Optional[TimeRange]] = {}

  def span(self, ref_now: Optional[float]) -> Optional[TimeRange]:
    """``parse_time_range`` of the cue view, memoised (a session's ``now`` moves slowly)."""
    try:
      return self._spans[ref_now]
    except KeyError:
      if len(self._spans) > 8:
        self._spans.clear()
      out = self._spans[ref_now] = parse_time_range(self.cue, ref_now, self.cue_words)
      return out

  def names(self, author: str) -> bool:
    """The author (or their first name) appears in the query, as a word of its own."""
    pattern = _author_pattern(author)
    return pattern is not None and pattern.search(self.lower) is not None


_NAME_WORD = re.compile(r"[^\W_]+")
_UNSPACED = re.compile("[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
"""Thai, kana, CJK ideographs, Hangul: written without spaces between words (or with
particles glued on), so a name there is found as it stands."""
_PATTERNS: dict[str, Optional[re.Pattern]] = {}


def _author_pattern(author: str) -> Optional[re.Pattern]:
  """The author's full name or first name, on word boundaries: "Ed" is not named by
  "placed", nor "Al" by "always". A name in any script (``PLAIN_WORDS`` saw only a-z)."""
  pattern = _PATTERNS.get(author, _MISSING)
  if pattern is _MISSING:
    if len(_PATTERNS) > 4096:
      _PATTERNS.clear()
    lowered = " ".join(author.lower().split())
    parts = _NAME_WORD.findall(lowered)
    pieces = []
    for name in sorted({lowered, parts[0]} if parts else set()):
      if _UNSPACED.search(name):
        pieces.append(re.escape(name))
      else:
        pieces.append(r"(?<![^\W_])" + re.escape(name) + r"(?![^\W_])")
    pattern = _PATTERNS[author] = re.compile("|".join(pieces)) if pieces else None
  return pattern


_MISSING = object()


def num(value: Any) -> Optional[float]:
  """A finite number from item meta, or None (meta is free-form JSON)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  try:
    value = float(value)
  except OverflowError:  # an int past float's range (JSON integers are unbounded)
    return None
  return value if math.isfinite(value) else None
