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


_JOIN_SLACK = 2
"""Tokens a sentence may merge away where it joins its neighbours (a lower bound on what it adds)."""


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
  chosen = _greedy_fit(sentences, [i for _, i in scored], target_tokens, count)
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


_MAX_NEAR_MISSES = 32
"""Whole-summary counts in a row that may fail before ``_greedy_fit`` stops trying."""


def _greedy_fit(sentences: list[str], order: list[int], target: int, count: Callable[[str], int]) -> list[int]:
  """The sentences, tried in ``order``, that fit ``target`` with the summary (as positions).

  Exactly the greedy "add it if the joined summary still fits", without counting
  the whole summary for every sentence (quadratic: minutes for thousands of
  sentences). A sentence adds about its own count to the summary, within
  ``_JOIN_SLACK`` tokens where it meets its neighbours: one that fits by the upper
  bound is taken, one that cannot by the lower bound is skipped, and only the ones
  in between are counted in place. The result is checked by a real count; should
  the bounds ever fail, the plain greedy runs instead.

  Near the target every short sentence is "in between", and each is a count of the
  whole summary: a 100 KB text of "a. a. a. ..." took 15 s. After
  ``_MAX_NEAR_MISSES`` such counts in a row fail, the rest are skipped (the summary
  is then within a few tokens of the target anyway).
  """
  costs = [count(s) for s in sentences]
  chosen: list[int] = []
  empty = count(" …")
  used, exact = empty, True  # the summary's count with its " …" (an upper bound when not exact)
  misses = 0

  def joined(extra: list[int]) -> str:
    return " ".join(sentences[j] for j in sorted(chosen + extra)) + " …"

  for i in order:
    if exact and costs[i] + used - _JOIN_SLACK > target:
      continue
    if used + costs[i] + _JOIN_SLACK <= target:
      chosen.append(i)
      used, exact = used + costs[i] + _JOIN_SLACK, False
      continue
    if not exact:
      used, exact = count(joined([])), True
      if used > target:  # a bound failed
        return _plain_greedy(sentences, order, target, count)
      if costs[i] + used - _JOIN_SLACK > target:
        continue
    n = count(joined([i]))
    if n <= target:
      chosen.append(i)
      used, exact, misses = n, True, 0
    else:
      misses += 1
      if misses >= _MAX_NEAR_MISSES:
        break
  if not exact and count(joined([])) > target:  # a bound failed
    return _plain_greedy(sentences, order, target, count)
  return chosen


def _plain_greedy(sentences: list[str], order: list[int], target: int, count: Callable[[str], int]) -> list[int]:
  chosen: list[int] = []
  for i in order:
    if count(" ".join(sentences[j] for j in sorted(chosen + [i])) + " …") <= target:
      chosen.append(i)
  return chosen


_EXAMPLE = re.compile(r"(?i)(?:^|(?<=[\s.;:,(\[]))(?:examples?[ \t]*:|for example\b|e\.g\.)")
_NOT_A_SENTENCE_END = re.compile(r"(?i)\b(?:e\.g|i\.e)\.$")
_BLOCK_LINE = re.compile(r"[ \t]|[-*\u2022][ \t]|>>>|\d+[.)][ \t]")
_OPEN, _CLOSE, _QUOTES = "([{", ")]}", "'\"\u2019\u201d"
_SEPARATORS = ",;\u2013\u2014-"


def _ends_sentence(text: str, i: int) -> bool:
  """Whether the ``.!?`` at ``i`` ends a sentence (not ``e.g.``, not ``a.b``)."""
  if _NOT_A_SENTENCE_END.search(text[max(0, i - 5):i + 1]):
    return False
  j = i + 1
  while j < len(text) and text[j] in _QUOTES:
    j += 1
  return j == len(text) or text[j].isspace()


def _clause_end(text: str, i: int) -> int:
  """Where the example starting at ``i`` ends: a sentence end, ``;``, a newline
  or a bracket opened before it.

  It errs short: a left-over example fragment costs a few tokens, a deleted
  instruction changes what the model does.
  """
  depth = 0
  for j in range(i, len(text)):
    c = text[j]
    if c == "\n" or (c in ".!?" and _ends_sentence(text, j)):
      return j
    if c in _OPEN:
      depth += 1
    elif c in _CLOSE:
      if depth == 0:
        return j
      depth -= 1
    elif c == ";" and depth == 0:
      return j
  return len(text)


