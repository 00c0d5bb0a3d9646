"""One self-contained HTML page per session: where each call's window went.

A stacked bar per call, layers in request order (system, tools, conversation,
then the payload's task, evidence and memory) against the window, with the
output reserve hatched; the point where the prompt cache broke relative to
the previous call; and the call's truncation events. No scripts, no external
assets: the file opens anywhere and survives being mailed around.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Optional

from ..core import manifest as manifest_doc
from ..core.canonical import digest
from .diff import CacheBreak, cache_break
from .replay import Rebuilt, _without, compare, new_rebuilds, rebuild
from .source import LocationError, SessionRef

BAR_ORDER = ("system", "tools", "conversation", "task", "evidence", "memory")
COLORS = {
    "system": "#5b6abf", "tools": "#8e6cc4", "conversation": "#3a9a8a",
    "task": "#d08b2c", "evidence": "#c6524a", "memory": "#6b9b3a",
}


@dataclass
class CallRow:
  label: str
  version: Optional[int]
  body: dict[str, Any]
  cache: Optional[CacheBreak] = None
  replay: str = "not replayed"
  error: Optional[str] = None
  events: list[dict[str, Any]] = field(default_factory=list)
  first: bool = False
  """The first call of its agent here: nothing of its own before it to share a cache with."""
  restored_from: Optional[int] = None
  """Not a call: the version a rewind saved again (``Runner.rewind_async`` restores each
  artifact of the session to its version at the rewind point, the manifest included)."""


def _doc_key(doc: Any) -> Optional[str]:
  try:
    return digest(doc)
  except (TypeError, ValueError, RecursionError):  # not a manifest: verify names why, below
    return None


async def collect(source, ref: SessionRef) -> list[CallRow]:
  """Verifies and rebuilds each call; a call that cannot be rebuilt still gets its bar.

  One that cannot even be read (not JSON) gets an empty bar saying so.
  """
  rebuilds = new_rebuilds()
  rows: list[CallRow] = []
  # Each agent's cache follows its own calls (its instruction and tools lead the
  # prompt): a session holds several agents' calls (transfers, AgentTool children).
  prev: dict[str, Optional[Rebuilt]] = {}
  seen: dict[str, int] = {}  # manifest -> the version that stored it first
  for v in await source.versions(ref):
    try:
      call = await source.load(ref, v)
    except LocationError as e:
      rows.append(CallRow(f"{ref.label()} v{v}", v, {}, error=_without(str(e), f"{source.uri} {ref.label()} v{v}")))
      prev = {agent: None for agent in prev}  # whose call it was is unknown
      continue
    key = _doc_key(call.doc)
    if key is not None and key in seen:  # no two calls share a runtime section: a rewind's copy
      rows.append(CallRow(call.label, v, {}, restored_from=seen[key]))
      continue
    if key is not None:
      seen[key] = v
    doc = manifest_doc.verify(call.doc, where=call.where)  # a tampered manifest stops the report
    row = CallRow(call.label, v, manifest_doc.body_of(doc), events=list(doc.get("truncation_events") or []))
    agent = f'{doc.get("agent") or "?"} {doc.get("lane") or ""}'.strip()  # parallel runs are told apart
    row.first = agent not in prev
    try:
      rb = await rebuild(source, call, rebuilds=rebuilds)
    except manifest_doc.ManifestIntegrityError:
      raise
    except Exception as e:
      row.error = f"{type(e).__name__}: {_without(str(e), call.where)}"
      prev[agent] = None
    else:
      row.replay = "identical" if not compare(rb.stored_body, rb.pack.manifest)[0] else "differs"
      if prev.get(agent) is not None:
        row.cache = cache_break(prev[agent], rb)
      prev[agent] = rb
    rows.append(row)
  return rows


def _e(x: Any) -> str:
  return html.escape(str(x), quote=True)


def _event_line(ev: dict[str, Any]) -> str:
  n = len(ev.get("item_ids") or [])
  rng = ev.get("range")
  if rng:
    what = f"groups {rng.get('start')}–{rng.get('end')}"
  else:
    what = f"{n} item{'s' if n != 1 else ''}"
  tokens = ev.get("tokens")
  if tokens is None and ev.get("tokens_before") is not None:
    tokens = f"{ev['tokens_before']}→{ev.get('tokens_after')}"
  extra = f", {tokens} tokens" if tokens is not None else ""
  return f"<li><b>{_e(ev.get('stage'))}</b> {_e(ev.get('layer'))}: {_e(ev.get('reason'))} ({_e(what)}{_e(extra)})</li>"


def _bar(row: CallRow) -> str:
  body = row.body
  window = max(1, int(body.get("window") or 1))
  layers = body.get("layers", {})
  segs = []
  for name in BAR_ORDER:
    used = int(layers.get(name, {}).get("used", 0))
    budget = int(layers.get(name, {}).get("budget", 0))
    received = int(layers.get(name, {}).get("received", 0))
    if used <= 0:
      continue
    pct = 100.0 * used / window
    of = f"{budget - received} budget + {received} unused by other layers" if received else f"{budget} budget"
    segs.append(
        f'<div class="seg" style="width:{pct:.3f}%;background:{COLORS[name]}" '
        f'title="{_e(name)}: {used} used of {of}"></div>'
    )
  reserve = int(body.get("reserve") or 0)
  total = int((body.get("totals") or {}).get("tokens", 0))
  free = max(0, window - total - reserve)
  segs.append(f'<div class="seg free" style="width:{100.0 * free / window:.3f}%" title="unused: {free}"></div>')
  segs.append(f'<div class="seg reserve" style="width:{100.0 * reserve / window:.3f}%" title="reserved for output: {reserve}"></div>')
  marker = ""
  c = row.cache
  if c is not None and not c.identical and c.bytes_b:
    at = 100.0 * total / window * (c.common_prefix_bytes / c.bytes_b)
    marker = f'<div class="break" style="left:{at:.3f}%" title="cache break at byte {c.break_byte}"></div>'
  return f'<div class="bar">{"".join(segs)}{marker}</div>'


def _cache_cell(row: CallRow, first: bool) -> str:
  c = row.cache
  if row.error:
    return f'<span class="warn">not rebuilt: {_e(row.error[:160])}</span>'
  if c is None:  # no break computed: the first call, or the one before it was not rebuilt
    return "first call of this agent (cold cache)" if first else "cache break unknown (previous call not rebuilt)"
  if c.identical:
    return "prefix identical"
  return (f"breaks at byte {c.break_byte:,} of {c.bytes_b:,} in <code>{_e(c.segment)}</code>: "
          f"~{c.tokens_before:,} tokens cacheable, {c.tokens_after:,} after")


def render_html(ref: SessionRef, rows: list[CallRow], *, title: Optional[str] = None) -> str:
  title = title or f"aether-frame · {ref.label()}"
  legend = "".join(f'<span class="key"><i style="background:{COLORS[n]}"></i>{n}</span>' for n in BAR_ORDER)
  legend += '<span class="key"><i class="free"></i>unused</span><span class="key"><i class="reserve"></i>output reserve</span>'
  legend += '<span class="key"><i class="breakkey"></i>cache break</span>'
  body_rows = []
  n_events = 0
  calls = 0
  for row in rows:
    if row.restored_from is not None:
      body_rows.append(
          f'<tr><td class="call">v{_e(row.version)}</td><td class="barcell" colspan="2"><div class="meta">not a call: '
          f'a rewind saved v{_e(row.restored_from)} again (Runner.rewind_async restores the manifest of the rewind '
          f'point)</div></td></tr>')
      continue
    calls += 1
    b = row.body
    totals = b.get("totals") or {}
    events = row.events
    n_events += len(events)
    ev_html = ""
    if events:
      ev_html = f'<details><summary>✂ {len(events)} truncation event{"s" if len(events) != 1 else ""}</summary><ul>{"".join(_event_line(e) for e in events)}</ul></details>'
    status = row.replay if not row.error else "error"
    body_rows.append(
        f'<tr><td class="call">call {calls}<br><small>v{_e(row.version)} · {_e(b.get("agent") or "?")}'
        f'<br>{_e(b.get("pack_id", ""))}</small></td>'
        f'<td class="barcell">{_bar(row)}<div class="meta">{totals.get("tokens", 0):,} / {b.get("window", 0):,} tokens'
        f' ({100.0 * totals.get("tokens", 0) / max(1, b.get("window") or 1):.1f}% of window, usable {b.get("usable", 0):,})'
        f' · replay: <span class="{_e(status)}">{_e(status)}</span></div>{ev_html}</td>'
        f'<td class="cache">{_cache_cell(row, row.first)}</td></tr>'
    )
  head = next((r.body for r in rows if r.body), {})
  restored = len(rows) - calls
  summary = (f"{calls} calls · window {head.get('window', 0):,} tokens · "
             f"{n_events} truncation events · tokenizer {_e((head.get('tokenizer') or {}).get('name', '?'))}"
             + (f" · {restored} version{'s' if restored != 1 else ''} a rewind saved again" if restored else ""))
  return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>
body{{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fafafa}}
h1{{font-size:20px;margin:0 0 4px}} .sub{{color:#666;margin-bottom:12px}}
.legend{{margin:8px 0 16px}} .key{{margin-right:14px;white-space:nowrap}}
.key i{{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border:1px solid #0002}}
table{{border-collapse:collapse;width:100%;background:#fff}} td{{border-top:1px solid #e4e4e4;padding:6px 8px;vertical-align:top}}
td.call{{width:120px;white-space:nowrap}} td.cache{{width:280px;font-size:12px}} td.barcell{{min-width:420px}}
.bar{{position:relative;display:flex;height:22px;border:1px solid #bbb;background:#fff}}
.seg{{height:100%}} .free,.key i.free{{background:#f3f3f3}}
.reserve,.key i.reserve{{background:repeating-linear-gradient(45deg,#ddd 0 4px,#f7f7f7 4px 8px)}}
.break{{position:absolute;top:-4px;bottom:-4px;width:0;border-left:3px solid #e0115f}}
.key i.breakkey{{background:#e0115f;width:3px}}
.meta{{font-size:12px;color:#555;margin-top:3px}} .identical{{color:#2a7d2a}} .differs,.error,.warn{{color:#b3261e}}
details{{font-size:12px;margin-top:3px}} ul{{margin:4px 0 0 18px;padding:0}} code{{font-size:11px}}
</style></head><body>
<h1>{_e(title)}</h1><div class="sub">{summary}</div>
<div class="legend">{legend}</div>
<table><tbody>
{"".join(body_rows)}
</tbody></table>
</body></html>
"""


async def session_report(source, ref: SessionRef) -> str:
  return render_html(ref, await collect(source, ref))
