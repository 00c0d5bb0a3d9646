"""A canonical linear rendering of the request a pack produces, for cache-break analysis.

Providers cache a prompt by prefix, in request order: system instruction, tool
declarations, then the contents. This renders exactly those, one labelled
segment each, from the compile input and output alone (no ADK objects), so
two calls can be compared byte by byte: the first differing byte is where the
prompt cache breaks. Byte offsets are in this rendering, not the provider's
wire format; what they locate (which segment, how much after it) carries over.

Layout, UTF-8:
  ``<<system>>\\n{text}\\n`` per system item,
  ``<<tool>>\\n{declaration JSON}\\n`` per tool,
  ``<<{role}>>\\n{canonical JSON of parts}\\n`` per kept conversation group,
  the payload message (``user``, text part first, then the user's non-text parts),
  then the in-flight steps of the current invocation that were sent, as in the real request.
  In-flight items placed elsewhere (``meta[PLACEMENT]``, ADK's instruction
  contents) sit where the request carries them: first ahead of the
  conversation, before_request just ahead of the payload.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .canonical import canonical_json
from .compiler import CompiledPack, CompileInput
from .items import PLACED_BEFORE_REQUEST, PLACED_FIRST, PLACEMENT, Item, Layer


def _segment(label: str, body: str) -> str:
  return f"<<{label}>>\n{body}\n"


def _parts_of(item: Item) -> list[dict[str, Any]]:
  return item.parts if item.parts is not None else [{"text": item.text}]


def render_segments(
    *,
    system: Sequence[str],
    tools: Sequence[str],
    conversation: Sequence[Item],
    payload: str,
    payload_parts: Optional[Sequence[dict[str, Any]]] = None,
    inflight: Sequence[Item] = (),
    tool_names: Optional[Sequence[str]] = None,
    system_parts: Optional[Sequence[Optional[list[dict[str, Any]]]]] = None,
) -> list[tuple[str, str]]:
  """(what, rendered text) per segment, in request order; joined they are the request text.

  ``system_parts``: per system item, its non-text parts (a file attached to the
  instruction), rendered after its text; None for a text-only item.
  """
  names = list(tool_names) if tool_names is not None else [str(i) for i in range(len(tools))]
  extra = list(system_parts) if system_parts is not None else [None] * len(system)
  out = [("system", _segment("system", s + (canonical_json(p) if p else ""))) for s, p in zip(system, extra)]
  out += [(f"tool {n}", _segment("tool", t)) for n, t in zip(names, tools)]

  def steps(where: Optional[str]) -> list[tuple[str, str]]:
    return [(f"inflight {i.id}", _segment(i.role or "user", canonical_json(_parts_of(i))))
            for i in inflight if _placement(i) == where]

  out += steps(PLACED_FIRST)
  out += [(f"conversation {g.id}", _segment(g.role or "user", canonical_json(_parts_of(g)))) for g in conversation]
  out += steps(PLACED_BEFORE_REQUEST)
  out.append(("payload", _segment("user", canonical_json([{"text": payload}, *(payload_parts or ())]))))
  out += steps(None)
  return out


def _placement(item: Item) -> Optional[str]:
  where = item.meta.get(PLACEMENT)
  return where if where in (PLACED_FIRST, PLACED_BEFORE_REQUEST) else None


def segments_of(inputs: CompileInput, pack: CompiledPack) -> list[tuple[str, str]]:
  """The segments of the request built from ``inputs`` and their compiled ``pack``."""
  items = inputs.call.items
  by_id = {g.id: g for g in inputs.history}
  user_request = next(i for i in items if i.layer is Layer.TASK and i.kind == "user_request")
  tools = [i for i in items if i.layer is Layer.TOOLS]
  return render_segments(
      system=[i.text for i in items if i.layer is Layer.SYSTEM],
      tools=[t.text for t in tools],
      tool_names=[t.meta.get("name", t.id) for t in tools],
      conversation=[by_id[g] for g in pack.conversation_ids],
      payload=pack.payload,
      payload_parts=user_request.parts,
      inflight=_sent(inputs.call.inflight, pack.inflight_ids),
      system_parts=[i.parts for i in items if i.layer is Layer.SYSTEM],
  )


def _sent(inflight: Sequence[Item], ids: Sequence[str]) -> list[Item]:
  sent = set(ids)
  return [i for i in inflight if i.id in sent]


def request_text(inputs: CompileInput, pack: CompiledPack) -> str:
  return "".join(text for _, text in segments_of(inputs, pack))


def locate(segments: Sequence[tuple[str, str]], byte_offset: int) -> tuple[int, str]:
  """(index, what) of the segment holding ``byte_offset``; (len, "end") past the end."""
  pos = 0
  for i, (what, text) in enumerate(segments):
    pos += len(text.encode("utf-8", "surrogatepass"))
    if byte_offset < pos:
      return i, what
  return len(segments), "end"


def common_prefix_len(a: bytes, b: bytes) -> int:
  """Length of the longest common prefix, in bytes."""
  n = min(len(a), len(b))
  lo, step = 0, 4096
  while lo < n:  # skip equal blocks fast, then bisect inside the first unequal one
    hi = min(n, lo + step)
    if a[lo:hi] == b[lo:hi]:
      lo = hi
      continue
    while hi - lo > 1:
      mid = (lo + hi) // 2
      if a[lo:mid] == b[lo:mid]:
        lo = mid
      else:
        hi = mid
    return lo if a[lo] != b[lo] else lo + 1
  return n