def _example_span(text: str, m: re.Match) -> tuple[int, int] | None:
  """The span to delete for the example marker ``m``: its block, sentence,
  brackets or clause, and nothing after that; ``None`` if it is no example."""
  before = m.start()
  while before and text[before - 1] in " \t":
    before -= 1
  at_line_start = before == 0 or text[before - 1] == "\n"
  if (m.group().lower().startswith("for") and not at_line_start and text[before - 1] not in ".!?([:" + _SEPARATORS
      and text[m.end():m.end() + 1] not in (",", ":")):
    # "never call this for example data" is prose, not an example clause.
    return None
  if at_line_start or text[before - 1] in ".!?":
    rest_of_line = text[m.end():].split("\n", 1)[0]
    if m.group().endswith(":") and not rest_of_line.strip():
      # An "Examples:" header: it and the indented or bulleted lines under it.
      end = text.find("\n", m.end())
      while end != -1:
        nxt = text.find("\n", end + 1)
        line = text[end + 1:] if nxt == -1 else text[end + 1:nxt]
        if not (line.strip() and _BLOCK_LINE.match(line)):
          break
        end = nxt
      if end == -1:
        return m.start(), len(text)
      return m.start(), end + 1 if at_line_start else end
    # A sentence that is an example goes whole, with its terminator.
    end = _clause_end(text, m.end())
    if end < len(text) and text[end] == "\n":
      return m.start(), end + 1 if at_line_start else end
    if end < len(text) and text[end] not in _CLOSE:
      end += 1
    while end < len(text) and text[end] in " \t":
      end += 1
    return m.start(), end
  end = _clause_end(text, m.end())
  if text[before - 1] in "([":
    # "(e.g. ...)": the brackets go too (an unclosed one as well).
    start = before - 1
    while start and text[start - 1] in " \t":
      start -= 1
    return start, end + 1 if end < len(text) and text[end] in _CLOSE else end
  # "..., e.g. ...": the clause and its leading separator; the terminator stays.
  start = before
  if text[start - 1] in _SEPARATORS:
    start -= 1
    while start and text[start - 1] in " \t":
      start -= 1
  return start, end


def _trim_description(text: str) -> str:
  """``text`` without its example clauses, sentences and blocks.

  Only the examples go: the sentence end and every instruction around them
  stay, so the description still says what the tool must and must not do.
  """
  out, pos, changed = text, 0, False
  while (m := _EXAMPLE.search(out, pos)) is not None:
    span = _example_span(out, m)
    if span is None:
      pos = m.end()
      continue
    start, end = span
    left, right = out[:start], out[end:]
    if left.endswith(":") and right[:1] in (".", ";", "!", "?"):
      left = left[:-1]
    if not right or right[0] == "\n":
      left = left.rstrip(" \t")
    out, pos, changed = left + right, len(left), True
  return out.strip().rstrip(" ;:,") if changed else text


def trim_tool_examples(declaration_json: str) -> str:
  """Removes example passages from a tool declaration's descriptions.

  The schema itself (names, types, required fields) is never touched and
  only the example clauses leave the descriptions, so the trimmed tool is
  still callable exactly as before and keeps its usage rules. A declaration
  without examples comes back byte-identical.
  """
  import json

  try:
    decl = json.loads(declaration_json)
  except (ValueError, RecursionError):  # not JSON, or nested past the recursion limit: left as it is
    return declaration_json

  def walk(node):
    if isinstance(node, dict):
      return {k: (_trim_description(v) if k == "description" and isinstance(v, str) else walk(v)) for k, v in node.items()}
    if isinstance(node, list):
      return [walk(v) for v in node]
    return node

  try:
    trimmed = walk(decl)
  except RecursionError:
    return declaration_json
  if trimmed == decl:
    return declaration_json
  return json.dumps(trimmed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
