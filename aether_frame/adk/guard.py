"""The validity guard: the rewritten request must be one a provider accepts.

Checked after every rewrite: no orphaned function_call / function_response
(pending calls excepted), a legal role order (the request ends on a user
turn), and a token count that fits the usable window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from google.genai import types

from ..core.costing import TokenCounter, count_tool_declarations
from . import sources


@dataclass
class GuardResult:
  ok: bool
  problems: list[str] = field(default_factory=list)
  tokens: int = 0


def count_request(contents: Sequence[types.Content], config: types.GenerateContentConfig, counter: TokenCounter) -> int:
  """Our tokenizer's count of the whole request: system + tools + contents."""
  total = counter.count(sources.system_text(config)) if config.system_instruction else 0
  decls = [
      d.model_dump(mode="json", exclude_none=True)
      for tool in (config.tools or ())
      if isinstance(tool, types.Tool)
      for d in (tool.function_declarations or ())
  ]
  total += count_tool_declarations(decls, counter)
  return total + sources.contents_tokens(contents, counter)


def check_request(
    contents: Sequence[types.Content],
    config: types.GenerateContentConfig,
    counter: TokenCounter,
    *,
    usable: int,
    pending: frozenset[str] = frozenset(),
) -> GuardResult:
  """``pending``: call ids that had no response in the original request either.

  The fit check recounts every content of the rewritten request itself, so
  it holds even if the compiler's view of the history were stale.
  """
  problems: list[str] = []
  open_calls: dict[str, int] = {}
  for i, c in enumerate(contents):
    calls, responses = sources.call_ids(c)
    for rid in responses:
      if rid not in open_calls:
        problems.append(f"function_response {rid} at content {i} has no preceding function_call")
      elif open_calls[rid] != i - 1:
        problems.append(f"function_response {rid} at content {i} does not directly follow its call")
      open_calls.pop(rid, None)
    for cid in calls:
      open_calls[cid] = i
  for cid in sorted(set(open_calls) - pending):
    problems.append(f"function_call {cid} lost its function_response")
  if not contents:
    problems.append("request has no contents")
  elif contents[-1].role != "user":
    problems.append(f"request ends with role {contents[-1].role!r}, expected 'user'")
  tokens = count_request(contents, config, counter)
  if tokens > usable:
    problems.append(f"request is {tokens} tokens, over the usable {usable}")
  return GuardResult(ok=not problems, problems=problems, tokens=tokens)


def pending_calls(contents: Sequence[types.Content]) -> frozenset[str]:
  """Call ids with no response anywhere in ``contents`` (pending / long-running)."""
  calls: set[str] = set()
  answered: set[str] = set()
  for c in contents:
    cs, rs = sources.call_ids(c)
    calls.update(cs)
    answered.update(rs)
  return frozenset(calls - answered)
