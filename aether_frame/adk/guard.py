"""The validity guard: the rewritten request must be one a provider accepts.

Checked after every rewrite: no orphaned function_call / function_response
(pending calls excepted), a legal role order (the request ends on a user
turn, or on the turn ADK itself ended it on), and a token count that fits the
usable window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from google.genai import types

from ..core.costing import TokenCounter, count_parts, count_tool_declarations
from . import sources


@dataclass
class GuardResult:
  ok: bool
  problems: list[str] = field(default_factory=list)
  tokens: int = 0


def count_request(contents: Sequence[types.Content], config: types.GenerateContentConfig, counter: TokenCounter) -> int:
  """Our tokenizer's count of the whole request: system + response schema + tools + contents."""
  total = counter.count(sources.system_text(config)) if config.system_instruction else 0
  media = sources.system_media(config)
  if media:
    total += count_parts([sources.part_dict(p) for p in media], counter)
  schema = sources.response_schema_text(config)
  if schema:
    total += counter.count(schema)
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
    last_role: str = "user",
) -> GuardResult:
  """``pending``: ``pending_calls`` of the original request; those may stay open.

  ``last_role``: the role the original request ended on. ADK ends a
  LoopAgent's next iteration on the agent's own reply; the rewrite keeps that
  ending, and only a request the rewrite made end otherwise is illegal.

  The fit check recounts every content of the rewritten request itself, so
  it holds even if the compiler's view of the history were stale.
  """
  problems: list[str] = []
  ledger = sources.OpenCalls()
  for i, c in enumerate(contents):
    calls, responses = sources.call_ids(c)
    for rid in responses:
      where = ledger.answer(rid)
      if where is None:
        problems.append(f"function_response {rid} at content {i} has no preceding function_call")
      elif where != i - 1:
        problems.append(f"function_response {rid} at content {i} does not directly follow its call")
    for cid in calls:
      ledger.call(cid, i)
  for label in sorted(set(_labels(ledger.remaining())) - pending):
    problems.append(f"function_call {label} lost its function_response")
  if not contents:
    problems.append("request has no contents")
  elif contents[-1].role != last_role:
    problems.append(f"request ends with role {contents[-1].role!r}, expected {last_role!r}")
  tokens = count_request(contents, config, counter)
  if tokens > usable:
    problems.append(f"request is {tokens} tokens, over the usable {usable}")
  return GuardResult(ok=not problems, problems=problems, tokens=tokens)


def pending_calls(contents: Sequence[types.Content]) -> frozenset[str]:
  """Labels of the calls no later response answers (pending / long-running).

  Paired in order, as ``check_request`` pairs them: with Gemini's stripped
  ids, a ``long_job`` answered earlier must not hide a pending ``long_job``.
  """
  return frozenset(_labels(sources.unanswered_calls(contents)))


def pending_labels(ledger: sources.OpenCalls) -> frozenset[str]:
  """``pending_calls`` of the contents ``ledger`` walked."""
  return frozenset(_labels(ledger.remaining()))


def _labels(open_calls: Sequence[tuple[int, str]]) -> list[str]:
  """``key`` for a key's first open call, ``key#n`` for its n-th.

  Calls to one tool share a key once ids are stripped, so each open call is
  labelled by its rank: a request with two open ``long_job`` calls is not
  excused by an original with one.
  """
  seen: dict[str, int] = {}
  out = []
  for _, key in open_calls:
    seen[key] = n = seen.get(key, 0) + 1
    out.append(key if n == 1 else f"{key}#{n}")
  return out
