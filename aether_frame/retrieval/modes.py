"""Recall modes (seed 002): pick a strategy from the message itself, automatically.

Rules are keyword cues scored per mode; the mode with the most cue hits wins,
ties going to the earlier mode in ``PRECEDENCE`` (the more consequential
one), and no hit at all means ``general``. Deterministic and cheap: it runs
on every model call.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Iterable, Optional

from .text import PLAIN_WORDS
from .weights import MODES

PRECEDENCE: tuple[str, ...] = ("decision", "workflow", "project", "people", "conversation", "general")

_CUES: dict[str, tuple[str, ...]] = {
    "decision": (
        r"decid\w*", r"decision\w*", r"chose", r"choose", r"chosen", r"should (?:we|i)",
        r"trade-?offs?", r"lessons?(?: learned)?", r"rules?", r"policy", r"approv\w*",
        r"risk\w*", r"deploy\w*", r"delet\w*", r"drop (?:the|a) \w+", r"migrat\w*",
        r"why did (?:we|you|i)", r"go with", r"agreed", r"rollback", r"irreversible",
    ),
    "workflow": (
        r"how (?:do|can|should) (?:i|we|you)", r"how to", r"steps?", r"process", r"procedure",
        r"workflow", r"checklist", r"runbook", r"recipe", r"set ?up", r"configure",
        r"install", r"as usual", r"the usual way", r"routine",
    ),
    "project": (
        r"project\w*", r"repo\w*", r"codebase", r"implement\w*", r"feature\w*", r"milestone\w*",
        r"roadmap", r"bug\w*", r"sprint", r"deadline\w*", r"dependenc\w*", r"module\w*",
        r"build", r"release\w*", r"ticket\w*", r"issue #?\d+", r"pull request", r"\bpr\b",
        r"goal\w*", r"task\w*",
    ),
    "people": (
        r"who", r"whom", r"whose", r"relationship\w*", r"friend\w*", r"team\w*", r"colleague\w*",
        r"cowork\w*", r"family", r"partner", r"owner\w*", r"owns", r"in charge",
        r"collaborat\w*", r"manager", r"boss", r"person", r"people",
    ),
    "conversation": (
        r"you (?:just )?(?:said|mentioned|told me)", r"as i (?:just )?said", r"earlier",
        r"above", r"just now", r"previous (?:message|answer|reply)", r"that last",
        # Possessive (``*+``): the same matches, but "go on" before a long run of spaces that
        # does not end the text is no longer tried at every split of the run (quadratic).
        r"go on(?=\s*+[.!?]*+\s*+$)", r"continue(?=\s*+[.!?]*+\s*+$)", r"what about", r"and then",
        r"you were saying",
        r"back to", r"like i said", r"same as before",
    ),
}

_COMPILED = {
    mode: re.compile(r"\b(?:" + "|".join(cues) + r")\b", re.I) for mode, cues in _CUES.items()
}


def _start(cue: str) -> Optional[str]:
  """The letters every match of ``cue`` starts with: its leading literal run, minus a last
  letter made optional by ``?``, ``*`` or ``{`` (None: no such run)."""
  body = cue.removeprefix(r"\b")
  m = re.match(r"[a-z]+", body)
  if not m:
    return None
  optional = body[m.end() : m.end() + 1] in ("?", "*", "{")
  return m.group(0)[:-1] if optional else m.group(0)


def _starts(cues: tuple[str, ...]) -> Optional[tuple[str, ...]]:
  """What a match of any of ``cues`` starts with (no run that another run begins); None if unknown."""
  runs = {_start(cue) for cue in cues}
  if None in runs or "" in runs:
    return None
  return tuple(sorted(r for r in runs if not any(r != o and r.startswith(o) for o in runs)))


_STARTS = {mode: _starts(cues) for mode, cues in _CUES.items()}


def _modes_starting(word: str) -> tuple[str, ...]:
  """Modes one of whose cues may start at a word ``word`` (a run of theirs begins it), memoised."""
  got = _STARTING.get(word)
  if got is None:
    if len(_STARTING) > 100_000:
      _STARTING.clear()
    got = _STARTING[word] = tuple(m for m, runs in _STARTS.items() if runs is not None and word.startswith(runs))
  return got


_STARTING: dict[str, tuple[str, ...]] = {}
_RUN_AT = {
    mode: re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, runs)) + ")")
    for mode, runs in _STARTS.items()
    if runs is not None
}
"""Where a word that begins with one of the mode's runs starts (``_STARTS``)."""


def _count(pattern: re.Pattern, query: str, at: Iterable[int]) -> int:
  """``len(pattern.findall(query))`` when every match starts at an offset in ``at`` (ascending).

  The leftmost match at or after the last one's end is then the first such
  offset where the regex matches: the same matches as ``findall``.
  """
  n = end = 0
  for i in at:
    if i >= end:
      m = pattern.match(query, i)
      if m:
        n += 1
        end = m.end()
  return n


def mode_scores(query: str, words: Optional[AbstractSet[str]] = None) -> dict[str, int]:
  """Cue hits per mode (for explanations and tests).

  A cue matches between word boundaries, so in ASCII text a match starts
  where a word of ``query.lower()`` does, and that word begins with the cue's
  leading letters (``_STARTS``): each mode's (slow) regex is tried only at
  such offsets, and not at all when there are none. ``words``: those words,
  when the caller has them already.
  """
  if not query.isascii():
    return {mode: len(pattern.findall(query)) for mode, pattern in _COMPILED.items()}
  lower = query.lower()
  if words is None:
    words = set(PLAIN_WORDS(lower))
  possible: set[str] = set()
  for word in words:
    possible.update(_modes_starting(word))
  out = {}
  for mode, pattern in _COMPILED.items():
    if _STARTS[mode] is None:
      out[mode] = len(pattern.findall(query))
    elif mode in possible:
      # One scan for the runs' word starts: searching for every distinct word
      # instead ("step1 step2 ...") read the text once per word (1 s for 100 KB).
      out[mode] = _count(pattern, query, (m.start() for m in _RUN_AT[mode].finditer(lower)))
    else:
      out[mode] = 0
  return out


def detect_mode(query: str, words: Optional[AbstractSet[str]] = None) -> str:
  """One of ``MODES``: the mode with the most cue hits; ``general`` if none."""
  scores = mode_scores(query, words)
  best = max(scores.values(), default=0)
  if best == 0:
    # A very short message without content words is usually a follow-up.
    if len(query.split()) <= 3 and re.search(r"\b(?:it|that|this|those|them|why|and|so)\b", query, re.I):
      return "conversation"
    return "general"
  for mode in PRECEDENCE:
    if scores.get(mode, 0) == best:
      assert mode in MODES
      return mode
  return "general"
