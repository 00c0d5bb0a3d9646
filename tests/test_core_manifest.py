"""The manifest: required fields, hashes that mean something, checksum and tamper detection."""

from __future__ import annotations

import copy
import json

import pytest

from aether_frame.core import manifest as manifest_doc
from aether_frame.core.canonical import digest, sequence_digest, sha256_hex
from aether_frame.core.compiler import CallInputs, CompileInput, _item_digest, compile_pack
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.core.policy import PackPolicy
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()
META = {"invocation_id": "e-42", "session_id": "s-1", "agent": "researcher", "model": "gemini-2.5-flash"}
REQUIRED = (
    "pack_id", "invocation_id", "agent", "model", "window", "tokenizer", "layers", "truncation_events",
    "artifact_uris", "input_sha256", "output_sha256", "policy_hash",
)


def _input(window=4096, request="Compare vendor pricing.", meta=META, policy=None, evidence_text="Vendor A lowered prices in May.") -> CompileInput:
  items = [
      Item(id="system:i", layer=Layer.SYSTEM, text="You are an analyst."),
      Item(id="task:g", layer=Layer.TASK, kind="goal", text="Report on pricing."),
      Item(id="task:s", layer=Layer.TASK, kind="step", text="Collect the numbers."),
      Item(id="task:a", layer=Layer.TASK, kind="acceptance", text="Every number cited."),
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text=request),
      Item(id="tool:search", layer=Layer.TOOLS, kind="tool", text='{"name":"search"}', meta={"name": "search"}),
      Item(id="e1", layer=Layer.EVIDENCE, text=evidence_text, provenance=Provenance(source="artifact://reports/q2.md")),
      Item(id="e2", layer=Layer.EVIDENCE, text="Vendor B kept prices flat.", provenance=Provenance(source="artifact://reports/b.md")),
      Item(id="e3", layer=Layer.EVIDENCE, text="A note with no artifact.", provenance=Provenance(source="https://example.org/x")),
      Item(id="m1", layer=Layer.MEMORY, text="User wants tables.", provenance=Provenance(source="memory://7", timestamp=1.7e9)),
  ]
  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
                  parts=[{"text": f"turn {i} " + "words " * 30}]) for i in range(40)]
  return CompileInput(policy=policy or PackPolicy(), history=history,
                      call=CallInputs(items=items, window=window, has_plan=True, meta=dict(meta)))


def _pack(**kw):
  return compile_pack(_input(**kw), COUNTER)


def test_required_fields_are_present_and_correct():
  inp = _input()
  m = compile_pack(inp, COUNTER).manifest
  for key in REQUIRED:
    assert key in m, key
  assert m["schema"] == "aether-frame/manifest@1"
  assert (m["invocation_id"], m["agent"], m["model"], m["session_id"]) == ("e-42", "researcher", "gemini-2.5-flash", "s-1")
  assert m["window"] == 4096
  assert m["tokenizer"] == COUNTER.describe() and m["tokenizer"]["exact"] is True
  assert m["policy_hash"] == inp.policy.policy_hash()
  assert m["artifact_uris"] == ["artifact://reports/b.md", "artifact://reports/q2.md"]
  assert m["pack_id"] == "pack_" + m["input_sha256"].removeprefix("sha256:")[:20]
  for key in ("input_sha256", "output_sha256", "payload_sha256", "prefix_sha256"):
    assert m[key].startswith("sha256:") and len(m[key]) == 7 + 64, key


def test_every_layer_records_budget_floor_weight_requested_used():
  m = _pack(window=1500).manifest
  assert set(m["layers"]) == {"system", "task", "tools", "evidence", "memory", "conversation", "slack"}
  for name, layer in m["layers"].items():
    assert set(layer) >= {"budget", "floor", "weight", "requested", "used"}, name
    assert all(isinstance(layer[k], int) for k in ("budget", "floor", "requested", "used")), name
  assert m["layers"]["system"]["floor"] == int(0.06 * 1500)
  assert m["layers"]["slack"]["budget"] == m["reserve"] == 150
  weights = [m["layers"][n]["weight"] for n in ("evidence", "memory", "conversation")]
  assert sum(weights) == pytest.approx(1.0, abs=1e-5)
  # The conversation had to be trimmed at this window, and the manifest says so.
  assert m["layers"]["conversation"]["requested"] > m["layers"]["conversation"]["used"]
  assert any(ev["layer"] == "conversation" for ev in m["truncation_events"])


def test_payload_and_output_hashes_match_the_output():
  pack = _pack()
  m = pack.manifest
  assert m["payload_sha256"] == "sha256:" + sha256_hex(pack.payload)
  groups = {g.id: g for g in _input().history}
  conversation = sequence_digest([_item_digest(groups[g]) for g in pack.conversation_ids])
  payload = "sha256:" + sha256_hex(pack.payload)
  assert m["output_sha256"] == digest({"payload": payload, "conversation": conversation, "tools": ["tool:search"]})


