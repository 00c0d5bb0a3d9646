"""The compiler: collect → filter → rank → compress → assemble → validate.

``CompilerSession`` holds one conversation's history incrementally (token
prefix sums, a hash chain, the recall index), so a warm call costs about the
same at 10,000 events as at 100. ``compile_pack`` is the stateless form used
by replay and tests; both give byte-identical output for the same inputs.
"""

from __future__ import annotations

import bisect
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from . import render
from .allocator import Allocation, ContextBudgetExhausted, allocate, reserve_for
from .canonical import MAX_DEPTH, canonical_json, canonical_parts_json, chain_step, check_depth, digest, sha256_hex
from .compress import extractive_summary, split_sentences, trim_tool_examples
from .costing import MESSAGE_OVERHEAD, TokenCounter, count_parts, count_parts_many
from .items import FINISHED_STEP, MAX_TIMESTAMP, MAX_TOKENS, MIN_TIMESTAMP, PLACED_BEFORE_REQUEST, PLACED_FIRST, PLACEMENT, Item, Layer
from .kept_ids import KeptIds
from .memo import MEMO_CHARS, BoundedMemo, LastCallMemo
from .policy import OverflowPolicy, PackPolicy
from .rank import HistoryIndex, Ranker, rank_layer
from .select import select_within_budget

MANIFEST_SCHEMA = "aether-frame/manifest@1"
_MAX_VALIDATE_ROUNDS = 64
_EXACT_COUNT_MARGIN = 0.97
"""Above this share of the usable window the payload is counted exactly."""


class CallInputs(BaseModel):
  """Everything of one model call except the prior conversation history.

  ``items`` holds the system, task, tools, evidence and memory candidates;
  the task layer must contain exactly one ``kind="user_request"`` item (its
  ``parts`` carry the user's non-text parts). ``inflight`` holds the
  current invocation's steps after the user turn (tool calls and results),
  and pinned contents the request carries elsewhere (``meta[PLACEMENT]``).
  In-flight items are always sent, except those of kind ``FINISHED_STEP``
  (complete earlier steps of a long tool loop or ``LoopAgent`` run): these
  may be trimmed, oldest first, once no older history is left to trim.
  """

  model_config = ConfigDict(extra="forbid")

  items: list[Item]
  inflight: list[Item] = Field(default_factory=list)
  window: int = Field(gt=0, le=MAX_TOKENS)
  max_output_tokens: Optional[int] = Field(default=None, ge=0, le=MAX_TOKENS)
  tail_hint: Optional[str] = None
  """Id of the oldest history group the previous call kept (hysteresis)."""
  inflight_hint: Optional[str] = None
  """Id of the newest trimmable in-flight step the previous call of this invocation
  dropped: the steps up to it stay out while the rest fits (hysteresis). An id not
  among this call's steps is ignored: ADK rebuilt them (compaction, a resumed call)."""
  token_scale: float = Field(default=1.0, ge=1e-6, le=1e6, allow_inf_nan=False)
  """Calibration: actual/estimated tokens, margin included (the calibrator bounds it)."""
  now: Optional[float] = Field(default=None, ge=MIN_TIMESTAMP, le=MAX_TIMESTAMP, allow_inf_nan=False)
  has_plan: bool = False
  problems: list[str] = Field(default_factory=list)
  """What the caller had to leave out of the inputs (a state value that failed its
  schema, say): the pack is marked invalid with these first."""
  meta: dict[str, Optional[str]] = Field(default_factory=dict)
  """invocation_id, session_id, agent, model…: recorded, not hashed."""


def recorded_call_exclusions(call: CallInputs) -> set[str]:
  """Fields of ``call`` kept out of its recorded scalars: the item lists (hashed or
  stored on their own), and an empty ``problems`` and ``inflight_hint``, which
  older inputs did not have, so their input hashes and stored inputs are unchanged."""
  out = {"items", "inflight"}
  if not call.problems:
    out.add("problems")
  if call.inflight_hint is None:
    out.add("inflight_hint")
  return out


class CompileInput(BaseModel):
  """A complete, replayable compile input (history + one call + policy)."""

  model_config = ConfigDict(extra="forbid")

  policy: PackPolicy
  history: list[Item] = Field(default_factory=list)
  call: CallInputs


@dataclass
class CompiledPack:
  payload: str
  """The Pack Payload text for the final user message."""
  minimal_payload: str
  """System + task + request only: what the validity guard falls back to."""
  conversation_ids: Sequence[str]
  """History group ids kept as the prior tail, chronological (a ``KeptIds`` view)."""
  tail_start_id: Optional[str]
  tool_names: list[str]
  tool_overrides: dict[str, str]
  """Tool name → trimmed declaration JSON, when tool examples had to be trimmed."""
  manifest: dict[str, Any]
  tokens: int
  valid: bool
  problems: list[str] = field(default_factory=list)
  inflight_ids: list[str] = field(default_factory=list)
  """The in-flight items sent, in order (all of them unless trimmable ones were trimmed)."""
  inflight_hint: Optional[str] = None
  """The newest trimmable in-flight step dropped (None: none): the next call's ``CallInputs.inflight_hint``."""
  pinned_ids: list[str] = field(default_factory=list)
  """History groups that stay wherever the cut falls (pending calls, confirmations, and the user
  turn each needs to open on), chronological: the minimal pack keeps them too."""


_DIGEST_MEMO = BoundedMemo(4096, max_chars=MEMO_CHARS)
HISTORY_BYTES_PER_TOKEN = 100
"""Memory a session holds per history token: measured ~35 bytes for the costed history and
~84 with its recall index (10,000 events, ``benchmarks/memory_footprint.py``), rounded up."""


def _inline_chars(value: Any) -> int:
  """Characters of the inline media payloads in part dicts (tool results' parts too).

  Iterative: a part nested deeper than the Python recursion limit (which json's C
  encoder no longer shares on 3.12+) must not raise a bare RecursionError here.
  """
  n = 0
  stack = [value]
  while stack:
    node = stack.pop()
    if isinstance(node, dict):
      for k, v in node.items():
        if k == "inline_data" and isinstance(v, dict):
          data = v.get("data")
          n += len(data) if isinstance(data, (str, bytes)) else 0
        elif isinstance(v, (dict, list)):
          stack.append(v)
    elif isinstance(node, list):
      stack.extend(v for v in node if isinstance(v, (dict, list)))
  return n
_LAYER_NAMES = {layer: layer.value for layer in Layer}


def _fast_key(item: Item) -> Optional[tuple]:
  """A hashable key equal for equal items, or None when there is no cheap one.

  Only plain values enter it (meta values must be str or None), so items
  that differ in their canonical JSON never share a key (``1 == True``).
  """
  if item.parts is not None:
    return None
  p = item.provenance
  if _negative_zero(item.score) or (p.timestamp is not None and _negative_zero(p.timestamp)):
    return None  # -0.0 == 0.0 as a key, but not in JSON
  meta: tuple = ()
  if item.meta:
    if any(type(v) is not str and v is not None for v in item.meta.values()):
      return None
    meta = tuple(sorted(item.meta.items()))
  return (item.id, item.layer, item.kind, item.role, item.trust, item.priority, item.score, item.pinned,
          p.source, p.timestamp, p.author, item.text, meta, item.tokens)


def _negative_zero(x: float) -> bool:
  return x == 0.0 and math.copysign(1.0, x) < 0


_TOO_DEEP = f"parts are nested too deeply to read as JSON (over {MAX_DEPTH} levels)"


