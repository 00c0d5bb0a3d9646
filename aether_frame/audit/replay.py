"""Replay: rebuild every stored pack with today's code and say what changed, and why.

A call replays *identical* when the rebuilt manifest body is byte-identical
to the stored one (runtime section and the ``inputs`` section aside). When it
is not, the difference is reported the way a person asks about it: which
layer's budget or usage moved, which item changed status, and the likely
cause (policy, tokenizer, costing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..core import manifest as manifest_doc
from ..core.canonical import canonical_json
from ..core.compiler import CompiledPack, CompileInput
from ..core.costing import EstimatingCounter, MediaCounter, TokenCounter, media_rules_named
from ..core.policy import PackPolicy
from . import inputs as replay_inputs
from .source import StoredCall
from .warm import SessionRebuilds

LAYERS = ("system", "task", "tools", "evidence", "memory", "conversation", "slack")
_IGNORED = (replay_inputs.INPUTS_KEY,)


# ------------------------------------------------------------------- rebuild
def counter_for(tokenizer: dict[str, Any]) -> TokenCounter:
  """The counter a manifest was costed with, as this machine has it (media rules included)."""
  name = str(tokenizer.get("name", ""))
  if name.startswith("tiktoken:"):
    from ..tokenizers import get_counter
    base = get_counter(name.split(":", 1)[1])
  elif name.startswith("estimate:"):
    base = EstimatingCounter(
        safety_factor=float(tokenizer.get("safety_factor", 1.25)),
        fallback_for=tokenizer.get("fallback_for"), reason=tokenizer.get("reason"),
    )
  else:
    raise ValueError(f"unknown tokenizer {name!r} in manifest")
  media = tokenizer.get("media")
  if media is None:
    return base
  return MediaCounter(base, media_rules_named(str(media)))


def new_rebuilds(*, cold: bool = False) -> SessionRebuilds:
  """For one stored session's calls, ranked with the plugin's defaults: ``default_ranker()``
  and its own history index if it has one."""
  from ..core.rank import ScanHistoryIndex
  from ..retrieval import default_ranker
  ranker = default_ranker()
  make = getattr(ranker, "new_history_index", None)
  return SessionRebuilds(ranker, make if callable(make) else (lambda: ScanHistoryIndex(ranker)), cold=cold)


def parse_override(text: Optional[str]) -> Optional[dict[str, Any]]:
  """``--policy-override``: inline JSON, or ``@file.json``."""
  if not text:
    return None
  if text.startswith("@"):
    path = text[1:]
    if not path:
      raise ValueError("--policy-override @: name the file after the @ (@policy.json)")
    try:
      with open(path, encoding="utf-8") as f:
        text = f.read()
    except UnicodeDecodeError as e:
      raise ValueError(f"--policy-override {text}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
      raise ValueError(f"--policy-override {text}: {e.strerror or type(e).__name__}") from None
  value = json.loads(text)
  if not isinstance(value, dict):
    raise ValueError("--policy-override must be a JSON object of PackPolicy fields")
  return value


def _merge(base: Any, over: Any) -> Any:
  if isinstance(base, dict) and isinstance(over, dict):
    return {k: _merge(base.get(k), v) if k in base else v for k, v in {**base, **over}.items()}
  return over


def apply_override(policy: PackPolicy, override: Optional[dict[str, Any]]) -> PackPolicy:
  """``policy`` with ``override``'s fields; the override meets today's limits, the stored rest stays as stored."""
  if not override:
    return policy
  return PackPolicy.from_stored(_merge(policy.model_dump(mode="json"), override), given=override.keys())


@dataclass
class Rebuilt:
  call: StoredCall
  inputs: CompileInput
  pack: CompiledPack
  counter: TokenCounter
  input_hashes: dict[str, str]
  """item id → blob hash, for call items, in-flight items and history groups."""
  stored_policy: dict[str, Any]
  """The policy JSON as stored (before any override)."""

  @property
  def stored_body(self) -> dict[str, Any]:
    return {k: v for k, v in manifest_doc.body_of(self.call.doc).items() if k not in _IGNORED}


async def resolve_inputs(source, call: StoredCall, memo: Optional[dict] = None) -> tuple[CompileInput, dict[str, str], dict[str, Any]]:
  """Verifies the manifest and loads its content-addressed inputs (``memo``: see ``inputs.decode``)."""
  doc = manifest_doc.verify(call.doc, where=call.where)
  from ..core.compiler import MANIFEST_SCHEMA
  if doc.get("schema") != MANIFEST_SCHEMA:  # another aether-frame's decisions: not a "difference"
    raise ValueError(f"{call.where}: manifest schema {doc.get('schema')!r}, this aether-frame replays {MANIFEST_SCHEMA}")
  section = doc.get(replay_inputs.INPUTS_KEY)
  if section is None:
    raise ValueError(f"{call.where}: manifest has no replayable inputs (written without compile_input)")
  ref = call.ref
  blobs = await source.blobs(ref.app, ref.user, replay_inputs.first_keys(section))
  while need := replay_inputs.missing_chunks(section, blobs):  # one round trip per tree level
    blobs = await source.blobs(ref.app, ref.user, need)
    if any(k not in blobs for k in need):
      missing = next(k for k in need if k not in blobs)
      raise replay_inputs.BlobIntegrityError(f"{call.where}: history chunk {missing} is missing from the store")
  blobs = await source.blobs(ref.app, ref.user, replay_inputs.all_keys(section, blobs))
  try:
    ci = replay_inputs.decode(section, blobs, memo)
  except replay_inputs.BlobIntegrityError as e:
    hint = ""
    if "missing" in str(e) and getattr(source, "blob_source", True) is None:
      hint = " (a lone manifest file: pass --blobs gs://BUCKET/APP/USER or the FileArtifactService folder of its user)"
    raise replay_inputs.BlobIntegrityError(f"{call.where}: {e}{hint}") from None
  hist_keys = replay_inputs.history_keys(section, blobs)
  hashes = {it.id: k for it, k in zip(ci.call.items, section["items"])}
  hashes.update({it.id: k for it, k in zip(ci.call.inflight, section["inflight"])})
  hashes.update({it.id: k for it, k in zip(ci.history, hist_keys)})
  return ci, hashes, json.loads(blobs[section["policy"]])


async def rebuild(source, call: StoredCall, *, rebuilds: Optional[SessionRebuilds] = None,
                  policy_override=None) -> Rebuilt:
  """``call``'s pack as this code compiles it. ``rebuilds``: shared by the calls of one session,
  taken in order (each then extends the previous call's compiler session); none: a cold compile."""
  if rebuilds is None:
    rebuilds = new_rebuilds(cold=True)
  ci, hashes, stored_policy = await resolve_inputs(source, call, rebuilds.memo)
  ci = ci.model_copy(update={"policy": apply_override(ci.policy, policy_override)})
  tokenizer = call.doc.get("tokenizer") or {}
  counter = counter_for(tokenizer)
  stream = (call.doc.get("agent"), call.doc.get("lane"), ci.policy.policy_hash(), canonical_json(tokenizer))
  pack = rebuilds.compile(ci, [hashes[it.id] for it in ci.history], counter, stream)
  return Rebuilt(call, ci, pack, counter, hashes, stored_policy)


# ------------------------------------------------------------------- compare
@dataclass
class CallReport:
  label: str
  version: Optional[int]
  status: str
  """``identical``, ``different`` or ``refused`` (integrity) / ``error``."""
  differences: list[str] = field(default_factory=list)
  layers: list[str] = field(default_factory=list)
  causes: list[str] = field(default_factory=list)
  error: Optional[str] = None

  def as_dict(self) -> dict[str, Any]:
    return dict(self.__dict__)


def _fmt(v: Any) -> str:
  return canonical_json(v) if isinstance(v, (dict, list)) else str(v)


_ADDED_LAYER_FIELDS = ("received",)
"""Layer fields added to manifest@1 since its first release (``received``: the budget a layer
took from others' unused tokens, which its ``budget`` already counted)."""


def _as_recorded(stored: dict[str, Any], rebuilt: dict[str, Any]) -> dict[str, Any]:
  """``rebuilt`` without what a stored manifest predates: an older manifest is compared on
  what it recorded, not reported different for a new field."""
  s_layers, r_layers = stored.get("layers"), rebuilt.get("layers")
  if not isinstance(s_layers, dict) or not isinstance(r_layers, dict):
    return rebuilt
  layers = {}
  for name, lay in r_layers.items():
    old = s_layers.get(name)
    if isinstance(old, dict) and isinstance(lay, dict):
      lay = {k: v for k, v in lay.items() if k in old or k not in _ADDED_LAYER_FIELDS}
    layers[name] = lay
  return {**rebuilt, "layers": layers, "items": _rows_as_recorded(stored, rebuilt.get("items"))}


_RANKED_LAYERS = ("evidence", "memory")


def _rows_as_recorded(stored: dict[str, Any], rows: Any) -> Any:
  """Evidence and memory rows without the ranker's score and explain when the stored manifest
  predates them: its rows were built from the items as given (score 0.0, no explain) although a
  ranker ordered them. Recall rows always carried theirs."""
  s_rows = stored.get("items")
  if not isinstance(rows, list) or not isinstance(s_rows, list):
    return rows
  ranked = [r for r in s_rows if isinstance(r, dict) and r.get("layer") in _RANKED_LAYERS and r.get("kind") != "recall"]
  ranker = (stored.get("ranking") or {}).get("ranker") if isinstance(stored.get("ranking"), dict) else None
  if not ranked or ranker is None or any("meta" in r for r in ranked):
    return rows
  by_id = {r.get("id"): r for r in ranked}
  out = []
  for row in rows:
    old = by_id.get(row.get("id")) if isinstance(row, dict) else None
    if old is not None and row.get("layer") == old.get("layer"):
      row = {k: v for k, v in row.items() if k != "meta"}
      row["score"] = old.get("score")
    out.append(row)
  return out


def compare(stored: dict[str, Any], rebuilt: dict[str, Any], *, stored_policy: Optional[dict] = None,
            rebuilt_policy: Optional[dict] = None) -> tuple[list[str], list[str], list[str]]:
  """(differences, layers that differ, likely causes); empty when byte-identical."""
  rebuilt = _as_recorded(stored, rebuilt)
  if canonical_json(stored) == canonical_json(rebuilt):
    return [], [], []
  diffs: list[str] = []
  layers: list[str] = []

  def layer_hit(name: str) -> None:
    if name not in layers:
      layers.append(name)

  s_layers, r_layers = stored.get("layers", {}), rebuilt.get("layers", {})
  for name in list(dict.fromkeys([*LAYERS, *s_layers, *r_layers])):
    a, b = s_layers.get(name, {}), r_layers.get(name, {})
    changed = [f"{k} {a.get(k)} → {b.get(k)}" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    if changed:
      layer_hit(name)
      diffs.append(f"layer {name}: " + ", ".join(changed))

  s_items = {r["id"]: r for r in stored.get("items", [])}
  r_items = {r["id"]: r for r in rebuilt.get("items", [])}
  for iid in dict.fromkeys([*s_items, *r_items]):
    a, b = s_items.get(iid), r_items.get(iid)
    layer = (a or b).get("layer", "?")
    if a == b:
      continue
    layer_hit(layer)
    if a is None:
      diffs.append(f"layer {layer}: item {iid} now appears ({_status(b)})")
    elif b is None:
      diffs.append(f"layer {layer}: item {iid} no longer appears (was {_status(a)})")
    else:
      keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
      what = ", ".join(f"{k} {_fmt(a.get(k))} → {_fmt(b.get(k))}" for k in keys if k not in ("reason", "meta"))
      if a.get("status") != b.get("status"):
        what = f"{_status(a)} → {_status(b)}" + (f"; {what}" if what and not what.startswith("status") else "")
      elif "meta" in keys and not what:
        what = "score explanation changed"
      diffs.append(f"layer {layer}: item {iid}: {what}")

  s_ev, r_ev = stored.get("truncation_events", []), rebuilt.get("truncation_events", [])
  if s_ev != r_ev:
    by_layer: dict[str, list[int]] = {}
    for i, evs in enumerate((s_ev, r_ev)):
      for ev in evs:
        by_layer.setdefault(ev.get("layer", "?"), [0, 0])[i] += 1
    for name, (na, nb) in by_layer.items():
      if [e for e in s_ev if e.get("layer") == name] != [e for e in r_ev if e.get("layer") == name]:
        layer_hit(name)
        diffs.append(f"layer {name}: truncation events differ ({na} stored, {nb} rebuilt)")

  digests = []
  for key in dict.fromkeys([*stored, *rebuilt]):
    if key in ("layers", "items", "truncation_events") or stored.get(key) == rebuilt.get(key):
      continue
    if key.endswith(("sha256", "_hash")) or key == "pack_id":
      digests.append(key)
    else:
      diffs.append(f"{key}: {_short(stored.get(key))} → {_short(rebuilt.get(key))}")
  if digests:
    diffs.append("digests differ: " + ", ".join(digests))

  return diffs, layers, _causes(stored, rebuilt, stored_policy, rebuilt_policy)


def _status(row: dict[str, Any]) -> str:
  st = row.get("status", "?")
  return f"{st} ({row['reason']})" if row.get("reason") else st


def _short(v: Any, n: int = 120) -> str:
  text = _fmt(v)
  return text if len(text) <= n else text[:n - 1] + "…"


def _causes(stored, rebuilt, stored_policy, rebuilt_policy) -> list[str]:
  causes = []
  if stored.get("policy_hash") != rebuilt.get("policy_hash"):
    changed = []
    if stored_policy is not None and rebuilt_policy is not None:
      changed = _changed_paths(stored_policy, rebuilt_policy)
    causes.append("policy differs" + (f" ({', '.join(changed)})" if changed else " (the policy now hashes differently: new or changed policy fields in this code)"))
  if stored.get("tokenizer") != rebuilt.get("tokenizer"):
    causes.append(f"tokenizer differs: {_tok(stored.get('tokenizer'))} → {_tok(rebuilt.get('tokenizer'))}")
  if stored.get("ranking") != rebuilt.get("ranking"):
    causes.append(f"ranking differs: {_fmt(stored.get('ranking'))} → {_fmt(rebuilt.get('ranking'))}")
  if not causes:
    if stored.get("input_sha256") != rebuilt.get("input_sha256"):
      causes.append("same policy and tokenizer, but the costed inputs hash differently: item costing or hashing changed in this code")
    else:
      causes.append("same inputs, different decisions: the compiler's allocation, ranking or rendering changed in this code")
  return causes


def _tok(desc: Any) -> str:
  if not isinstance(desc, dict):
    return str(desc)
  text = f"{desc.get('name')} {desc.get('version')}"
  if desc.get("exact") is False:
    text += " (estimated" + (f"; {desc['reason'][:80]}" if desc.get("reason") else "") + ")"
  return text


def _changed_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    out = []
    for k in dict.fromkeys([*a, *b]):
      out += _changed_paths(a.get(k), b.get(k), f"{prefix}{k}.")
    return out
  return [] if a == b else [f"{prefix.rstrip('.')} {_fmt(a)} → {_fmt(b)}"]


async def replay_call(source, call: StoredCall, *, rebuilds: Optional[SessionRebuilds] = None,
                      policy_override=None) -> CallReport:
  try:
    rb = await rebuild(source, call, rebuilds=rebuilds, policy_override=policy_override)
  except manifest_doc.ManifestIntegrityError as e:
    return CallReport(call.label, call.version, "refused", error=_without(str(e), call.where))
  except Exception as e:
    return CallReport(call.label, call.version, "error", error=f"{type(e).__name__}: {_without(str(e), call.where)}")
  diffs, layers, causes = compare(
      rb.stored_body, rb.pack.manifest,
      stored_policy=rb.stored_policy, rebuilt_policy=rb.inputs.policy.model_dump(mode="json"),
  )
  return CallReport(call.label, call.version, "different" if diffs else "identical", diffs, layers, causes if diffs else [])


def _without(msg: str, where: str) -> str:
  return msg[len(where) + 2:] if msg.startswith(where + ": ") else msg


async def replay(source, *, policy_override=None, on_call: Optional[Callable[[CallReport], None]] = None,
                 cold: bool = False) -> list[CallReport]:
  """Replays every stored call under ``source``, in session and version order.

  ``cold``: compile each call from scratch instead of extending the previous call's
  compiler session (the same packs, in time quadratic in a session's length).
  """
  reports = []
  shared = new_rebuilds(cold=cold)  # one ranker: the texts sessions share are analysed once
  for ref in await source.sessions():
    rebuilds = shared.next_session()
    for v in await source.versions(ref):
      try:
        call = await source.load(ref, v)
      except Exception as e:
        rep = CallReport(f"{ref.label()} v{v}", v, "error", error=f"{type(e).__name__}: {e}")
      else:
        rep = await replay_call(source, call, rebuilds=rebuilds, policy_override=policy_override)
      reports.append(rep)
      if on_call is not None:
        on_call(rep)
  return reports
