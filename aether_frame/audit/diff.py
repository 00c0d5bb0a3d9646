"""Context diff (seed 001, Algorithm 6.8) between two stored calls, plus the cache break.

Per layer: items added, removed or modified (same id, other content), and the
token delta; the budget utilisation of each side; and the first byte where the
rendered requests diverge (``core.request_text``), i.e. where the provider's
prompt cache stops matching, with the tokens after it that are paid in full.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..core.canonical import digest
from ..core.request_text import common_prefix_len, locate, segments_of
from .replay import Rebuilt, compare

SECTIONS = ("system", "task", "tools", "evidence", "memory", "conversation")
_IN_CONTEXT = ("included", "compressed")


@dataclass
class ItemRef:
  id: str
  tokens: int
  what: str = ""


@dataclass
class LayerDiff:
  layer: str
  added: list[ItemRef] = field(default_factory=list)
  removed: list[ItemRef] = field(default_factory=list)
  modified: list[ItemRef] = field(default_factory=list)
  used_a: int = 0
  used_b: int = 0
  budget_a: int = 0
  budget_b: int = 0
  """The manifest's ``budget``: the layer's share plus what it ``received`` from unused budget."""
  received_a: int = 0
  received_b: int = 0

  @property
  def delta(self) -> int:
    return self.used_b - self.used_a

  @property
  def changed(self) -> bool:
    return bool(self.added or self.removed or self.modified or self.delta or self.budget_a != self.budget_b
                or self.received_a != self.received_b)


@dataclass
class CacheBreak:
  identical: bool
  break_byte: Optional[int]
  """First differing byte of the rendered requests (None when identical)."""
  common_prefix_bytes: int
  bytes_a: int
  bytes_b: int
  segment: str
  """B's segment holding the break (``system``, ``tool X``, ``conversation ID``, ``payload``…)."""
  tokens_before: int
  tokens_after: int
  """Tokens of B's rendering after the break: what the provider reads uncached."""
  prefix_sha_equal: bool
  """The manifests' ``prefix_sha256`` agree (system, tools and kept history unchanged)."""


@dataclass
class DiffReport:
  a: str
  b: str
  layers: list[LayerDiff]
  total_delta: int
  tokens_a: int
  tokens_b: int
  window_a: int
  window_b: int
  usable_a: int
  usable_b: int
  cache: CacheBreak
  notes: list[str] = field(default_factory=list)

  @property
  def utilization_a(self) -> float:
    return self.tokens_a / self.window_a if self.window_a else 0.0

  @property
  def utilization_b(self) -> float:
    return self.tokens_b / self.window_b if self.window_b else 0.0

  def as_dict(self) -> dict[str, Any]:
    d = asdict(self)
    d["utilization_a"], d["utilization_b"] = round(self.utilization_a, 6), round(self.utilization_b, 6)
    for ld, obj in zip(d["layers"], self.layers):
      ld["delta"] = obj.delta
    return d


def context_items(rb: Rebuilt) -> dict[str, dict[str, tuple[str, int]]]:
  """layer → item id → (content key, tokens) for what the pack put in front of the model."""
  body = rb.stored_body
  out: dict[str, dict[str, tuple[str, int]]] = {s: {} for s in SECTIONS}
  hashes = rb.input_hashes
  rows = {r["id"]: r for r in body.get("items", [])}
  for r in body.get("items", []):
    if r.get("status") not in _IN_CONTEXT or r.get("layer") == "conversation":
      continue
    src = r["id"].removeprefix("recall:") if r.get("kind") == "recall" else r["id"]
    key = hashes.get(src, "?")
    tokens = r.get("tokens_after", r.get("tokens")) or 0
    if r.get("status") == "compressed":
      key += f"~compressed:{r.get('tokens_after')}"
    out.setdefault(r["layer"], {})[r["id"]] = (key, tokens)
  history = {g.id: g for g in rb.inputs.history}
  for gid in rb.pack.conversation_ids:
    out["conversation"][gid] = (hashes.get(gid, "?"), history[gid].tokens or 0)
  steps = {i.id: i for i in rb.inputs.call.inflight}
  for iid in body.get("tail", {}).get("inflight_ids", []):
    step = steps.get(iid)
    # By what the model reads: a step's ``pinned`` flag (the latest step is) changes as the loop moves on.
    key = digest([step.role, step.text, step.parts]) if step is not None else hashes.get(iid, "?")
    out["conversation"][iid] = (key, (rows.get(iid) or {}).get("tokens") or 0)
  return out


def cache_break(a: Rebuilt, b: Rebuilt) -> CacheBreak:
  seg_a, seg_b = segments_of(a.inputs, a.pack), segments_of(b.inputs, b.pack)
  ta, tb = "".join(t for _, t in seg_a), "".join(t for _, t in seg_b)
  ba, bb = ta.encode("utf-8", "surrogatepass"), tb.encode("utf-8", "surrogatepass")
  common = common_prefix_len(ba, bb)
  identical = ba == bb
  counter = b.counter
  before = bb[:common].decode("utf-8", errors="ignore")
  after = bb[common:].decode("utf-8", errors="ignore")
  return CacheBreak(
      identical=identical,
      break_byte=None if identical else common,
      common_prefix_bytes=common,
      bytes_a=len(ba),
      bytes_b=len(bb),
      segment="none" if identical else locate(seg_b, common)[1],
      tokens_before=counter.count(before),
      tokens_after=counter.count(after),
      prefix_sha_equal=a.stored_body.get("prefix_sha256") == b.stored_body.get("prefix_sha256"),
  )


