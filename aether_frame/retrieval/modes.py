"""Recall modes (seed 002): pick a strategy from the message itself, automatically.

Rules are keyword cues scored per mode; the mode with the most cue hits wins,
ties going to the earlier mode in ``PRECEDENCE`` (the more consequential
one), and no hit at all means ``general``. Deterministic and cheap: it runs
on every model call.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Optional

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
        r"go on(?=\s*[.!?]*\s*$)", r"continue(?=\s*[.!?]*\s*$)", r"what about", r"and then",
        r"you were saying",
        r"back to", r"like i said", r"same as before",
    ),
}

_COMPILED = {
    mode: re.compile(r"\b(?:" + "|".join(cues) + r")\b", re.I) for mode, cues in _CUES.items()
}


def _needs(cue: str) -> tuple[tuple[str, bool], ...]:
  """Words every match of ``cue`` contains: its leading literal words, as (text, whole word?).

  A word followed by a space (not an optional one), ``\\b``, a lookahead or the
  end of the cue is whole; one followed by anything else (``\\w*``, ``?``, ``-``)
  is only a prefix (minus a last letter made optional by ``?``).
  """
  cue = cue.removeprefix(r"\b")
  out = []
  while True:
    m = re.match(r"[a-z]+", cue)
    if not m:
      break
    run = m.group(0)
    rest = cue[len(run):]
    if rest == "" or rest.startswith((r"\b", "(?=")) or (rest.startswith(" ") and rest[1:2] not in ("?", "*", "+", "{")):
      out.append((run, True))
      if not rest.startswith(" "):
        break
      cue = rest[1:]
      continue
    out.append((run[:-1] if rest[:1] in ("?", "*", "{") else run, False))
    break
  return tuple(out)


def _plan(cues: tuple[str, ...]) -> tuple[frozenset, tuple[str, ...], tuple[frozenset, ...]]:
  """(single whole words, word prefixes, multi-word sets): any present means the mode may match."""
  singles, prefixes, multis = set(), [], []
  for cue in cues:
    needs = _needs(cue)
    if not needs:
      return frozenset(), ("",), ()  # no literal to look for: always run the regex
    if len(needs) == 1:
      text, whole = needs[0]
      (singles.add(text) if whole else prefixes.append(text))
    elif all(whole for _, whole in needs):
      multis.append(frozenset(t for t, _ in needs))
    else:
      prefixes.append(needs[0][0])  # conservative: the first word as a prefix
  return frozenset(singles), tuple(prefixes), tuple(multis)


_PLANS = {mode: _plan(cues) for mode, cues in _CUES.items()}
_WORD = re.compile(r"[a-z0-9]+")


def _may_match(plan, words: set[str]) -> bool:
  singles, prefixes, multis = plan
  if not singles.isdisjoint(words):
    return True
  if prefixes and any(w.startswith(prefixes) for w in words):
    return True
  return any(m <= words for m in multis)


def mode_scores(query: str, words: Optional[AbstractSet[str]] = None) -> dict[str, int]:
  """Cue hits per mode (for explanations and tests).

  A cue matches between word boundaries, so in ASCII text its literal words
  are words of ``query.lower()``; a mode none of whose cues has its words
  present cannot match, and its (slow) regex is skipped. ``words``: those words,
  when the caller has them already.
  """
  if not query.isascii():
    words = None
  elif words is None:
    words = set(_WORD.findall(query.lower()))
  out = {}
  for mode in PRECEDENCE:
    if mode not in _COMPILED:
      continue
    if words is not None and not _may_match(_PLANS[mode], words):
      out[mode] = 0
    else:
      out[mode] = len(_COMPILED[mode].findall(query))
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