def test_output_hash_follows_what_is_sent_and_nothing_else():
  """Behaviour, not the formula: the output hash moves with a kept turn's content (same id)
  and stays put when only a dropped turn or the run metadata changes."""
  inp = _input(window=1500)
  pack = compile_pack(inp, COUNTER)
  kept = set(pack.conversation_ids)
  dropped = [i for i, g in enumerate(inp.history) if g.id not in kept]
  kept_at = [i for i, g in enumerate(inp.history) if g.id in kept]
  assert dropped and kept_at
  base = pack.manifest

  def edited(i):
    out = inp.model_copy(deep=True)
    g = out.history[i]
    out.history[i] = g.model_copy(update={"parts": [{"text": g.text + " (edited)"}], "text": g.text + " (edited)"})
    return compile_pack(out, COUNTER).manifest

  after_kept = edited(kept_at[-1])
  assert after_kept["output_sha256"] != base["output_sha256"]
  after_dropped = edited(dropped[0])
  assert after_dropped["input_sha256"] != base["input_sha256"]
  assert after_dropped["output_sha256"] == base["output_sha256"]
  assert _pack(window=1500, meta={**META, "invocation_id": "e-99"}).manifest["output_sha256"] == base["output_sha256"]


def test_prefix_hash_sees_a_kept_group_change_under_the_same_id():
  """A pending call that gains its response keeps its group id; the prefix did change."""
  inp = _input(window=100_000)
  base = compile_pack(inp, COUNTER).manifest["prefix_sha256"]
  changed = inp.model_copy(deep=True)
  changed.history[-1] = changed.history[-1].model_copy(update={"parts": [{"text": "turn 39 rewritten"}]})
  assert compile_pack(changed, COUNTER).manifest["prefix_sha256"] != base
  assert compile_pack(inp, COUNTER).manifest["prefix_sha256"] == base


def test_input_hash_tracks_inputs_but_not_run_metadata():
  base = _pack().manifest["input_sha256"]
  assert _pack(meta={**META, "invocation_id": "e-43"}).manifest["input_sha256"] == base
  assert _pack(window=4097).manifest["input_sha256"] != base
  assert _pack(request="Compare vendor pricing!").manifest["input_sha256"] != base
  assert _pack(evidence_text="Vendor A raised prices in May.").manifest["input_sha256"] != base
  assert _pack(policy=PackPolicy(quantum=32)).manifest["input_sha256"] != base


def test_item_rows_cover_every_call_item_with_a_status():
  m = _pack().manifest
  rows = {r["id"]: r for r in m["items"]}
  for iid in ("system:i", "task:g", "task:s", "task:a", "task:u", "tool:search", "e1", "e2", "e3", "m1"):
    assert rows[iid]["status"] == "included", iid  # 4,096 tokens hold every call item
    assert rows[iid]["pointer"]
  assert rows["e1"]["pointer"] == "artifact://reports/q2.md"


def test_ranked_rows_carry_the_rankers_score_and_explain_kept_or_dropped():
  """The rows were built from the items as given: every evidence and memory row said score 0.0 and
  had no explain, so a dropped item could not say why (docs/retrieval.md, "Explanations")."""
  from aether_frame.retrieval import default_ranker
  inp = _input(window=4096)
  extra = [Item(id=f"k{i}", layer=Layer.EVIDENCE,
                text=f"Report {i}: " + ("vendor pricing table for May, " if i % 2 else "weather and rainfall, ") * 40,
                provenance=Provenance(source=f"artifact://k{i}.md")) for i in range(12)]
  inp = inp.model_copy(update={"call": inp.call.model_copy(update={"items": [*inp.call.items, *extra]})})
  ranker = default_ranker()
  m = compile_pack(inp, COUNTER, ranker=ranker).manifest
  ranked = {i.id: i for i in ranker.rank(inp.call.items[4].text, [i for i in inp.call.items if i.layer is Layer.EVIDENCE],
                                        layer=Layer.EVIDENCE, now=None)}
  rows = [r for r in m["items"] if r["layer"] in ("evidence", "memory")]
  assert {r["status"] for r in rows} >= {"included", "dropped"}  # the window drops some
  for r in rows:
    assert set(r["meta"]["explain"]) >= {"bm25", "relevance", "score", "rank"}, r
    assert r["score"] == r["meta"]["explain"]["score"], r
    if r["layer"] == "evidence":
      assert r["score"] == ranked[r["id"]].score
  dropped = [r for r in rows if r["status"] == "dropped"]
  kept = [r for r in rows if r["status"] == "included" and r["layer"] == "evidence"]
  assert max(r["score"] for r in dropped) <= max(r["score"] for r in kept)


