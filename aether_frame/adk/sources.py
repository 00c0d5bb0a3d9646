"""Turn an ADK request and callback context into compiler candidates.

Only this module and ``plugin.py`` know ADK types. Conversation contents are
grouped so a function_call never travels without its function_response, and
so a pending call or a confirmation request is pinned.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Sequence

from google.genai import types

from ..core.canonical import canonical_json
from ..core.costing import MESSAGE_OVERHEAD, TokenCounter, count_content
from ..core.items import Item, Layer, Provenance, Trust
from .state_schema import KnowledgeItem, PlanState

CONFIRMATION_CALL = "adk_request_confirmation"


def part_dict(part: types.Part) -> dict[str, Any]:
  return part.model_dump(mode="json", exclude_none=True)


def content_dict(content: types.Content) -> dict[str, Any]:
  return content.model_dump(mode="json", exclude_none=True)


_TEXT_ONLY = frozenset({"text"})


def contents_tokens(contents: Sequence[types.Content], counter: TokenCounter) -> int:
  """``sum(count_content(content_dict(c)) for c in contents)``, with one counter call for plain text.

  Dumping a ``Content`` with pydantic costs more than counting it, and the
  guard counts every content of every request. A part whose only field is
  ``text`` dumps to ``{"text": ...}`` (every other ``Part`` field defaults to
  None), so such contents are costed from their texts, in one batch.
  """
  total = 0
  texts: list[str] = []
  for content in contents:
    plain: Optional[list[str]] = []
    for part in content.parts or ():
      if type(part.text) is str and part.__pydantic_fields_set__ <= _TEXT_ONLY and not part.__pydantic_extra__:
        plain.append(part.text)
      else:
        plain = None
        break
    if plain is None:
      total += count_content(content_dict(content), counter)
    else:
      texts.extend(plain)
      total += MESSAGE_OVERHEAD
  return total + (sum(counter.count_many(texts)) if texts else 0)


def fingerprint(content: types.Content) -> str:
  return hashlib.blake2b(canonical_json(content_dict(content)).encode(), digest_size=10).hexdigest()


def has_response(content: types.Content) -> bool:
  return any(p.function_response is not None for p in content.parts or ())


def is_human_user(content: types.Content) -> bool:
  """A user turn that is not a tool result (ADK's invocation boundary)."""
  return content.role == "user" and not has_response(content)


def _texts(content: types.Content) -> list[str]:
  return [p.text for p in content.parts or () if p.text]


def anchor_index(contents: Sequence[types.Content], user_content: Optional[types.Content] = None) -> Optional[int]:
  """The invocation's user turn.

  The content matching the invocation's own user message when it is present
  (after an agent transfer, later user-role "For context:" messages are part
  of the invocation, not the request); otherwise the last human user content.
  """
  if user_content is not None and _texts(user_content):
    want = _texts(user_content)
    for i in range(len(contents) - 1, -1, -1):
      if is_human_user(contents[i]) and _texts(contents[i]) == want:
        return i
  for i in range(len(contents) - 1, -1, -1):
    if is_human_user(contents[i]):
      return i
  return None


def call_ids(content: types.Content) -> tuple[list[str], list[str]]:
  calls, responses = [], []
  for p in content.parts or ():
    if p.function_call is not None:
      calls.append(p.function_call.id or f"name:{p.function_call.name}")
    if p.function_response is not None:
      responses.append(p.function_response.id or f"name:{p.function_response.name}")
  return calls, responses


def _is_pinned_call(content: types.Content, answered: set[str]) -> bool:
  for p in content.parts or ():
    fc = p.function_call
    if fc is None:
      continue
    if fc.name == CONFIRMATION_CALL:
      return True
    if (fc.id or f"name:{fc.name}") not in answered:
      return True
  return False


def group_spans(contents: Sequence[types.Content]) -> list[tuple[int, int]]:
  """[start, end) spans; a content answering earlier calls joins their span."""
  spans: list[list[int]] = []
  open_calls: dict[str, int] = {}
  for i, content in enumerate(contents):
    calls, responses = call_ids(content)
    joined = None
    for rid in responses:
      if rid in open_calls:
        joined = open_calls[rid] if joined is None else min(joined, open_calls[rid])
    if joined is not None:
      # Merge every span from the call's span to here into one group.
      while len(spans) - 1 > joined:
        spans[-2][1] = spans[-1][1]
        spans.pop()
      spans[-1][1] = i + 1
      for cid, idx in list(open_calls.items()):
        if idx > joined:
          open_calls[cid] = joined
    else:
      spans.append([i, i + 1])
    for cid in calls:
      open_calls[cid] = len(spans) - 1
    for rid in responses:
      open_calls.pop(rid, None)
  return [(s, e) for s, e in spans]


@dataclass
class EventInfo:
  timestamp: Optional[float]
  author: Optional[str]
  event_id: Optional[str]


def _text_of(content: types.Content) -> str:
  out = []
  for p in content.parts or ():
    if p.text and not p.thought:
      out.append(p.text)
    elif p.function_call is not None:
      out.append(f"called {p.function_call.name}({canonical_json(p.function_call.args or {})})")
    elif p.function_response is not None:
      out.append(f"{p.function_response.name} returned {canonical_json(p.function_response.response or {})}")
  return " ".join(" ".join(out).split())


def group_item(
    contents: Sequence[types.Content],
    span: tuple[int, int],
    counter: TokenCounter,
    info: Optional[EventInfo],
    answered: set[str],
    fps: Sequence[str],
) -> Item:
  start, end = span
  chunk = contents[start:end]
  parts = [part_dict(p) for c in chunk for p in (c.parts or ())]
  tokens = contents_tokens(chunk, counter)
  author = (info.author if info else None) or chunk[0].role
  ts = info.timestamp if info else None
  stamp = datetime.utcfromtimestamp(ts).strftime("%Y-%m-%d") if ts else "undated"
  pinned = any(_is_pinned_call(c, answered) for c in chunk)
  return Item(
      id=f"t{start}-{fps[start]}",
      layer=Layer.CONVERSATION,
      role=chunk[0].role,
      text=f"[{stamp}] {author}: {_text_of(chunk[0]) if end - start == 1 else ' / '.join(_text_of(c) for c in chunk)}",
      parts=parts,
      tokens=tokens,
      pinned=pinned,
      kind="pending" if pinned else "turn",
      trust=Trust.USER if chunk[0].role == "user" else Trust.TOOL,
      provenance=Provenance(source=info.event_id if info else None, timestamp=ts, author=author),
      meta={"span": [start, end]},
  )


def answered_ids(contents: Sequence[types.Content]) -> set[str]:
  out: set[str] = set()
  for c in contents:
    out.update(call_ids(c)[1])
  return out


def plan_items(plan: Optional[PlanState]) -> list[Item]:
  if plan is None:
    return []
  items = []
  dev = Trust.DEVELOPER
  if plan.role:
    items.append(Item(id="task:role", layer=Layer.TASK, kind="role", text=plan.role, trust=dev, pinned=True))
  items.append(Item(id="task:goal", layer=Layer.TASK, kind="goal", text=plan.goal, trust=dev, pinned=True))
  if plan.step:
    items.append(Item(id=f"task:step:{plan.step_id or 'current'}", layer=Layer.TASK, kind="step", text=plan.step, trust=dev, pinned=True))
  for i, a in enumerate(plan.acceptance):
    items.append(Item(id=f"task:acceptance:{i}", layer=Layer.TASK, kind="acceptance", text=a, trust=dev, pinned=True))
  for i, c in enumerate(plan.constraints):
    items.append(Item(id=f"task:constraint:{i}", layer=Layer.TASK, kind="constraint", text=c, trust=dev, pinned=True))
  return items


def knowledge_items(entries: Sequence[KnowledgeItem]) -> list[Item]:
  return [
      Item(
          id=f"evidence:{e.id or e.uri}",
          layer=Layer.EVIDENCE,
          kind="checklist_evidence" if e.checklist else "evidence",
          text=e.summary,
          score=e.score,
          priority=1 if e.checklist else 0,
          trust=Trust.TOOL,
          provenance=Provenance(source=e.uri, timestamp=e.timestamp),
      )
      for e in entries
  ]


def memory_items(memories: Sequence[Any], *, kind: str = "memory") -> list[Item]:
  """ADK ``MemoryEntry`` objects → MEMORY items (timestamps kept)."""
  out = []
  for n, m in enumerate(memories):
    text = _text_of(m.content) if getattr(m, "content", None) else ""
    ts = _parse_ts(getattr(m, "timestamp", None))
    mid = getattr(m, "id", None) or hashlib.blake2b(f"{ts}|{text}".encode(), digest_size=8).hexdigest()
    out.append(Item(
        id=f"{kind}:{mid}",
        layer=Layer.MEMORY,
        kind=kind,
        text=text,
        priority=1 if kind == "working" else 0,
        trust=Trust.TOOL,
        provenance=Provenance(source=f"memory://{mid}", timestamp=ts, author=getattr(m, "author", None)),
    ))
  return out


def _parse_ts(value: Any) -> Optional[float]:
  if value is None:
    return None
  if isinstance(value, (int, float)):
    return float(value)
  try:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
  except ValueError:
    return None


def artifact_items(keys: Sequence[str], known_uris: set[str], skip: set[str]) -> list[Item]:
  return [
      Item(
          id=f"artifact:{k}", layer=Layer.EVIDENCE, kind="artifact", text=f"artifact {k} (no summary)",
          priority=-1, trust=Trust.TOOL, provenance=Provenance(source=f"artifact://{k}"),
      )
      for k in sorted(keys)
      if k not in skip and f"artifact://{k}" not in known_uris
  ]


def tool_items(declarations: Sequence[types.FunctionDeclaration]) -> list[Item]:
  return [
      Item(
          id=f"tool:{d.name}", layer=Layer.TOOLS, kind="tool",
          text=canonical_json(d.model_dump(mode="json", exclude_none=True)),
          trust=Trust.DEVELOPER, pinned=True, meta={"name": d.name},
      )
      for d in declarations
  ]


def system_text(config: types.GenerateContentConfig) -> str:
  si = config.system_instruction
  if si is None:
    return ""
  if isinstance(si, str):
    return si
  if isinstance(si, types.Content):
    return "\n".join(p.text for p in si.parts or () if p.text)
  if isinstance(si, types.Part):
    return si.text or ""
  if isinstance(si, list):
    return "\n".join(x if isinstance(x, str) else (getattr(x, "text", "") or "") for x in si)
  return str(si)


@dataclass
class EventIndex:
  """fingerprint → (timestamp, author, event id), grown incrementally."""

  seen: int = 0
  by_fp: dict[str, EventInfo] = field(default_factory=dict)

  def update(self, events: Sequence[Any]) -> None:
    if len(events) < self.seen:
      self.seen, self.by_fp = 0, {}
    for ev in events[self.seen:]:
      if ev.content is not None and not getattr(ev, "partial", False):
        self.by_fp.setdefault(fingerprint(ev.content), EventInfo(ev.timestamp, ev.author, ev.id))
    self.seen = len(events)


def now() -> float:
  return time.time()