def context_diff(a: Rebuilt, b: Rebuilt) -> DiffReport:
  items_a, items_b = context_items(a), context_items(b)
  la, lb = a.stored_body.get("layers", {}), b.stored_body.get("layers", {})
  layers = []
  for s in SECTIONS:
    ia, ib = items_a.get(s, {}), items_b.get(s, {})
    ld = LayerDiff(
        s, used_a=la.get(s, {}).get("used", 0), used_b=lb.get(s, {}).get("used", 0),
        budget_a=la.get(s, {}).get("budget", 0), budget_b=lb.get(s, {}).get("budget", 0),
        received_a=la.get(s, {}).get("received", 0), received_b=lb.get(s, {}).get("received", 0),
    )
    ld.added = [ItemRef(i, ib[i][1]) for i in ib if i not in ia]
    ld.removed = [ItemRef(i, ia[i][1]) for i in ia if i not in ib]
    for i in ia:
      if i in ib and ia[i] != ib[i]:
        what = "content changed" if ia[i][0].split("~")[0] != ib[i][0].split("~")[0] else (
            "compression changed" if ia[i][0] != ib[i][0] else "tokens changed")
        ld.modified.append(ItemRef(i, ib[i][1] - ia[i][1], what))
    layers.append(ld)
  notes = []
  for side, rb in (("A", a), ("B", b)):
    if compare(rb.stored_body, rb.pack.manifest)[0]:
      notes.append(f"{side} does not replay identically with this code; its rendered request is today's rebuild")
  ta = (a.stored_body.get("totals") or {}).get("tokens", 0)
  tb = (b.stored_body.get("totals") or {}).get("tokens", 0)
  return DiffReport(
      a=a.call.label, b=b.call.label, layers=layers,
      total_delta=sum(ld.delta for ld in layers),
      tokens_a=ta, tokens_b=tb,
      window_a=a.stored_body.get("window", 0), window_b=b.stored_body.get("window", 0),
      usable_a=a.stored_body.get("usable", 0), usable_b=b.stored_body.get("usable", 0),
      cache=cache_break(a, b), notes=notes,
  )


def format_diff(d: DiffReport, *, max_items: int = 12) -> str:
  lines = [f"A: {d.a}", f"B: {d.b}", ""]
  lines.append(f"{'layer':<13}{'used A':>8}{'used B':>8}{'delta':>8}{'budget A':>10}{'budget B':>10}  items +/-/~")
  def budget(total: int, received: int) -> str:
    """As inspect shows it: the share, plus what the layer took from unused budget."""
    return f"{total - received}+{received}" if received else str(total)

  for ld in d.layers:
    lines.append(
        f"{ld.layer:<13}{ld.used_a:>8}{ld.used_b:>8}{ld.delta:>+8}"
        f"{budget(ld.budget_a, ld.received_a):>10}{budget(ld.budget_b, ld.received_b):>10}"
        f"  +{len(ld.added)} -{len(ld.removed)} ~{len(ld.modified)}"
    )
  lines.append(f"{'total':<13}{d.tokens_a:>8}{d.tokens_b:>8}{d.tokens_b - d.tokens_a:>+8}")
  lines.append("")
  lines.append(
      f"utilisation: A {d.utilization_a:.1%} of {d.window_a} ({d.tokens_a / d.usable_a if d.usable_a else 0:.1%} of usable {d.usable_a}),"
      f" B {d.utilization_b:.1%} of {d.window_b} ({d.tokens_b / d.usable_b if d.usable_b else 0:.1%} of usable {d.usable_b})"
  )
  for ld in d.layers:
    if not (ld.added or ld.removed or ld.modified):
      continue
    lines.append(f"[{ld.layer}]")
    for sign, refs in (("+", ld.added), ("-", ld.removed)):
      for r in refs[:max_items]:
        lines.append(f"  {sign} {r.id} ({r.tokens} tokens)")
      if len(refs) > max_items:
        lines.append(f"  {sign} … {len(refs) - max_items} more")
    for r in ld.modified[:max_items]:
      lines.append(f"  ~ {r.id}: {r.what} ({r.tokens:+} tokens)")
  c = d.cache
  lines.append("")
  if c.identical:
    lines.append(f"cache: rendered requests are identical ({c.bytes_b} bytes)")
  else:
    lines.append(
        f"cache break at byte {c.break_byte} of B ({c.bytes_b} bytes; common prefix {c.common_prefix_bytes} bytes,"
        f" ~{c.tokens_before} tokens cacheable), in {c.segment}; {c.tokens_after} tokens after it"
    )
  lines.append(f"prefix_sha256 {'unchanged' if c.prefix_sha_equal else 'changed'} (system, tools, kept history)")
  for n in d.notes:
    lines.append(f"note: {n}")
  return "\n".join(lines)
