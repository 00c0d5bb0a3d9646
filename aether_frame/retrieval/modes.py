"""Recall modes (seed 002): pick a strategy from the message itself, automatically.

Rules are keyword cues scored per mode; the mode with the most cue hits wins,
ties going to the earlier mode in ``PRECEDENCE`` (the more consequential
one), and no hit at all means ``general``. Deterministic and cheap: it runs
on every model call.
"""

from __future__ import annotations

import re

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


def mode_scores(query: str) -> dict[str, int]:
  """Cue hits per mode (for explanations and tests)."""
  return {mode: len(_COMPILED[mode].findall(query)) for mode in PRECEDENCE if mode in _COMPILED}


def detect_mode(query: str) -> str:
  """One of ``MODES``: the mode with the most cue hits; ``general`` if none."""
  scores = mode_scores(query)
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