def _parts_problem(items: Sequence[Item], error: Exception) -> str:
  """Names the item whose parts cannot be read as JSON, and why (``error``: what costing hit).

  Nested past Python's recursion limit (a tool's deeply nested JSON), or not JSON data: keys
  of mixed types (``{1: "a", "b": 2}``) cannot be put in canonical order, an int past 4,300
  digits cannot be written.
  """
  for it in items:
    try:
      canonical_parts_json(it.parts)
    except RecursionError:
      return f"item {it.id!r}: {_TOO_DEEP}"
    except (TypeError, ValueError) as e:
      return f"item {it.id!r}: parts are not JSON data ({e})"
  if isinstance(error, RecursionError):
    return f"an item's {_TOO_DEEP}"
  return f"an item's parts are not JSON data ({error})"


def _opens_turn(group: Item) -> bool:
  """A conversation group a request may start with: not the model's, not a function response."""
  if group.role == "model":
    return False
  return not any(isinstance(part, dict) and "function_response" in part for part in group.parts or ())


def _item_digest(item: Item) -> str:
  """Memoised ``_digest``: call items repeat from call to call within a session."""
  key = _fast_key(item)
  if key is None:
    return _digest(item)
  return _DIGEST_MEMO.get(key[:-1], lambda: _digest(item))  # the digest leaves out the token count


def _has_separator(text: str) -> bool:
  return "\x1e" in text or "\x1f" in text or "\x1d" in text


def _digest(item: Item) -> str:
  """A canonical digest of everything in an item but its token count.

  Hand-serialised (fixed field order, canonical JSON only for the free-form
  parts and meta) because it runs for every item on every call; equal items
  give equal digests in any process, including items reloaded from JSON.
  """
  p = item.provenance
  fields = (
      item.id, item.layer.value, item.kind, item.role or "", item.trust.value, repr(item.priority),
      repr(float(item.score)), "1" if item.pinned else "0", p.source or "",
      "" if p.timestamp is None else repr(float(p.timestamp)), p.author or "",
  )
  try:
    tail = canonical_parts_json(item.parts) if item.parts is not None else "-"
  except RecursionError:
    raise ValueError(f"item {item.id!r}: {_TOO_DEEP}") from None
  except (TypeError, ValueError) as e:
    raise ValueError(f"item {item.id!r}: parts are not JSON data ({e})") from None
  try:
    if item.meta:
      check_depth(item.meta)
    meta = canonical_json(item.meta) if item.meta else "{}"
  except (TypeError, ValueError, RecursionError) as e:
    raise ValueError(f"item {item.id!r}: meta is not JSON data ({e})") from None
  if any(map(_has_separator, fields)) or _has_separator(item.text):
    # A field holding a separator would let two different items join to the same
    # string (author "X\x1eY" + text "Z" vs author "X" + text "Y\x1eZ"): such items
    # are hashed as JSON instead, under a prefix no plain encoding starts with.
    return sha256_hex("\x1d" + canonical_json([*fields, item.text, tail, meta]))
  return sha256_hex("\x1f".join(fields) + "\x1e" + item.text + "\x1e" + tail + "\x1e" + meta)


def describe_ranking(ranker: Optional[Ranker], history_index: Optional[HistoryIndex]) -> dict[str, Any]:
  """The ranker (its own ``describe()`` when it has one) and the recall index, by name.

  Part of the input hash and the manifest: the same items ranked another way
  are another pack, and replay says so instead of blaming the compiler.
  """
  describe = getattr(ranker, "describe", None)
  return {
      "ranker": describe() if callable(describe) else (type(ranker).__qualname__ if ranker is not None else None),
      "history_index": type(history_index).__qualname__ if history_index is not None else None,
  }


