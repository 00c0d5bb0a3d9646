"""Deterministic extractive compressors for the overflow ladder.

No model calls: a compressed item keeps whole sentences of its own text,
chosen by overlap with the query and by position, in their original order,
plus its pointer so the full text can be rehydrated.
"""

from __future__ import annotations

import re
from typing import Callable

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")


def split_sentences(text: str) -> list[str]:
  return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def extractive_summary(text: str, query: str, target_tokens: int, count: Callable[[str], int]) -> str | None:
  """The best sentences that fit ``target_tokens``; ``None`` if not even one fits.

  Sentence score: query-term overlap, then earlier position (leads carry the
  gist). Ties break by position, so the result is deterministic.
  """
  sentences = split_sentences(text)
  if not sentences:
    return None
  q = {w.lower() for w in _WORD.findall(query)}
  scored = []
  for i, s in enumerate(sentences):
    words = {w.lower() for w in _WORD.findall(s)}
    overlap = len(words & q)
    scored.append((-(overlap + (1.0 if i == 0 else 0.0)), i))
  scored.sort()
  chosen: list[int] = []
  for _, i in scored:
    candidate = " ".join(sentences[j] for j in sorted(chosen + [i]))
    if count(candidate + " …") <= target_tokens:
      chosen.append(i)
  if not chosen:
    first = sentences[0]
    words = first.split()
    # Fall back to a word-prefix of the lead sentence, shrinking until it fits.
    lo, hi, best = 1, len(words), None
    while lo <= hi:
      mid = (lo + hi) // 2
      cand = " ".join(words[:mid]) + " …"
      if count(cand) <= target_tokens:
        best, lo = cand, mid + 1
      else:
        hi = mid - 1
    return best
  summary = " ".join(sentences[j] for j in sorted(chosen))
  return summary if len(chosen) == len(sentences) else summary + " …"


_EXAMPLES = re.compile(r"(?is)(?:^|(?<=[\s.;:]))(?:examples?\s*:|for example\b|e\.g\.).*$")


def _trim_description(text: str) -> str:
  return _EXAMPLES.sub("", text).rstrip(" ;:,\n")


def trim_tool_examples(declaration_json: str) -> str:
  """Removes example passages from a tool declaration's descriptions.

  The schema itself (names, types, required fields) is never touched, so
  the trimmed tool is still callable exactly as before.
  """
  import json

  try:
    decl = json.loads(declaration_json)
  except ValueError:
    return declaration_json

  def walk(node):
    if isinstance(node, dict):
      return {k: (_trim_description(v) if k == "description" and isinstance(v, str) else walk(v)) for k, v in node.items()}
    if isinstance(node, list):
      return [walk(v) for v in node]
    return node

  trimmed = walk(decl)
  if trimmed == decl:
    return declaration_json
  return json.dumps(trimmed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
