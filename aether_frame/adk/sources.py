"""Turn an ADK request and callback context into compiler candidates.

Only this module and ``plugin.py`` know ADK types. Conversation contents are
grouped so a function_call never travels without its function_response (nor
a code result without its code), and so a pending call or a confirmation
request is pinned.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from google.genai import types
from pydantic import BaseModel, TypeAdapter

from ..core.canonical import canonical_json
from ..core.costing import MESSAGE_OVERHEAD, TokenCounter, count_content
from ..core.items import MAX_TIMESTAMP, MIN_TIMESTAMP, Item, Layer, Provenance, Trust
from .state_schema import KnowledgeItem, PlanState

CONFIRMATION_CALL = "adk_request_confirmation"

try:  # the ids ADK gives calls a model sent without one
  from google.adk.utils._function_call_names import AF_FUNCTION_CALL_ID_PREFIX as CLIENT_CALL_ID_PREFIX
except ImportError:  # pragma: no cover - another ADK layout
  CLIENT_CALL_ID_PREFIX = "adk-"

try:  # the opening ADK 2.x gives another agent's relayed turn
  from google.adk.flows.llm_flows.context._fencing import OTHER_AGENT_CONTEXT_PREAMBLE
except ImportError:  # pragma: no cover - older ADK
  OTHER_AGENT_CONTEXT_PREAMBLE = None
# "For context:" alone is what ADK 1.x sends.
_OTHER_AGENT_OPENINGS = frozenset(t for t in ("For context:", OTHER_AGENT_CONTEXT_PREAMBLE) if t)


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
  # surrogatepass: a tool's text may hold a lone surrogate (``os.fsdecode``, half an emoji).
  return hashlib.blake2b(canonical_json(content_dict(content)).encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()


def has_response(content: types.Content) -> bool:
  return any(p.function_response is not None for p in content.parts or ())


def is_human_user(content: types.Content) -> bool:
  """A user turn that is not a tool result (ADK's invocation boundary)."""
  return content.role == "user" and not has_response(content)


def is_other_agent_context(content: types.Content) -> bool:
  """ADK's relay of another agent's turn as a user-role content, not a human turn.

  ADK's contents builder opens such a content with a fixed text part
  (``_OTHER_AGENT_OPENINGS``) and relays each of the agent's parts as a text
  starting ``[<agent>]`` or as the media / code part itself.
  """
  parts = content.parts or ()
  return (
      content.role == "user" and len(parts) >= 2
      and parts[0].text in _OTHER_AGENT_OPENINGS
      and all(p.text is None or p.text.startswith("[") for p in parts[1:])
  )


def anchor_index(contents: Sequence[types.Content], user_content: Optional[types.Content] = None) -> Optional[int]:
  """The invocation's user turn.

  The content equal to the invocation's own user message when it is present,
  found as ADK finds it (``==`` on the whole content, so an image-only message
  matches too); after an agent transfer, later user-role "For context:"
  contents are part of the invocation, not the request. Otherwise the last
  human user content that is not such a relay; and when a relay is all there
  is (an ``include_contents="none"`` agent after another in a sequence sees
  only what the previous agent said), the last relay: it is what the agent answers.
  """
  if user_content is not None:
    for i in range(len(contents) - 1, -1, -1):
      if contents[i] == user_content and is_human_user(contents[i]):
        return i
  relay = None
  for i in range(len(contents) - 1, -1, -1):
    if is_human_user(contents[i]):
      if not is_other_agent_context(contents[i]):
        return i
      if relay is None:
        relay = i
  return relay


def call_ids(content: types.Content) -> tuple[list[str], list[str]]:
  """Pairing keys of the content's calls and responses.

  A call's id, or ``name:<tool>`` when it has none: for Gemini, ADK strips its
  ``adk-`` client ids before the request is built, so every call to one tool
  shares a key and only the order of the contents pairs them.
  """
  calls, responses = [], []
  for p in content.parts or ():
    if p.function_call is not None:
      calls.append(p.function_call.id or f"name:{p.function_call.name}")
    if p.function_response is not None:
      responses.append(p.function_response.id or f"name:{p.function_response.name}")
  return calls, responses


class OpenCalls:
  """The function calls not yet answered, in a walk over contents in order.

  A response answers the latest open call with its key: ADK puts every
  response directly after its call, and where ids are stripped that order is
  the provider's only pairing. Calls are counted, not collected in a set, so
  parallel calls to one tool pair one for one and a tool answered earlier
  does not answer a later pending call.
  """

  def __init__(self):
    self._open: dict[str, list[int]] = {}

  def call(self, key: str, where: int) -> None:
    self._open.setdefault(key, []).append(where)

  def answer(self, key: str) -> Optional[int]:
    """Closes the latest open call with ``key``; returns where it was, or None."""
    stack = self._open.get(key)
    if not stack:
      return None
    where = stack.pop()
    if not stack:
      del self._open[key]
    return where

  def copy(self, where: Optional[Sequence[int]] = None) -> "OpenCalls":
    """A copy; ``where`` maps each recorded position to another (e.g. history index to request position)."""
    out = OpenCalls()
    out._open = {k: [where[i] for i in stack] if where is not None else list(stack) for k, stack in self._open.items()}
    return out

  def walk(self, contents: Sequence[types.Content], start: int = 0) -> "OpenCalls":
    """Pairs ``contents`` (at positions ``start``...) onto the calls open so far; returns itself."""
    for i, content in enumerate(contents, start):
      calls, responses = call_ids(content)
      for rid in responses:
        self.answer(rid)
      for cid in calls:
        self.call(cid, i)
    return self

  def remaining(self) -> list[tuple[int, str]]:
    """``(where, key)`` of every call still open, in order."""
    return sorted((where, key) for key, stack in self._open.items() for where in stack)


def unanswered_calls(contents: Sequence[types.Content]) -> list[tuple[int, str]]:
  """``(content index, key)`` of each call no later response answers (pending calls)."""
  return OpenCalls().walk(contents).remaining()


def _is_pinned(chunk: Sequence[types.Content]) -> bool:
  """A group holding a confirmation request or a pending call.

  Decided within the group: ``group_spans`` puts every response in the group
  of the call it answers, so a call left open in its group is open for good.
  """
  if any(p.function_call is not None and p.function_call.name == CONFIRMATION_CALL for c in chunk for p in c.parts or ()):
    return True
  return bool(unanswered_calls(chunk))


def is_code_result(content: types.Content, result_openings: Sequence[str] = ()) -> bool:
  """A code executor's result, as its own content.

  ADK stores it as a model content of ``code_execution_result`` parts and,
  for an agent with a (non built-in) code executor, sends it to the model as
  one user text opening with the executor's result delimiter (``result_openings``).
  """
  parts = content.parts or ()
  if parts and all(p.code_execution_result is not None for p in parts):
    return True
  return (content.role == "user" and len(parts) == 1 and isinstance(parts[0].text, str)
          and any(o and parts[0].text.startswith(o) for o in result_openings))


def group_spans(contents: Sequence[types.Content], result_openings: Sequence[str] = ()) -> list[tuple[int, int]]:
  """[start, end) spans; a content answering earlier calls joins their span.

  A code result joins the model content before it (the code it ran): alone
  at the front of a trimmed tail it would be output of code the model no
  longer sees, and it reads as a user turn.
  """
  spans: list[list[int]] = []
  ledger = OpenCalls()
  for i, content in enumerate(contents):
    calls, responses = call_ids(content)
    first = None  # the earliest content whose call this one answers
    for rid in responses:
      where = ledger.answer(rid)
      if where is not None and (first is None or where < first):
        first = where
    if first is None and i and contents[i - 1].role == "model" and is_code_result(content, result_openings):
      first = i - 1
    if first is None:
      spans.append([i, i + 1])
    else:
      # Merge every span from the call's span to here into one group.
      while spans[-1][0] > first:
        spans.pop()
      spans[-1][1] = i + 1
    for cid in calls:
      ledger.call(cid, i)
  return [(s, e) for s, e in spans]


@dataclass
class EventInfo:
  timestamp: Optional[float]
  author: Optional[str]
  event_id: Optional[str]


def _text_of(content: types.Content) -> str:
  """A content's words for ranking and recall; calls and results as canonical JSON.

  Arguments and results are read as the provider is sent them (the JSON dump):
  a tool may return a datetime, NaN, bytes or a ``Part``, which plain JSON refuses.
  """
  out = []
  for p in content.parts or ():
    if p.text and not p.thought:
      out.append(p.text)
    elif p.function_call is not None:
      call = part_dict(p)["function_call"]
      out.append(f"called {p.function_call.name}({canonical_json(call.get('args') or {})})")
    elif p.function_response is not None:
      resp = part_dict(p)["function_response"]
      out.append(f"{p.function_response.name} returned {canonical_json(resp.get('response') or {})}")
  return " ".join(" ".join(out).split())


def group_item(
    contents: Sequence[types.Content],
    span: tuple[int, int],
    counter: TokenCounter,
    info: Optional[EventInfo],
    fps: Sequence[str],
) -> Item:
  """One conversation group as an Item; pinned if it holds a pending call or a confirmation.

  Whether a call is answered is decided within its group (see ``_is_pinned``):
  ``group_spans`` always puts a response in its call's group.
  """
  start, end = span
  chunk = contents[start:end]
  parts = [part_dict(p) for c in chunk for p in (c.parts or ())]
  tokens = contents_tokens(chunk, counter)
  author = (info.author if info else None) or chunk[0].role
  ts = event_time(info.timestamp) if info else None
  stamp = datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d") if ts else "undated"
  pinned = _is_pinned(chunk)
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
  """ADK ``MemoryEntry`` objects → MEMORY items (timestamps kept).

  The time is the entry's numeric ``custom_metadata["event_timestamp"]`` when
  it has one (our stores record it): exact, where the ISO string may be in the
  writer's local time (see ``_parse_ts``).
  """
  out = []
  for n, m in enumerate(memories):
    text = _text_of(m.content) if getattr(m, "content", None) else ""
    meta = getattr(m, "custom_metadata", None)
    exact = meta.get("event_timestamp") if isinstance(meta, dict) else None
    ts = _parse_ts(exact) if isinstance(exact, (int, float)) else None
    if ts is None:
      ts = _parse_ts(getattr(m, "timestamp", None))
    mid = getattr(m, "id", None) or hashlib.blake2b(f"{ts}|{text}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
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


def event_time(value: Any) -> Optional[float]:
  """A numeric timestamp as epoch seconds, or None (undated) when it is not one a date can be
  rendered for: NaN, infinite, or outside years 1-9999 (milliseconds, say, from a store or a
  client that sets ``Event.timestamp`` itself). One such event faulted every call of its session."""
  if not isinstance(value, (int, float)) or isinstance(value, bool):
    return None
  try:
    value = float(value)
  except OverflowError:  # an int past float range
    return None
  if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:  # also NaN
    return None
  return value + 0.0  # no -0.0


def _parse_ts(value: Any) -> Optional[float]:
  """An ISO 8601 timestamp as epoch seconds.

  With a zone (``Z``, ``+00:00``) the result is exact. Without one it is read
  as this process's local time, which is what ADK's writers mean
  (``memory_utils.format_timestamp``), but only right when the writer ran in
  the same zone, and the repeated hour at a DST change is ambiguous (the first
  one is taken). ``memory_items`` prefers a numeric ``event_timestamp`` for that.
  """
  if value is None or isinstance(value, bool):
    return None
  if isinstance(value, (int, float)):
    return event_time(value)
  try:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
  except (ValueError, OverflowError, OSError):
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
  """One item per declaration sent; a name declared twice (two toolsets) is charged twice (``tool:x#2``)."""
  seen: dict[str, int] = {}
  out = []
  for d in declarations:
    n = seen[d.name] = seen.get(d.name, 0) + 1
    out.append(Item(
        id=f"tool:{d.name}" if n == 1 else f"tool:{d.name}#{n}", layer=Layer.TOOLS, kind="tool",
        text=canonical_json(d.model_dump(mode="json", exclude_none=True)),
        trust=Trust.DEVELOPER, pinned=True, meta={"name": d.name},
    ))
  return out


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


def system_media(config: Optional[types.GenerateContentConfig]) -> list[types.Part]:
  """The non-text parts of a system instruction given as a Content, Part or list.

  ADK writes a string, but a plugin before ours may attach a file; the rewrite
  keeps it (and the budget charges it) instead of sending the text alone.
  """
  si = config.system_instruction if config is not None else None
  if isinstance(si, types.Content):
    parts = list(si.parts or ())
  elif isinstance(si, types.Part):
    parts = [si]
  elif isinstance(si, list):
    parts = [x for x in si if isinstance(x, types.Part)]
  else:
    return []
  return [p for p in parts if p.text is None and p.model_dump(exclude_none=True)]


def system_parts(config: Optional[types.GenerateContentConfig]) -> list[types.Part]:
  """A system instruction's texts and ``system_media`` parts, in the order given.

  Each text as a part of its own text alone (what ``system_text`` reads of it),
  each file or image as it is; empty texts are left out. The rewrite sends
  these, so a file between two texts stays between them.
  """
  si = config.system_instruction if config is not None else None
  if isinstance(si, types.Content):
    given: list[Any] = list(si.parts or ())
  elif isinstance(si, (types.Part, str)):
    given = [si]
  elif isinstance(si, list):
    given = si
  else:
    return []
  out = []
  for x in given:
    text = x if isinstance(x, str) else getattr(x, "text", None)
    if text:
      out.append(types.Part(text=text))
    elif isinstance(x, types.Part) and x.text is None and x.model_dump(exclude_none=True):
      out.append(x)
  return out


def response_schema_text(config: Optional[types.GenerateContentConfig]) -> str:
  """The request's structured-output schema as canonical JSON ("" if none).

  ADK puts an agent's ``output_schema`` in ``config.response_schema`` (a
  pydantic class, a ``Schema``, a dict or a ``list[...]`` type); the provider
  counts the schema toward the prompt, so the budget must too.
  """
  out: dict[str, Any] = {}
  for name in ("response_schema", "response_json_schema"):
    value = getattr(config, name, None) if config is not None else None
    if value is not None:
      out[name] = _schema_json(value)
  return canonical_json(out) if out else ""


def _schema_json(value: Any) -> Any:
  if isinstance(value, BaseModel):
    return value.model_dump(mode="json", exclude_none=True)
  if isinstance(value, (dict, list, str, int, float, bool)):
    return value
  try:
    return _type_schema(value)  # the same class every call: built once
  except TypeError:  # unhashable: not a type
    return _type_schema.__wrapped__(value)


@functools.lru_cache(maxsize=256)
def _type_schema(value: Any) -> Any:
  """JSON schema of a pydantic class or a typing form (``list[Model]``, ``list[str]``)."""
  if isinstance(value, type) and issubclass(value, BaseModel):
    return value.model_json_schema()
  try:
    return TypeAdapter(value).json_schema()
  except Exception:  # a form pydantic cannot describe: costed by its repr
    return repr(value)


COMPACTION_AUTHOR = "compaction"
"""The author of an ADK compaction summary's turn: a model's summary, said by no participant."""


def _compaction_of(event: Any) -> Any:
  """The event's ``EventCompaction`` when ADK sends it as a summary, else None."""
  compaction = getattr(getattr(event, "actions", None), "compaction", None)
  return compaction if compaction is not None and compaction.compacted_content is not None else None


@dataclass
class EventIndex:
  """fingerprint → (timestamp, author, event id), grown incrementally.

  New events are found after the last one indexed, by id, not by count: with
  ``RunConfig(get_session_config=GetSessionConfig(num_recent_events=N))``
  every invocation loads a window of the same length that has slid, and a
  count-based cursor never indexed its new events (their turns lost their
  timestamps and authors). A session whose last indexed event is gone
  (rewound, replaced) is indexed again from scratch.

  An ADK compaction event has no ``content``: the request carries its
  ``compacted_content`` instead, dated at the end of the range it replaced.
  A rewind event (``Runner.rewind_async``) deletes nothing: ADK drops the
  rewound invocations from later contents, so it counts as a rewrite.

  Loaded events that start at another event (a window that slid) count as a
  rewrite too, and are indexed from scratch: a worker that skipped turns sees
  the window moved by several, and the history's ends can repeat ("continue",
  the same reply) where its middle did not; its index must also be the one a
  fresh worker builds from the same window (the first event of a repeated
  content gives the turn its time and id).
  """

  first_id: Optional[str] = None
  last_id: Optional[str] = None
  by_fp: dict[str, EventInfo] = field(default_factory=dict)
  summaries: set[str] = field(default_factory=set)
  """Fingerprints of compaction summaries."""
  rewrites: int = 0
  """Compaction and rewind events indexed, ever (re-indexing counts them again): each may
  change earlier contents, so an append-only look at the history's ends cannot be trusted."""

  def update(self, events: Sequence[Any]) -> None:
    start = 0
    first = (events[0].id or None) if events else None
    if self.first_id is not None and first != self.first_id:
      self.last_id, self.by_fp, self.summaries = None, {}, set()
      self.rewrites += 1
    self.first_id = first
    if self.last_id is not None:
      for i in range(len(events) - 1, -1, -1):
        if events[i].id == self.last_id:
          start = i + 1
          break
      else:
        self.by_fp, self.summaries = {}, set()
    for ev in events[start:]:
      if getattr(getattr(ev, "actions", None), "rewind_before_invocation_id", None):
        self.rewrites += 1  # ADK leaves the rewound invocations out of later contents
      compaction = _compaction_of(ev)
      if compaction is not None:
        fp = fingerprint(compaction.compacted_content)
        self.summaries.add(fp)
        self.rewrites += 1
        self.by_fp.setdefault(fp, EventInfo(compaction.end_timestamp, COMPACTION_AUTHOR, ev.id))
      elif ev.content is not None and not getattr(ev, "partial", False):
        info = EventInfo(ev.timestamp, ev.author, ev.id)
        forms = [ev.content]
        if _has_client_call_ids(ev.content):
          # ADK sends a model that pairs calls by order its calls and responses with the
          # ``adk-`` ids it gave them stripped (``remove_client_function_call_id``); one that
          # pairs them by id (Anthropic, LiteLLM) with them kept.
          forms.append(_without_client_call_ids(ev.content))
        if any(p.thought for p in ev.content.parts or ()):
          # A planner that rewrites responses (PlanReActPlanner) has ADK send
          # them with their ``thought`` flags cleared.
          forms += [_without_thought_flags(c) for c in forms]
        for content in forms:
          self.by_fp.setdefault(fingerprint(content), info)
    if events:
      self.last_id = events[-1].id or None


def _is_client_id(call: Any) -> bool:
  return call is not None and isinstance(call.id, str) and call.id.startswith(CLIENT_CALL_ID_PREFIX)


def _has_client_call_ids(content: types.Content) -> bool:
  return any(_is_client_id(p.function_call) or _is_client_id(p.function_response) for p in content.parts or ())


def _without_client_call_ids(content: types.Content) -> types.Content:
  """The content as ADK sends it to a model that gave no call ids (a copy; events stay as they are)."""
  parts = []
  for p in content.parts or ():
    update = {}
    if _is_client_id(p.function_call):
      update["function_call"] = p.function_call.model_copy(update={"id": None})
    if _is_client_id(p.function_response):
      update["function_response"] = p.function_response.model_copy(update={"id": None})
    parts.append(p.model_copy(update=update) if update else p)
  return content.model_copy(update={"parts": parts})


def _without_thought_flags(content: types.Content) -> types.Content:
  parts = [p.model_copy(update={"thought": None}) if p.thought else p for p in content.parts or ()]
  return content.model_copy(update={"parts": parts})


def compacted_request_at(
    contents: Sequence[types.Content], events: Sequence[Any], invocation_id: Optional[str],
    user_content: Optional[types.Content], index: EventIndex,
) -> Optional[int]:
  """Where the invocation's own user turn goes back, when ADK compacted it away.

  ADK's token-threshold compaction runs before every model call and keeps
  only the last ``event_retention_size`` raw events: in a tool loop it can
  summarize the invocation's user message, leaving a request with no user
  turn to carry the pack. The turn goes back right after the last summary,
  where ADK would have ordered it: every raw event kept after a compacted one
  is a later step of this invocation. None when the turn was not compacted.
  """
  if not index.summaries or user_content is None or not invocation_id:
    return None
  ranges = []  # compactions appended after the user turn; an earlier one cannot cover it
  for ev in reversed(events):
    compaction = _compaction_of(ev)
    if compaction is not None:
      ranges.append((compaction.start_timestamp, compaction.end_timestamp))
      continue
    if ev.invocation_id != invocation_id:
      return None  # the invocation's events, and no user turn among them
    if ev.author == "user" and ev.content is not None and not has_response(ev.content):
      if not any(s is not None and e is not None and s <= ev.timestamp <= e for s, e in ranges):
        return None
      break
  else:
    return None
  if any(c == user_content for c in contents):
    return None
  at = None
  for i, content in enumerate(contents):
    if fingerprint(content) in index.summaries:
      at = i + 1
  return at


def now() -> float:
  return time.time()