def test_finalize_then_verify_round_trips_through_canonical_bytes():
  body = _pack().manifest
  doc = manifest_doc.finalize(body, {"compile_ms": 1.5, "guard": {"ok": True}})
  assert doc["checksum"] == digest(body)
  assert manifest_doc.verify(doc) is doc
  loaded = json.loads(manifest_doc.dumps(doc).decode("utf-8"))
  assert manifest_doc.verify(loaded) == doc
  # Canonical bytes: key order does not matter.
  shuffled = dict(reversed(list(doc.items())))
  assert manifest_doc.dumps(shuffled) == manifest_doc.dumps(doc)


def test_runtime_section_may_vary_without_breaking_the_checksum():
  doc = manifest_doc.finalize(_pack().manifest, {"compile_ms": 1.5})
  checksum = doc["checksum"]
  doc["runtime"]["compile_ms"] = 99.0
  doc["runtime"]["guard"] = {"fallback": True}
  assert manifest_doc.verify(doc) is doc and doc["checksum"] == checksum
  # ... while the same edit outside the runtime section is refused.
  doc["window"] += 1
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="checksum mismatch"):
    manifest_doc.verify(doc)


@pytest.mark.parametrize("tamper", [
    lambda d: d.__setitem__("window", d["window"] + 1),
    lambda d: d["truncation_events"].clear() if d["truncation_events"] else d["truncation_events"].append({"stage": "drop"}),
    lambda d: d["layers"]["evidence"].__setitem__("used", 0),
    lambda d: d["items"][0].__setitem__("status", "dropped"),
    lambda d: d.__setitem__("extra", "field"),
    lambda d: d.pop("artifact_uris"),
    lambda d: d.__setitem__("checksum", "sha256:" + "0" * 64),
])
def test_tampering_is_detected(tamper):
  doc = manifest_doc.finalize(_pack(window=1500).manifest, {"compile_ms": 1.0})
  bad = copy.deepcopy(doc)
  tamper(bad)
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="checksum mismatch"):
    manifest_doc.verify(bad, where="manifest v3")


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["layers"]["memory"].__setitem__("used", "abc"), "layers.memory.used is not an integer"),
    (lambda d: d["layers"]["memory"].__setitem__("weight", True), "layers.memory.weight is not a number"),
    (lambda d: d["layers"].__setitem__("memory", 7), "layers.memory is not an object"),
    (lambda d: d.__setitem__("layers", []), "layers is not an object"),
    (lambda d: d.__setitem__("items", {"a": 1}), "items is not a list"),
    (lambda d: d["items"].append("x"), "is not an object"),
    (lambda d: d["items"][0].__setitem__("tokens", 1.5), "items[0].tokens is not an integer"),
    (lambda d: d.__setitem__("truncation_events", "x"), "truncation_events is not a list"),
    (lambda d: d.__setitem__("window", "8192"), "window is not an integer"),
    (lambda d: d.__setitem__("usable", False), "usable is not an integer"),
    (lambda d: d.pop("totals"), "it has no 'totals'"),
    (lambda d: d["totals"].__setitem__("tokens", None), "totals.tokens is not an integer"),
])
def test_a_resigned_manifest_of_the_wrong_shape_is_refused_naming_the_field(edit, says):
  """The checksum holds (the edit was signed again), but readers would misread or crash on it."""
  body = copy.deepcopy(_pack(window=1500).manifest)
  edit(body)
  doc = manifest_doc.finalize(body, {"compile_ms": 1.0})
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="manifest v3: not a valid manifest") as e:
    manifest_doc.verify(doc, where="manifest v3")
  assert says in str(e.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_manifest_holding_a_non_finite_number_is_refused_naming_where(value):
  doc = manifest_doc.finalize(_pack(window=1500).manifest, {"compile_ms": 1.0})
  text = json.dumps(doc).replace('"schema"', '"zz":[1,{"x":%s}],"schema"' % json.dumps(value), 1)  # NaN, Infinity
  loaded = json.loads(text)  # Python's json reads them, as any tool editing a manifest with it may write them
  with pytest.raises(manifest_doc.ManifestIntegrityError, match=r"manifest v3: not a valid manifest \(zz\[1\]\.x is not a finite number\)"):
    manifest_doc.verify(loaded, where="manifest v3")


def test_a_document_without_checksum_is_refused():
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="not a manifest"):
    manifest_doc.verify(_pack().manifest)
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="not a manifest"):
    manifest_doc.verify(["not", "a", "dict"])  # type: ignore[arg-type]
