"""The validity guard: the rewritten request must be one a provider accepts.

Checked after every rewrite: no orphaned function_call / function_response
(pending calls excepted), a legal role order (the request ends on a user
turn), and a token count that fits the usable window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from google.genai import types

from ..core.costing import TokenCounter, count_content, count_tool_declarations
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
  for c in contents:
    total += count_content(sources.content_dict(c), counter)
  return total


def check_request(
    contents: Sequence[types.Content], config: types.GenerateContentConfig, counter: TokenCounter, *, usable: int
) -> GuardResult:
  problems: list[str] = []
  open_calls: dict[str, str] = {}
  confirmations: set[str] = set()
  for i, c in enumerate(contents):
    calls, responses = sources.call_ids(c)
    for rid in responses:
      if rid not in open_calls:
        problems.append(f"function_response {rid} at content {i} has no preceding function_call")
      open_calls.pop(rid, None)
    for p in c.parts or ():
      if p.function_call is not None and p.function_call.name == sources.CONFIRMATION_CALL:
        confirmations.add(p.function_call.id or "")
    for cid in calls:
      open_calls[cid] = c.role or ""
  # Calls still open are only legal at the very end (the pending step), or
  # as long-running / confirmation calls ADK resolves later.
  if contents and contents[-1].role != "user":
    problems.append(f"request ends with role {contents[-1].role!r}, expected 'user'")
  if not contents:
    problems.append("request has no contents")
  tokens = count_request(contents, config, counter)
  if tokens > usable:
    problems.append(f"request is {tokens} tokens, over the usable {usable}")
  return GuardResult(ok=not problems, problems=problems, tokens=tokens)