class CompilerSession:
  """One conversation's compiler state; not thread-safe (one per session)."""

  def __init__(
      self,
      policy: PackPolicy,
      counter: TokenCounter,
      *,
      ranker: Optional[Ranker] = None,
      history_index: Optional[HistoryIndex] = None,
  ):
    self.policy = policy
    self.counter = counter
    self.ranker = ranker
    self.history_index = history_index
    self._indexed = 0
    """Groups in ``history_index``: the trimmed region of the last search (see ``_recall``)."""
    self._ranking = describe_ranking(ranker, history_index)
    self._policy_hash = policy.policy_hash()
    self._skeleton = 0
    self.history: list[Item] = []
    self._cum: list[int] = [0]
    self._media: list[int] = [0]
    """Cumulative characters of inline media payloads (base64) held by the history groups."""
    self._chain: list[str] = [""]
    self._pos: dict[str, int] = {}
    self._pinned: list[int] = []
    """Positions kept wherever the cut falls: pinned groups, and the user turn that opens each
    pinned group that cannot open a request itself (``_anchor``), sorted."""
    self._pinned_set: set[int] = set()
    self._pinned_groups: list[int] = []
    """Positions of the groups flagged ``pinned`` (a pending call, a confirmation)."""
    self._openers: list[int] = []
    """Positions of the groups a request may open with (``_opens_turn``), ascending: where a
    trimmed tail starts, and the user turn a pending call is kept after, found by bisection."""
    self._call_memo = LastCallMemo()
    """Call item key → (costed copy, digest); the plugin rebuilds equal items every call."""
    self._recall_tokens = LastCallMemo()
    """(position, chain value) → token cost of that group's recall line."""
    self._text_digests = BoundedMemo(8)
    self._norm_memo = LastCallMemo()
    """Evidence/memory text → its whitespace-collapsed form (the duplicate key)."""
    self._frames = BoundedMemo(8)
    self._ids: list[str] = []
    self._digests: list[str] = []
    """Per group ``_item_digest``: what the kept-conversation hash chains."""
    self._views: list[weakref.ref[KeptIds]] = []
    """``KeptIds`` of returned packs: released before ``_ids`` is cut, if still alive."""
    # Running hash of the kept conversation (see ``_conversation_digest``):
    # keyed by (tail start, chain head of the pinned ids before it), one link per kept group.
    self._kept_key: Optional[tuple[int, str]] = None
    self._kept_links: list[str] = []

  # ----------------------------------------------------------------- collect
  def _costed_messages(self, items: Sequence[Item], **update: Any) -> list[Item]:
    """Items with ``tokens`` filled in as whole messages (``update`` applied to those costed here).

    Counted in two batched passes (parts, plain text); items that carry a
    count already are returned as they are.
    """
    need = [it for it in items if it.tokens is None]
    with_parts = [it for it in need if it.parts is not None]
    plain = [it for it in need if it.parts is None]
    tokens: dict[str, int] = {}
    try:
      counted = count_parts_many([it.parts for it in with_parts], self.counter)
    except (RecursionError, TypeError, ValueError) as e:
      raise ValueError(_parts_problem(with_parts, e)) from None
    for it, n in zip(with_parts, counted):
      tokens[it.id] = MESSAGE_OVERHEAD + n
    if plain:
      for it, n in zip(plain, self.counter.count_many([it.text for it in plain])):
        tokens[it.id] = MESSAGE_OVERHEAD + n
    return [it if it.tokens is not None else it.model_copy(update={"tokens": tokens[it.id], **update}) for it in items]

  def _set_pinned(self) -> None:
    kept = set(self._pinned_groups)
    kept.update(a for a in map(self._anchor, self._pinned_groups) if a is not None)
    self._pinned = sorted(kept)
    self._pinned_set = kept

  def _anchor(self, pos: int) -> Optional[int]:
    """The user turn before a pinned group that cannot open a request (a pending call, say).

    Pinned groups stay however far back the cut falls, and they come first: a pending
    function call whose own user turn was cut opened the request, which Gemini and
    Anthropic refuse. The nearest such turn before it, however far back (None: none).
    """
    openers = self._openers
    i = bisect.bisect_left(openers, pos)
    if i < len(openers) and openers[i] == pos:
      return None
    return openers[i - 1] if i else None

  def reset_history(self) -> None:
    self.history.clear()
    self._cum = [0]
    self._media = [0]
    self._chain = [""]
    self._pos.clear()
    self._pinned_groups.clear()
    self._openers.clear()
    self._set_pinned()
    self._release_views(0)
    self._ids.clear()
    self._digests.clear()
    self._kept_key, self._kept_links = None, []
    if self.history_index is not None:
      self.history_index.truncate(0)
    self._indexed = 0

  def extend_history(self, groups: Sequence[Item]) -> None:
    """Appends conversation groups (chronological). O(len(groups)).

    All or nothing: everything that can fail (layer, duplicate ids, token
    counts, digests of the free-form parts and meta) runs before the session
    changes, so a bad batch leaves it as it was.
    """
    groups = list(groups)
    fresh: set[str] = set()
    for group in groups:
      if group.layer is not Layer.CONVERSATION:
        raise ValueError(f"history item {group.id!r} is in layer {group.layer.value}, expected conversation")
      if group.id in self._pos or group.id in fresh:
        raise ValueError(f"duplicate history id {group.id!r}")
      fresh.add(group.id)
    costed = self._costed_messages(groups)
    digests = [_item_digest(g) for g in costed]
    media = [_inline_chars(g.parts) if g.parts else 0 for g in costed]
    for group, d, m in zip(costed, digests, media):
      pos = len(self.history)
      self.history.append(group)
      self._pos[group.id] = pos
      self._ids.append(group.id)
      self._digests.append(d)
      self._cum.append(self._cum[-1] + group.tokens)
      self._media.append(self._media[-1] + m)
      self._chain.append(sha256_hex(self._chain[-1] + d))
      if group.pinned:
        self._pinned_groups.append(pos)
      if _opens_turn(group):
        self._openers.append(pos)
    if any(g.pinned for g in costed):
      self._set_pinned()

  def truncate_history(self, n: int) -> None:
    """Keeps the first ``n`` groups (the last one may be re-grouped by the caller)."""
    n = max(0, n)
    if n >= len(self.history):
      return
    for group in self.history[n:]:
      del self._pos[group.id]
    del self.history[n:]
    del self._cum[n + 1:]
    del self._media[n + 1:]
    del self._chain[n + 1:]
    self._release_views(n)
    del self._ids[n:]
    del self._digests[n:]
    self._pinned_groups = [p for p in self._pinned_groups if p < n]
    del self._openers[bisect.bisect_left(self._openers, n):]
    self._set_pinned()
    if self._kept_key is not None:
      start = self._kept_key[0]
      if n < start:
        self._kept_key, self._kept_links = None, []
      else:
        del self._kept_links[n - start + 1:]
    if self.history_index is not None and n < self._indexed:
      self.history_index.truncate(n)
      self._indexed = n

  def _release_views(self, n: int) -> None:
    for ref in self._views:
      view = ref()
      if view is not None:
        view.release(n)
    self._views = [r for r in self._views if r() is not None]

  @property
  def history_tokens(self) -> int:
    """Tokens of the history held."""
    return self._cum[-1]

  @property
  def media_chars(self) -> int:
    """Characters of inline media payloads (base64) in the history held."""
    return self._media[-1]

  def held_bytes(self) -> int:
    """An estimate of the memory this session holds, for a cache that keeps many.

    ``HISTORY_BYTES_PER_TOKEN`` per history token (its items, digests and, once
    turns are trimmed, their recall index), the inline media payloads as held
    (an image costs a few hundred tokens but holds its base64), and the text
    what its ranker and history index hold of their own (``held_bytes``, when they say).
    """
    extra = 0
    for part in (self.ranker, self.history_index):
      held = getattr(part, "held_bytes", None)
      if type(held) is int:
        extra += held
    return self._cum[-1] * HISTORY_BYTES_PER_TOKEN + self._media[-1] + extra

  def history_ids(self) -> list[str]:
    return list(self._ids)

  def history_group(self, group_id: str) -> Item:
    """The costed history group with this id (KeyError if unknown)."""
    return self.history[self._pos[group_id]]

  def _conversation_digest(self, pinned: list[int], tail_start: int) -> str:
    """``sequence_digest`` of the kept groups' digests (pinned ones first), kept incrementally.

    Digests, not ids: a group can keep its id while its content changes (a
    pending call that gains its response). The tail start moves only on a
    chunked trim, so between trims each call adds one link instead of
    re-hashing thousands of groups.
    """
    head = ""
    for pos in pinned:
      head = chain_step(head, self._digests[pos])
    if self._kept_key != (tail_start, head):
      self._kept_key, self._kept_links = (tail_start, head), [head]
    links = self._kept_links
    for pos in range(tail_start + len(links) - 1, len(self._digests)):
      links.append(chain_step(links[-1], self._digests[pos]))
    return "sha256:" + sha256_hex(links[len(self._digests) - tail_start])

  # ------------------------------------------------------------------ compile
  def compile(self, call: CallInputs) -> CompiledPack:
    policy = self.policy
    for memo in (self._call_memo, self._recall_tokens, self._norm_memo):
      memo.next_call()
    events: list[dict[str, Any]] = []
    statuses: dict[str, dict[str, Any]] = {}

    # COLLECT: cost every call item by the exact line it will occupy.
    items = [i for i in call.items]
    user_requests = [i for i in items if i.layer is Layer.TASK and i.kind == "user_request"]
    if len(user_requests) != 1:
      raise ValueError(f"call needs exactly one task item of kind 'user_request', got {len(user_requests)}")
    for it in items:  # the payload has no place for these: they were charged and reported included, never sent
      if it.layer is Layer.CONVERSATION:
        raise ValueError(f"call item {it.id!r} is in layer conversation; pass turns as history or inflight")
      if it.id.startswith("recall:"):
        raise ValueError(f"call item id {it.id!r} is reserved: 'recall:' ids name recalled history turns")
      if it.layer is Layer.TASK and it.kind != "user_request" and it.kind not in render.TASK_KINDS:
        raise ValueError(f"task item {it.id!r} has kind {it.kind!r}; expected 'user_request' or one of {list(render.TASK_KINDS)}")
    for it in call.inflight:
      if it.layer is not Layer.CONVERSATION:
        raise ValueError(f"in-flight item {it.id!r} is in layer {it.layer.value}, expected conversation")
    seen_ids: set[str] = set()
    for it in [*items, *call.inflight]:
      if it.id in seen_ids or it.id in self._pos:
        raise ValueError(f"duplicate item id {it.id!r}")
      seen_ids.add(it.id)
    items, item_digests = self._costed_call_items(items)
    inflight = self._costed_messages(call.inflight, pinned=True)
    trimmable = [it for it in inflight if it.kind == FINISHED_STEP]

    # The fence depends on the payload's own inputs only, so the payload stays
    # byte-identical across the tool steps of one invocation; content cannot
    # predict it because the content is part of what is hashed.
    fence = render.fence_token(digest([self._policy_hash, item_digests]))
    input_sha = self._input_hash(call, item_digests, inflight)

    # FILTER: empty and duplicate evidence/memory.
    kept_items: list[Item] = []
    dup_of: dict[tuple[str, str], int] = {}
    for it in items:
      if it.layer in (Layer.EVIDENCE, Layer.MEMORY):
        norm = self._norm_memo.get(it.text)
        if norm is None:
          norm = " ".join(it.text.split())
          self._norm_memo.put(it.text, norm)
        key = (it.layer.value, norm)
        if not key[1]:
          self._event(events, statuses, "filter", it.layer.value, [it], "empty text")
          continue
        at = dup_of.get(key)
        if at is not None:
          first = kept_items[at]
          if it.pinned and not first.pinned:  # the pinned copy stays, so the text is never cut
            kept_items[at], it, first = it, first, it
          self._event(events, statuses, "filter", it.layer.value, [it], f"duplicate of {first.id}")
          continue
        dup_of[key] = len(kept_items)
      kept_items.append(it)
    by_layer: dict[Layer, list[Item]] = {layer: [] for layer in Layer}
    for it in kept_items:
      by_layer[it.layer].append(it)
    user_request = user_requests[0]
    query = user_request.text

    # RANK: hybrid ranker for evidence/memory; recall hits from the trimmed history.
    region = self._trimmed_region(call, items, inflight, by_layer, user_request, fence)
    recall = self._recall(query, call.now, region) if region else []
    memory_all = by_layer[Layer.MEMORY] + recall
    ranked_evidence = rank_layer(by_layer[Layer.EVIDENCE], query=query, layer=Layer.EVIDENCE, ranker=self.ranker, now=call.now)
    ranked_memory = rank_layer(memory_all, query=query, layer=Layer.MEMORY, ranker=self.ranker, now=call.now)
    ranked_evidence = self._essential_first(ranked_evidence)
    scored = {i.id: i for i in (*ranked_evidence, *ranked_memory)}  # the manifest rows' score and explain
    # SELECT (memory top-K) before allocating, so unused share flows on.
    non_recall = [i for i in ranked_memory if i.kind != "recall" and not i.pinned]
    over = non_recall[policy.memory_top_k:]
    self._event(events, statuses, "select", "memory", over, f"beyond memory top-K (k={policy.memory_top_k})")
    over_ids = {i.id for i in over}
    ranked_memory = [i for i in ranked_memory if i.id not in over_ids]

    # ALLOCATE
    try:
      alloc, pinned, demands = self._allocate(call, by_layer, user_request, fence, inflight, ranked_evidence, ranked_memory)
    except ContextBudgetExhausted:
      # Ladder step 2, last rungs: trim tool examples, tighten the step. Only
      # when the fixed tiers themselves do not fit; otherwise they are never cut.
      if not self._tighten_fixed(by_layer, events, statuses):
        raise
      alloc, pinned, demands = self._allocate(call, by_layer, user_request, fence, inflight, ranked_evidence, ranked_memory)
    if policy.overflow is OverflowPolicy.FAIL_LOUD and any(
        alloc.budgets[layer.value] < demands[layer] + pinned[layer] for layer in demands
    ):
      raise ContextBudgetExhausted(
          "elastic layers overflow and the overflow policy is fail_loud",
          needs={layer.value: demands[layer] + pinned[layer] for layer in demands},
          usable=alloc.usable, window=call.window,
      )

    # Section overheads (fences, BUDGET phrases) are charged to their layer.
    eff = dict(alloc.budgets)
    for layer, ranked in ((Layer.EVIDENCE, ranked_evidence), (Layer.MEMORY, ranked_memory)):
      over = demands[layer] + pinned[layer] > alloc.budgets[layer.value]
      eff[layer.value] = max(0, eff[layer.value] - self._overheads(ranked, over, fence))
    if demands[Layer.CONVERSATION] + pinned[Layer.CONVERSATION] > alloc.budgets["conversation"]:
      eff["conversation"] = max(0, eff["conversation"] - 8)

    # SELECT + COMPRESS + DROP, conversation first (its tail decides which
    # recall hits are already visible), then the ladder's order. History is
    # older than any in-flight step: it goes first, then trimmable steps.
    conversation_budget = eff["conversation"] - sum(i.tokens for i in inflight if i.kind != FINISHED_STEP)
    tail_start, tail_events = self._tail(call.tail_hint, conversation_budget - sum(i.tokens for i in trimmable))
    cut, inflight_events = self._inflight_cut(trimmable, call.inflight_hint, conversation_budget - self._tail_cost(tail_start))
    if cut and tail_start < len(self.history):
      # Older turns never stay while newer steps go (a hint may say steps were trimmed).
      tail_events.append(self._range_event(tail_start, len(self.history), "older conversation, trimmed before in-flight steps"))
      tail_start = len(self.history)
      cut, inflight_events = self._inflight_cut(trimmable, call.inflight_hint, conversation_budget - self._tail_cost(tail_start))
    tail_events += inflight_events
    for ev in inflight_events:
      for iid in ev["item_ids"]:
        statuses[iid] = {"status": "dropped", "reason": ev["reason"]}
    dropped_steps = {i.id for i in trimmable[:cut]}
    sent = [i for i in inflight if i.id not in dropped_steps]
    # Recall hits only: a caller's memory item may carry its own "group_id" meta.
    ranked_memory = [m for m in ranked_memory if m.kind != "recall" or not self._in_tail(m.meta.get("group_id"), tail_start)]
    memory_sel = self._ladder_layer(Layer.MEMORY, ranked_memory, eff["memory"], query, events, statuses)
    evidence_sel = self._ladder_layer(Layer.EVIDENCE, ranked_evidence, eff["evidence"], query, events, statuses)
    # Budget a layer left unused flows to the others (payload layers only:
    # re-admitting old turns would move the cached prefix).
    spare = eff["memory"] - memory_sel.used + eff["evidence"] - evidence_sel.used
    spare += max(0, eff["conversation"] - self._tail_cost(tail_start) - sum(i.tokens for i in sent))
    spare += alloc.unallocated
    received = {"evidence": 0, "memory": 0}
    if spare > 0:
      left = self._readmit(evidence_sel, spare, events, statuses)
      received["evidence"], spare = spare - left, left
      left = self._readmit(memory_sel, spare, events, statuses)
      received["memory"], spare = spare - left, left
    for name, extra in received.items():
      alloc.budgets[name] += extra
      alloc.received[name] = extra
      alloc.notes.append(f"{name} received {extra} unused tokens from other layers") if extra else None
    events.extend(tail_events)

    # ASSEMBLE + VALIDATE: measure the real payload, shrink until it fits.
    tools = by_layer[Layer.TOOLS]
    pointers = render.MAX_BUDGET_POINTERS
    tightened = False
    for _ in range(_MAX_VALIDATE_ROUNDS):
      payload, totals = self._assemble(
          by_layer, tools, evidence_sel, memory_sel, user_request, sent, tail_start, alloc, fence, pointers,
          steps_dropped=cut,
      )
      if totals["total"] <= alloc.usable:
        break
      if pointers:
        pointers = 0  # the BUDGET line's pointers go before content; omitted items stay named in the manifest
        continue
      if not self._shed_one(memory_sel, evidence_sel, events, statuses, "validate: rendered pack over budget"):
        nxt = tail_start
        while nxt < len(self.history) and nxt in self._pinned_set:
          nxt += 1  # pinned groups stay in the pack wherever the cut falls
        if nxt < len(self.history):
          after = self._opening(nxt + 1)  # the tail still opens on a user turn
          events.append(self._range_event(nxt, after, "validate: rendered pack over budget"))
          tail_start = after
          continue
        if cut < len(trimmable):
          self._event(events, statuses, "drop", "conversation", [trimmable[cut]], "validate: rendered pack over budget")
          sent = [i for i in sent if i.id != trimmable[cut].id]
          cut += 1
          continue
        if not tightened:
          # The ladder's last rungs, as when the fixed tiers overflow the allocation:
          # the BUDGET line's omissions can tip a pack that only just fits.
          tightened = True
          if self._tighten_fixed(by_layer, events, statuses):
            tools = by_layer[Layer.TOOLS]
            continue
        raise ContextBudgetExhausted(
            "nothing left to drop and the rendered pack is still over budget",
            needs={**{name: totals[name] for name in ("system", "task", "tools", "evidence", "memory", "conversation")},
                   "reserve": alloc.reserve, "total": totals["total"]},
            usable=alloc.usable, window=call.window,
        )
    else:
      raise ContextBudgetExhausted(
          f"the rendered pack did not fit after {_MAX_VALIDATE_ROUNDS} validate rounds",
          needs={"total": totals["total"]}, usable=alloc.usable, window=call.window,
      )

    problems = [*call.problems, *self._required(by_layer, call.has_plan)]
    pinned_before = [p for p in self._pinned if p < tail_start]
    pinned_ids = [self._ids[p] for p in pinned_before]
    # Pinned groups before the cut precede it; both ascending. A view, not a copy (see KeptIds).
    conversation_ids = KeptIds(pinned_ids, self._ids, tail_start, len(self._ids))
    if len(self._views) >= 16:
      self._views = [r for r in self._views if r() is not None]
    self._views.append(weakref.ref(conversation_ids))
    manifest = self._manifest(
        call, alloc, items, inflight, sent, evidence_sel, memory_sel, recall, scored, events, statuses,
        input_sha, payload, self._conversation_digest(pinned_before, tail_start), len(conversation_ids),
        tail_start, totals, problems, tools,
    )
    minimal = render.render_payload(
        task=[i for i in by_layer[Layer.TASK] if i.kind != "user_request"], tools=tools, evidence=[], memory=[],
        budget=render.MINIMAL_BUDGET_LINE, user_request=user_request.text, fence=fence,
    )
    return CompiledPack(
        payload=payload,
        minimal_payload=minimal,
        conversation_ids=conversation_ids,
        tail_start_id=self.history[tail_start].id if tail_start < len(self.history) else None,
        tool_names=[t.meta.get("name", t.id) for t in tools],
        tool_overrides={t.meta.get("name", t.id): t.text for t in tools if statuses.get(t.id, {}).get("status") == "compressed"},
        manifest=manifest,
        tokens=totals["total"],
        valid=not problems,
        problems=problems,
        inflight_ids=[i.id for i in sent],
        inflight_hint=trimmable[cut - 1].id if cut else None,
        pinned_ids=[self._ids[p] for p in self._pinned],
    )

  # ---------------------------------------------------------------- helpers
  def _costed_call_items(self, items: list[Item]) -> tuple[list[Item], list[str]]:
    """Costs call items and digests them, reusing both for items of the previous call."""
    memo = self._call_memo
    out: list[Optional[Item]] = [None] * len(items)
    digests: list[str] = [""] * len(items)
    keys = [_fast_key(it) for it in items]
    miss = []
    for i, key in enumerate(keys):
      hit = memo.get(key) if key is not None else None
      if hit is None:
        miss.append(i)
      else:
        out[i], digests[i] = hit
    if miss:
      for i, item in zip(miss, self._costed([items[i] for i in miss])):
        if item is items[i]:
          item = item.model_copy()  # the caller's own object: a later change to it must not reach the memo
        out[i], digests[i] = item, _item_digest(item)
        if keys[i] is not None:
          memo.put(keys[i], (item, digests[i]))
    return out, digests  # type: ignore[return-value]

  def _costed(self, items: list[Item]) -> list[Item]:
    need = [i for i, it in enumerate(items) if it.tokens is None]
    lines = []
    for i in need:
      it = items[i]
      if it.layer in (Layer.SYSTEM, Layer.TOOLS) or it.kind == "user_request":
        lines.append(it.text)
      else:
        lines.append(render.item_line(it) + "\n")
    counts = self.counter.count_many(lines) if lines else []
    out = list(items)
    for i, n in zip(need, counts):
      it = items[i]
      if it.kind == "user_request" and it.parts:
        try:
          n += count_parts(it.parts, self.counter)
        except (RecursionError, TypeError, ValueError) as e:
          raise ValueError(_parts_problem([it], e)) from None
      out[i] = it.model_copy(update={"tokens": n})
    return out

  def _input_hash(self, call: CallInputs, item_digests: list[str], inflight: list[Item]) -> str:
    body = {
        "policy": self._policy_hash,
        "tokenizer": self.counter.name,
        "ranking": self._ranking,
        "history": self._chain[-1],
        "history_len": len(self.history),
        "items": item_digests,
        "inflight": [_item_digest(i) for i in inflight],
        "call": call.model_dump(mode="json", exclude=recorded_call_exclusions(call) | {"meta"}),
    }
    return digest(body)

  def _allocate(self, call, by_layer, user_request, fence, inflight, evidence, memory):
    """Layer budgets for these evidence and memory candidates (order does not matter).

    Returns (allocation, pinned tokens, demands) by layer; raises
    ``ContextBudgetExhausted`` when the fixed tiers and the reserve overflow.
    """
    skeleton = self._skeleton_tokens(by_layer, user_request, fence)
    fixed = {
        Layer.SYSTEM: sum(i.tokens for i in by_layer[Layer.SYSTEM]),
        Layer.TASK: skeleton + sum(i.tokens for i in by_layer[Layer.TASK] if i.kind != "user_request"),
        Layer.TOOLS: sum(i.tokens for i in by_layer[Layer.TOOLS]),
    }
    pinned_hist = sum(self.history[p].tokens for p in self._pinned)
    pinned = {
        Layer.CONVERSATION: sum(i.tokens for i in inflight if i.kind != FINISHED_STEP) + pinned_hist,
        Layer.EVIDENCE: sum(i.tokens for i in evidence if i.pinned),
        Layer.MEMORY: sum(i.tokens for i in memory if i.pinned),
    }
    demands = {
        Layer.CONVERSATION: self._cum[-1] - pinned_hist + sum(i.tokens for i in inflight if i.kind == FINISHED_STEP),
        Layer.EVIDENCE: sum(i.tokens for i in evidence if not i.pinned) + self._overheads(evidence, False, fence),
        Layer.MEMORY: sum(i.tokens for i in memory if not i.pinned) + self._overheads(memory, False, fence),
    }
    alloc = allocate(
        self.policy, window=call.window, reserve=reserve_for(self.policy, call.window, call.max_output_tokens),
        fixed_needs=fixed, pinned=pinned, demands=demands, token_scale=call.token_scale,
    )
    return alloc, pinned, demands

  @staticmethod
  def _essential_first(ranked: list[Item]) -> list[Item]:
    """Evidence for checklist items is essential (select stage, seed 003)."""
    essential = [i for i in ranked if i.kind == "checklist_evidence"]
    return essential + [i for i in ranked if i.kind != "checklist_evidence"]

  def _history_fits(self, call: CallInputs, items: list[Item], inflight: list[Item]) -> bool:
    """True when everything fits with room to spare, so no turn can be trimmed (a cheap check)."""
    reserve = reserve_for(self.policy, call.window, call.max_output_tokens)
    usable = math.floor((call.window - reserve) / call.token_scale) if call.window > reserve else 0
    need = self._cum[-1] + sum(i.tokens for i in inflight) + sum(i.tokens for i in items)
    # Generous slack for the payload frame, fences and BUDGET line.
    return need + 512 <= usable * 0.9

  def _trimmed_region(self, call: CallInputs, items, inflight, by_layer, user_request, fence) -> int:
    """How many of the oldest groups lie before this call's tail: what recall searches.

    Recall offers turns the pack does not already carry, so it searches only
    the trimmed groups. The tail never moves back past the previous call's
    cut (see ``_tail``), so with a hint that cut is the region; a chunked trim
    in this call leaves the newly cut turns unsearched for this one call.
    Without a hint, the cut this call would make before recall adds its
    demand (recall can only push the cut later, so no hit lands in the tail).
    """
    if not self.history:
      return 0
    if call.tail_hint is not None and call.tail_hint in self._pos:
      return self._pos[call.tail_hint]
    if self._history_fits(call, items, inflight):
      return 0
    # A lower bound of the memory demand the real allocation will see (it keeps
    # the best memory_top_k, which cost at least the K cheapest), so the real
    # conversation budget is at most this one and the real cut at or after it.
    memory = [i for i in by_layer[Layer.MEMORY] if i.pinned]
    free = sorted((i for i in by_layer[Layer.MEMORY] if not i.pinned and i.kind != "recall"), key=lambda i: i.tokens)
    memory += free[: self.policy.memory_top_k]
    try:
      alloc, pinned, demands = self._allocate(call, by_layer, user_request, fence, inflight, by_layer[Layer.EVIDENCE], memory)
    except ContextBudgetExhausted:
      return 0  # the fixed tiers overflow: no room for recall hits; the real allocation decides
    budget = alloc.budgets["conversation"]
    if demands[Layer.CONVERSATION] + pinned[Layer.CONVERSATION] > budget:
      budget = max(0, budget - 8)
    return self._tail(None, budget - sum(i.tokens for i in inflight))[0]

  def _recall(self, query: str, now: Optional[float], region: int) -> list[Item]:
    """The best older turns among the first ``region`` groups, as MEMORY ``recall`` items.

    The index mirrors exactly those groups; the region moves only when the
    tail is trimmed, so it is synced in rare chunks.
    """
    if self.history_index is None or not query.strip():
      return []
    if region < self._indexed:
      self.history_index.truncate(region)
    elif region > self._indexed:
      self.history_index.add(self.history[self._indexed:region])
    self._indexed = region
    hits = self.history_index.search(query, k=self.policy.recall_top_k, now=now)
    out = []
    for pos, score, explain in hits:
      group = self.history[pos]
      out.append(Item(
          id=f"recall:{group.id}", layer=Layer.MEMORY, kind="recall", text=group.text,
          score=round(score, 6), provenance=group.provenance, trust=group.trust,
          meta={"group_id": group.id, "explain": explain}, tokens=self._recall_tokens.get((pos, self._chain[pos + 1])),
      ))
    out = self._costed(out)
    # A recall line's cost depends on the group alone (not on score or
    # explanation); the chain value pins the group's content at ``pos``.
    for (pos, _, _), item in zip(hits, out):
      self._recall_tokens.put((pos, self._chain[pos + 1]), item.tokens)
    return out

  def _skeleton_tokens(self, by_layer: dict[Layer, list[Item]], user_request: Item, fence: str) -> int:
    """The payload with every data section empty: headers, TOOLS and the request.

    Counted as the fixed frame (stable across calls, so a cache hit) plus the
    request text, which keeps the bound an upper bound. The BUDGET line is
    counted separately once it is known.
    """
    tools = by_layer[Layer.TOOLS]
    key = tuple(render.item_line(t) for t in tools)
    # Empty data sections carry no fence, so the frame depends on the tools alone.
    frame = self._frames.get(key, lambda: render.render_payload(
        task=[], tools=tools, evidence=[], memory=[], budget="", user_request="", fence=fence,
    ))
    extra = count_parts(user_request.parts, self.counter) if user_request.parts else 0
    # The BUDGET line's fixed phrase ("- context NN% used"); omissions are charged to their layer.
    # Counted, at least 8: a non-tiktoken counter (the estimate) charges it more than 8.
    phrase = max(8, self.counter.count("- context 100% used"))
    self._skeleton = MESSAGE_OVERHEAD + sum(self.counter.count_many([frame, user_request.text])) + 1 + phrase + extra
    return self._skeleton

  def _fence_tokens(self, fence: str) -> int:
    return self.counter.count(f"<<<DATA {fence}>>>\n<<<END DATA {fence}>>>\n")

  def _overheads(self, ranked: list[Item], over_budget: bool, fence: str) -> int:
    """What a non-empty data section costs beyond its items: the fence lines,
    and its phrase in the BUDGET line when items will be omitted."""
    if not ranked:
      return 0
    cost = self._fence_tokens(fence)
    if over_budget:
      # Which items will be omitted is not known yet: charge the costliest
      # pointers, counted (a character estimate misses non-ASCII URIs badly).
      costs = sorted(self.counter.count_many([i.pointer() for i in ranked]), reverse=True)
      cost += 16 + sum(n + 2 for n in costs[: render.MAX_BUDGET_POINTERS])
    return cost

  def _tighten_fixed(self, by_layer, events, statuses) -> bool:
    """Trims examples from tool descriptions and cuts the step to its lead sentence."""
    changed = False
    tools = []
    for tool in by_layer[Layer.TOOLS]:
      trimmed = trim_tool_examples(tool.text)
      if trimmed != tool.text:
        small = self._costed([tool.model_copy(update={"text": trimmed, "tokens": None})])[0]
        self._event(events, statuses, "compress", "tools", [tool], "tool examples trimmed (fixed tiers over the window)",
                    tokens_before=tool.tokens, tokens_after=small.tokens)
        tool, changed = small, True
      tools.append(tool)
    by_layer[Layer.TOOLS] = tools
    task = []
    for item in by_layer[Layer.TASK]:
      if item.kind == "step":
        lead = split_sentences(item.text)[:1]
        if lead and lead[0] != item.text.strip():
          small = self._costed([item.model_copy(update={"text": lead[0], "tokens": None})])[0]
          self._event(events, statuses, "compress", "task", [item], "step summary tightened (fixed tiers over the window)",
                      tokens_before=item.tokens, tokens_after=small.tokens)
          item, changed = small, True
      task.append(item)
    by_layer[Layer.TASK] = task
    return changed

  def _in_tail(self, group_id: Optional[str], tail_start: int) -> bool:
    pos = self._pos.get(group_id, -1) if isinstance(group_id, str) else -1  # meta values may be unhashable
    return pos >= tail_start or pos in self._pinned_set

  def _tail_cost(self, start: int) -> int:
    cost = self._cum[-1] - self._cum[start]
    return cost + sum(self.history[p].tokens for p in self._pinned if p < start)

  def _tail(self, hint: Optional[str], budget: int) -> tuple[int, list[dict[str, Any]]]:
    """Chunked, hysteretic tail trimming: keep the previous cut while it fits;
    when it no longer does, cut down to the low-water mark in one go."""
    n = len(self.history)
    if n == 0:
      return 0, []
    start = self._opening(self._pos.get(hint, 0)) if hint is not None else 0
    events: list[dict[str, Any]] = []
    if start > 0:
      events.append(self._range_event(0, start, "older conversation, trimmed in an earlier call (kept out for cache stability)"))
    if self._tail_cost(start) <= budget:
      return start, events
    low = math.floor(budget * self.policy.trim_low_water)
    new_start = self._opening(self._first_fitting(low))
    essentials = max(0, n - self.policy.recent_turns)
    if new_start > essentials:
      # The low-water mark would cut into the recent turns: cut as deep as they
      # allow (still a chunk, so the next calls fit), or just enough to fit.
      at = bisect.bisect_right(self._openers, essentials) - 1
      deepest = self._openers[at] if at >= 0 else 0  # the last opening within the older turns
      new_start = max(self._opening(self._first_fitting(budget)), start, deepest)
    if new_start > start:  # (a hint moved to its turn's opening may already be past every group)
      events.append(self._range_event(start, new_start, "older conversation, chunked trim to the low-water mark"))
    return new_start, events

  def _inflight_cut(self, steps: list[Item], hint: Optional[str], budget: int) -> tuple[int, list[dict[str, Any]]]:
    """How many of the oldest trimmable in-flight ``steps`` to drop, as ``_tail`` trims
    history: the previous cut while it fits, else down to the low-water mark in one go,
    so a long loop's cached prefix breaks in rare chunks."""
    if not steps:
      return 0, []
    ids = [i.id for i in steps]
    start = ids.index(hint) + 1 if hint in ids else 0
    suffix = [0] * (len(steps) + 1)
    for k in range(len(steps) - 1, -1, -1):
      suffix[k] = suffix[k + 1] + steps[k].tokens
    cut = start
    if suffix[start] > budget:
      def first_within(limit: int) -> int:
        return next(k for k in range(start, len(steps) + 1) if suffix[k] <= max(0, limit))
      cut = first_within(math.floor(budget * self.policy.trim_low_water))
      essentials = max(0, len(steps) - self.policy.recent_turns)
      if cut > essentials:  # as in ``_tail``: as deep as the recent steps allow, or just enough to fit
        cut = max(first_within(budget), essentials)
    events: list[dict[str, Any]] = []
    if start:
      events.append(self._steps_event(steps[:start], "in-flight steps, trimmed in an earlier call (kept out for cache stability)"))
    if cut > start:
      events.append(self._steps_event(steps[start:cut], "in-flight steps, chunked trim to the low-water mark"))
    return cut, events

  @staticmethod
  def _steps_event(steps: Sequence[Item], reason: str) -> dict[str, Any]:
    return {
        "stage": "drop", "layer": "conversation", "reason": reason,
        "item_ids": [i.id for i in steps], "pointers": [i.pointer() for i in steps], "tokens": sum(i.tokens for i in steps),
    }

  def _opening(self, start: int) -> int:
    """The first group at or after ``start`` that can open a request: not the model's turn,
    not a tool's answer. A trimmed tail starts on one: Gemini refuses contents that open
    with a function call, and Anthropic any that open with other than a user message."""
    n = len(self.history)
    if start <= 0 or start >= n:
      return start
    openers = self._openers
    i = bisect.bisect_left(openers, start)
    return openers[i] if i < len(openers) else n

  def _first_fitting(self, budget: int) -> int:
    """Smallest start whose tail (plus earlier pinned groups) fits ``budget``."""
    n = len(self.history)
    total = self._cum[-1]
    lo = bisect.bisect_left(self._cum, total - budget, 0, n + 1)
    lo = min(lo, n)
    while lo < n and self._tail_cost(lo) > budget:
      lo += 1
    return lo

  def _range_event(self, start: int, end: int, reason: str) -> dict[str, Any]:
    dropped = [p for p in range(start, end) if p not in self._pinned_set] if end - start <= 64 else None
    event: dict[str, Any] = {
        "stage": "drop",
        "layer": "conversation",
        "reason": reason,
        "range": {
            "start": start, "end": end,
            "first_id": self.history[start].id if end > start else None,
            "last_id": self.history[end - 1].id if end > start else None,
        },
        # Pinned groups in the range stay in the pack: not dropped, not counted.
        "tokens": self._cum[end] - self._cum[start] - sum(
            self.history[p].tokens for p in self._pinned[bisect.bisect_left(self._pinned, start):bisect.bisect_left(self._pinned, end)]
        ),
    }
    if dropped is not None:
      event["item_ids"] = [self.history[p].id for p in dropped]
    return event

  def _event(self, events, statuses, stage: str, layer: str, items: Sequence[Item], reason: str, **extra) -> None:
    if not items:
      return
    status = {"filter": "filtered", "select": "dropped", "drop": "dropped", "compress": "compressed"}[stage]
    events.append({
        "stage": stage, "layer": layer, "reason": reason,
        "item_ids": [i.id for i in items], "pointers": [i.pointer() for i in items], **extra,
    })
    for it in items:
      statuses[it.id] = {"status": status, "reason": reason}

  def _ladder_layer(self, layer: Layer, ranked: list[Item], budget: int, query: str, events, statuses):
    """Seed 003's ladder for one payload layer: select, compress, drop."""
    policy = self.policy
    candidates = ranked
    sel = select_within_budget(candidates, budget)
    if not sel.dropped:
      return sel
    # COMPRESS: memory → extractive summary; older (non-checklist) evidence → summary.
    still: list[Item] = []
    for item in sel.dropped:
      room = budget - sel.used
      compressible = item.kind != "checklist_evidence" and (item.tokens or 0) >= policy.compress_min_tokens
      if compressible and room >= policy.compress_min_tokens // 2:
        target = min(room, (item.tokens or 0) // 2)
        line_overhead = self.counter.count(render.item_line(item.model_copy(update={"text": ""})) + "\n")
        summary = extractive_summary(item.text, query, target - line_overhead, self.counter.count)
        if summary:
          small = item.model_copy(update={"text": summary, "tokens": None, "meta": {**item.meta, "compressed_from": item.tokens}})
          small = self._costed([small])[0]
          if small.tokens <= room:
            sel.kept.append(small)
            sel.used += small.tokens
            self._event(events, statuses, "compress", layer.value, [item],
                        "extractive summary" + (" of older evidence" if layer is Layer.EVIDENCE else " of memory"),
                        tokens_before=item.tokens, tokens_after=small.tokens)
            continue
      still.append(item)
    sel.dropped = still
    # DROP: what is left goes, lowest score first in the event order.
    if still:
      order = sorted(still, key=lambda i: (i.score, i.id))
      reason = "over budget: lowest score dropped" if layer is Layer.MEMORY else "over budget: older / lower-ranked evidence dropped"
      self._event(events, statuses, "drop", layer.value, order, reason)
    return sel

  def _readmit(self, sel, spare: int, events, statuses) -> int:
    """Give spare tokens back to dropped items that now fit, best first."""
    back = []
    for item in list(sel.dropped):
      if item.tokens <= spare and statuses.get(item.id, {}).get("status") == "dropped" and statuses[item.id]["reason"].startswith("over budget"):
        sel.kept.append(item)
        sel.dropped.remove(item)
        sel.used += item.tokens
        spare -= item.tokens
        back.append(item)
    for item in back:
      statuses.pop(item.id, None)
      for ev in events:
        if item.id in ev.get("item_ids", ()):
          idx = ev["item_ids"].index(item.id)
          ev["item_ids"].pop(idx)
          ev["pointers"].pop(idx)
    events[:] = [ev for ev in events if ev.get("item_ids", [None]) or "range" in ev]
    return spare

  def _shed_one(self, memory_sel, evidence_sel, events, statuses, reason: str) -> bool:
    for layer, sel in ((Layer.MEMORY, memory_sel), (Layer.EVIDENCE, evidence_sel)):
      victims = [i for i in sel.kept if not i.pinned]
      if victims:
        victim = min(victims, key=lambda i: (i.kind == "checklist_evidence", i.score, i.id))
        sel.kept.remove(victim)
        sel.used -= victim.tokens
        sel.dropped.append(victim)
        self._event(events, statuses, "drop", layer.value, [victim], reason)
        return True
    return False

  def _assemble(self, by_layer, tools, evidence_sel, memory_sel, user_request, inflight, tail_start, alloc: Allocation, fence, pointers,
                steps_dropped: int = 0):
    evidence = list(reversed(evidence_sel.kept))  # best last, nearest the request
    memory = sorted(memory_sel.kept, key=lambda i: (i.provenance.timestamp or 0.0, i.id))
    omitted: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for sel, name in ((evidence_sel, "evidence"), (memory_sel, "memory")):
      gone = [i for i in sel.dropped if i.kind != "recall"]
      counts[name] = len(gone)
      omitted[name] = [i.pointer() for i in gone]
    counts["conversation"] = tail_start - sum(1 for p in self._pinned if p < tail_start) + steps_dropped
    system_tokens = sum(i.tokens for i in by_layer[Layer.SYSTEM])
    tool_tokens = sum(i.tokens for i in tools)
    tail_tokens = self._tail_cost(tail_start)
    inflight_tokens = sum(i.tokens for i in inflight)
    task_items = [i for i in by_layer[Layer.TASK] if i.kind != "user_request"]
    payload_guess = (
        sum(i.tokens for i in task_items) + evidence_sel.used + memory_sel.used
        + self.counter.count(user_request.text)
    )
    stable = system_tokens + tool_tokens + tail_tokens + payload_guess
    pct = min(100, round(100 * stable / alloc.usable)) if alloc.usable else 100
    payload = render.render_payload(
        task=task_items, tools=tools, evidence=evidence, memory=memory,
        budget=render.budget_line(pct, omitted, counts, pointers), user_request=user_request.text, fence=fence,
    )
    # Cheap upper bound from cached per-line counts; the exact count only when
    # the bound is close to the limit (one full encode of the payload is the
    # single largest cost of a warm compile).
    # Each data layer is charged its fence lines and its BUDGET phrase.
    fence_cost = self._fence_tokens(fence)
    phrases = render.budget_phrases(omitted, counts, pointers)
    phrase_cost = {k: self.counter.count("; " + v) for k, v in phrases.items()}
    evidence_used = evidence_sel.used + (fence_cost if evidence_sel.kept else 0) + phrase_cost.get("evidence", 0)
    memory_used = memory_sel.used + (fence_cost if memory_sel.kept else 0) + phrase_cost.get("memory", 0)
    conversation_phrase = phrase_cost.get("conversation", 0)
    # The skeleton already holds the BUDGET line's fixed phrase.
    payload_tokens = self._skeleton + sum(i.tokens for i in task_items) + evidence_used + memory_used + conversation_phrase
    total = system_tokens + tool_tokens + tail_tokens + inflight_tokens + payload_tokens
    if total > alloc.usable * _EXACT_COUNT_MARGIN:
      payload_tokens = MESSAGE_OVERHEAD + self.counter.count(payload)
      if user_request.parts:
        payload_tokens += count_parts(user_request.parts, self.counter)
      total = system_tokens + tool_tokens + tail_tokens + inflight_tokens + payload_tokens
      exact = True
    else:
      exact = False
    totals = {
        "exact": exact,
        "system": system_tokens, "tools": tool_tokens, "conversation": tail_tokens + inflight_tokens + conversation_phrase,
        "payload": payload_tokens, "evidence": evidence_used, "memory": memory_used,
        "task": payload_tokens - evidence_used - memory_used - conversation_phrase, "total": total, "pct_used": pct,
    }
    return payload, totals


  def _texts_digest(self, texts: tuple[str, ...]) -> str:
    """``digest(list(texts))``, memoised per session."""
    return self._text_digests.get(texts, lambda: digest(list(texts)))

  @staticmethod
  def _required(by_layer, has_plan: bool) -> list[str]:
    kinds = {i.kind for i in by_layer[Layer.TASK]}
    problems = []
    if has_plan and "step" not in kinds:
      problems.append("plan present but no current step")
    if "step" in kinds and "acceptance" not in kinds:
      problems.append("step has no acceptance checklist")
    return problems

  def _manifest(self, call, alloc, items, inflight, sent, evidence_sel, memory_sel, recall, scored, events, statuses,
                input_sha, payload, conversation_sha, kept, tail_start, totals, problems, tools) -> dict[str, Any]:
    layers = {}
    for name in ("system", "task", "tools", "evidence", "memory", "conversation"):
      layers[name] = {
          "floor": alloc.floors.get(name, 0),
          "weight": round(alloc.weights.get(name, 0.0), 6),
          "budget": alloc.budgets[name],
          "requested": alloc.requested[name],
          "received": alloc.received.get(name, 0),
          "used": totals[name],
      }
    layers["slack"] = {"floor": alloc.floors["slack"], "weight": 0.0, "budget": alloc.reserve, "requested": alloc.reserve,
                       "received": 0, "used": 0}
    kept_ids = {i.id for i in evidence_sel.kept} | {i.id for i in memory_sel.kept}
    compressed = {i.id: i for i in evidence_sel.kept + memory_sel.kept if "compressed_from" in i.meta}
    rows = []
    for it in [*items, *recall, *inflight]:
      ranked = scored.get(it.id)  # evidence and memory as ranked: a dropped item's row says why
      if ranked is not None and ranked.layer is it.layer:
        it = ranked
      st = statuses.get(it.id)
      if st is None:
        if it.layer in (Layer.EVIDENCE, Layer.MEMORY):
          if it.id not in kept_ids:
            if it.kind == "recall":
              st = {"status": "in_tail", "reason": "turn already in the conversation tail"}
            else:
              continue
          else:
            st = {"status": "included"}
        else:
          st = {"status": "included"}
      row: dict[str, Any] = {
          "id": it.id, "layer": _LAYER_NAMES[it.layer], "kind": it.kind, "tokens": it.tokens,
          "score": it.score, "pointer": it.pointer(), **st,
      }
      if it.id in compressed:
        row["tokens_after"] = compressed[it.id].tokens
      if "explain" in it.meta:
        row["meta"] = {"explain": it.meta["explain"]}
      rows.append(row)
    pinned_rows = [
        {"id": self.history[p].id, "layer": "conversation", "kind": self.history[p].kind, "tokens": self.history[p].tokens,
         "score": 0.0, "pointer": self.history[p].pointer(), "status": "included",
         "reason": "pinned (pending call or confirmation)" if self.history[p].pinned else "kept: the user turn of a pending call"}
        for p in self._pinned if p < tail_start
    ]
    uris: set[str] = set()
    system_texts, tool_texts, tool_ids, system_media = [], [], [], []
    for i in items:
      if i.layer is Layer.EVIDENCE:
        if i.provenance.source and i.provenance.source.startswith("artifact://"):
          uris.add(i.provenance.source)
      elif i.layer is Layer.SYSTEM:
        system_texts.append(i.text)
        if i.parts:
          system_media.append(_item_digest(i))
    for t in tools:  # as sent: with their examples trimmed, if the ladder had to
      tool_texts.append(t.text)
      tool_ids.append(t.id)
    # Both hashes take their large parts as digests: the payload as its sha256,
    # the kept conversation as its id chain (sequence_digest), the system and
    # tool texts as the digest of their lists (memoised: they rarely change).
    payload_sha = "sha256:" + sha256_hex(payload)
    output = {"payload": payload_sha, "conversation": conversation_sha, "tools": tool_ids}
    prefix = {
        "system": self._texts_digest(tuple(system_texts)),
        "tools": self._texts_digest(tuple(tool_texts)),
        "conversation": conversation_sha,
    }
    if system_media:  # a file attached to the system instruction (absent otherwise: older hashes hold)
      prefix["system_media"] = system_media
    placed = [_item_digest(i) for i in inflight if i.meta.get(PLACEMENT) in (PLACED_FIRST, PLACED_BEFORE_REQUEST)]
    if placed:  # instruction contents ride before the payload: a change to them breaks the cache too
      prefix["instructions"] = placed
    doc = {
        "schema": MANIFEST_SCHEMA,
        "pack_id": "pack_" + input_sha.removeprefix("sha256:")[:20],
        "invocation_id": call.meta.get("invocation_id"),
        "session_id": call.meta.get("session_id"),
        "agent": call.meta.get("agent"),
        "model": call.meta.get("model"),
        "window": call.window,
        "reserve": alloc.reserve,
        "usable": alloc.usable,
        "token_scale": call.token_scale,
        "tokenizer": self.counter.describe(),
        "ranking": self._ranking,
        "policy_hash": self._policy_hash,
        "layers": layers,
        "totals": {
            "tokens": totals["total"], "pct_used": totals["pct_used"], "unallocated": alloc.unallocated,
            # Far from the limit the payload is costed as the sum of its cached
            # lines (an upper bound); near it, exactly.
            "counted": "exact" if totals["exact"] else "upper_bound",
        },
        "allocation_notes": alloc.notes,
        "tail": {
            "history_len": len(self.history),
            "start": tail_start,
            "start_id": self.history[tail_start].id if tail_start < len(self.history) else None,
            "kept": kept,
            "inflight_ids": [i.id for i in sent],
        },
        "items": rows + pinned_rows,
        "truncation_events": events,
        "artifact_uris": sorted(uris),
        "valid": not problems,
        "problems": problems,
        "input_sha256": input_sha,
        "payload_sha256": payload_sha,
        "output_sha256": digest(output),
        "prefix_sha256": digest(prefix),
    }
    if call.meta.get("lane"):  # a parallel run of the agent (branch | node path); absent otherwise
      doc["lane"] = call.meta["lane"]
    return doc


def compile_pack(
    inputs: CompileInput,
    counter: TokenCounter,
    *,
    ranker: Optional[Ranker] = None,
    history_index: Optional[HistoryIndex] = None,
) -> CompiledPack:
  """Stateless compile (replay, tests): same output as a warm session."""
  session = CompilerSession(inputs.policy, counter, ranker=ranker, history_index=history_index)
  session.extend_history(inputs.history)
  return session.compile(inputs.call)
