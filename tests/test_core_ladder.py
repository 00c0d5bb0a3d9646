"""The overflow ladder: select → compress → drop; memory → older evidence → older conversation.

Also: fixed tiers are never dropped, pinned items stay, every truncation
event names its items and a reason, fail-loud raises instead of dropping,
required task items, and the chunked, hysteretic tail trim.
"""

from __future__ import annotations

import pytest

from aether_frame.core.allocator import ContextBudgetExhausted
from aether_frame.core.compiler import CallInputs, CompileInput, CompilerSession, compile_pack
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.core.policy import OverflowPolicy, PackPolicy
from aether_frame.core.render import item_line

from tests.strategies import check_accounting, check_events_well_formed
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()
LAYER_RANK = {"memory": 0, "evidence": 1, "conversation": 2}
STAGE_RANK = {"filter": 0, "select": 1, "compress": 2, "drop": 3}


def _fixed(plan=True) -> list[Item]:
  items = [Item(id="system:i", layer=Layer.SYSTEM, text="You are an analyst. Follow the contract.")]
  if plan:
    items += [
        Item(id="task:g", layer=Layer.TASK, kind="goal", text="Compare three vendors."),
        Item(id="task:s", layer=Layer.TASK, kind="step", text="Extract the pricing differences."),
        Item(id="task:a", layer=Layer.TASK, kind="acceptance", text="Every figure has a source."),
        Item(id="task:c", layer=Layer.TASK, kind="constraint", text="Under 300 words."),
    ]
  items += [
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Which vendor is cheapest for pricing tiers?"),
      Item(id="tool:search", layer=Layer.TOOLS, kind="tool", text='{"name":"search","description":"Searches notes."}', meta={"name": "search"}),
  ]
  return items


def _sentences(tag: str, n: int) -> str:
  return " ".join(f"{tag} sentence {j} mentions pricing tiers and vendor {j % 3}." for j in range(n))


def _evidence(n: int, size: int = 12, **kw) -> list[Item]:
  return [Item(id=f"e{i}", layer=Layer.EVIDENCE, text=_sentences(f"E{i}", size), score=round(1 - i / 50, 3),
               provenance=Provenance(source=f"artifact://docs/e{i}.md", timestamp=1.7e9 + i), **kw) for i in range(n)]


def _memory(n: int, size: int = 8) -> list[Item]:
  return [Item(id=f"m{i}", layer=Layer.MEMORY, text=_sentences(f"M{i}", size), score=round(1 - i / 50, 3),
               provenance=Provenance(source=f"memory://m{i}", timestamp=1.7e9 + i, author="user")) for i in range(n)]


def _history(n: int, words: int = 40) -> list[Item]:
  return [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
               parts=[{"text": f"Turn {i}. " + "we discussed pricing " * (words // 3)}]) for i in range(n)]


def _compile(items, history=(), window=3000, inflight=(), **policy) -> tuple[CompileInput, object]:
  inp = CompileInput(policy=PackPolicy(**policy), history=list(history),
                     call=CallInputs(items=items, inflight=list(inflight), window=window, has_plan=True))
  return inp, compile_pack(inp, COUNTER)


def _events(pack, *, validate=False):
  return [e for e in pack.manifest["truncation_events"] if validate or not e["reason"].startswith("validate")]


def test_ladder_runs_memory_then_evidence_then_conversation_and_select_compress_drop_within():
  inp, pack = _compile(_fixed() + _evidence(10) + _memory(14), _history(40), window=2600, memory_top_k=10, compress_min_tokens=20)
  events = _events(pack)
  layers = [e["layer"] for e in events if e["layer"] in LAYER_RANK]
  assert {"memory", "evidence", "conversation"} <= set(layers), events
  assert [LAYER_RANK[x] for x in layers] == sorted(LAYER_RANK[x] for x in layers), layers
  for layer in ("memory", "evidence"):
    stages = [STAGE_RANK[e["stage"]] for e in events if e["layer"] == layer]
    assert stages == sorted(stages), (layer, [e["stage"] for e in events if e["layer"] == layer])
  assert [e["stage"] for e in events if e["layer"] == "memory"][0] == "select"  # top-K before anything else
  assert {e["stage"] for e in events} >= {"select", "compress", "drop"}
  check_accounting(inp, pack)


def test_compress_comes_before_drop():
  inp, pack = _compile(_fixed() + _evidence(6, size=20), window=1400, compress_min_tokens=20)
  rows = {r["id"]: r for r in pack.manifest["items"]}
  compressed = [r for r in rows.values() if r["status"] == "compressed"]
  assert compressed, "an over-budget, compressible item should be summarised before anything is dropped"
  for r in compressed:
    assert r["tokens_after"] < r["tokens"]
    assert item_line(next(i for i in inp.call.items if i.id == r["id"])) not in pack.payload
  ev = next(e for e in pack.manifest["truncation_events"] if e["stage"] == "compress")
  assert ev["tokens_after"] < ev["tokens_before"] and "extractive summary" in ev["reason"]
  # Without the compress rung the same items are dropped instead.
  _, blunt = _compile(_fixed() + _evidence(6, size=20), window=1400, compress_min_tokens=10_000)
  blunt_rows = {r["id"]: r for r in blunt.manifest["items"]}
  for r in compressed:
    assert blunt_rows[r["id"]]["status"] == "dropped"
  check_accounting(inp, pack)


def test_checklist_evidence_is_essential_and_never_summarised():
  low = Item(id="chk", layer=Layer.EVIDENCE, kind="checklist_evidence", text=_sentences("CHK", 14), score=0.0,
             provenance=Provenance(source="artifact://checklist.md"))
  inp, pack = _compile(_fixed() + _evidence(8, size=14) + [low], window=1500, compress_min_tokens=20)
  rows = {r["id"]: r for r in pack.manifest["items"]}
  assert rows["chk"]["status"] == "included"
  assert item_line(low) in pack.payload.split("\n")
  assert any(rows[f"e{i}"]["status"] != "included" for i in range(8)), "fixture must overflow"


def test_fixed_tiers_survive_heavy_overflow():
  inp, pack = _compile(_fixed() + _evidence(30, size=20) + _memory(30), _history(200), window=2048, memory_top_k=30)
  rows = {r["id"]: r for r in pack.manifest["items"]}
  for it in _fixed():
    assert rows[it.id]["status"] == "included", it.id
    if it.layer is not Layer.SYSTEM and it.kind != "user_request":
      assert item_line(it) in pack.payload.split("\n"), it.id
  assert not [e for e in pack.manifest["truncation_events"] if e["layer"] in ("system", "task", "tools")]
  assert pack.tokens <= pack.manifest["usable"]
  check_accounting(inp, pack)


def test_every_event_names_items_with_pointers_and_a_reason():
  dup = Item(id="e_dup", layer=Layer.EVIDENCE, text=_sentences("E0", 12), provenance=Provenance(source="artifact://dup.md"))
  blank = Item(id="m_blank", layer=Layer.MEMORY, text=" \n\t ")
  inp, pack = _compile(_fixed() + _evidence(10) + [dup] + _memory(12) + [blank], _history(30), window=2000, memory_top_k=6)
  check_events_well_formed(pack.manifest)
  by_id = {i.id: i for i in inp.call.items}
  reasons = {}
  for ev in pack.manifest["truncation_events"]:
    for iid, ptr in zip(ev.get("item_ids", ()), ev.get("pointers", ())):
      assert ptr == by_id[iid].pointer()
      reasons[iid] = ev["reason"]
  assert reasons["e_dup"] == "duplicate of e0"
  assert reasons["m_blank"] == "empty text"
  assert any(r.startswith("beyond memory top-K (k=6)") for r in reasons.values())
  conv = [e for e in pack.manifest["truncation_events"] if e["layer"] == "conversation"]
  covered = sorted(p for e in conv for p in range(e["range"]["start"], e["range"]["end"]))
  assert conv and covered == list(range(pack.manifest["tail"]["start"]))
  check_accounting(inp, pack)


def test_very_long_trims_are_recorded_as_ranges():
  inp, pack = _compile(_fixed(), _history(300, words=30), window=2048)
  conv = [e for e in pack.manifest["truncation_events"] if e["layer"] == "conversation"]
  dropped = sum(e["range"]["end"] - e["range"]["start"] for e in conv)
  assert dropped == 300 - len(pack.conversation_ids)
  assert any("item_ids" not in e for e in conv), "a >64-group trim is summarised as a range"
  check_accounting(inp, pack)


def test_pinned_history_and_inflight_survive_any_trim():
  history = _history(60)
  pending = Item(id="h_pending", layer=Layer.CONVERSATION, role="model", pinned=True, kind="pending",
                 parts=[{"function_call": {"id": "c9", "name": "search", "args": {"q": "pricing"}}}])
  history.insert(3, pending)
  inflight = [Item(id="step1", layer=Layer.CONVERSATION, role="model", pinned=True, kind="inflight",
                   parts=[{"function_call": {"id": "c10", "name": "search", "args": {}}},
                          {"function_response": {"id": "c10", "name": "search", "response": {"r": "ok"}}}])]
  inp, pack = _compile(_fixed(), history, window=1500, inflight=inflight)
  assert "h_pending" in pack.conversation_ids
  # The pending call comes first, after the user turn it answers (a request may not open on a call).
  opener = history[2]
  assert opener.role == "user" and list(pack.conversation_ids)[:2] == [opener.id, "h_pending"]
  assert len(pack.conversation_ids) < len(history)
  assert pack.manifest["tail"]["inflight_ids"] == ["step1"]
  rows = {r["id"]: r for r in pack.manifest["items"]}
  assert rows["h_pending"]["status"] == "included" and rows["step1"]["status"] == "included"
  check_accounting(inp, pack)


def test_pinned_evidence_is_kept_even_over_budget():
  big = Item(id="pin", layer=Layer.EVIDENCE, text=_sentences("PIN", 40), pinned=True, provenance=Provenance(source="artifact://pin.md"))
  inp, pack = _compile(_fixed() + _evidence(6) + [big], window=1800)
  assert item_line(big) in pack.payload.split("\n")
  check_accounting(inp, pack)


def test_fail_loud_raises_instead_of_dropping_and_names_elastic_needs():
  items = _fixed() + _evidence(20, size=20)
  with pytest.raises(ContextBudgetExhausted) as err:
    _compile(items, _history(40), window=2048, overflow=OverflowPolicy.FAIL_LOUD)
  assert {"evidence", "memory", "conversation"} <= set(err.value.needs)
  assert err.value.needs["evidence"] > 0 and "fail_loud" in str(err.value)
  _, roomy = _compile(items, _history(40), window=200_000, overflow=OverflowPolicy.FAIL_LOUD)
  assert not roomy.manifest["truncation_events"]


@pytest.mark.parametrize("kinds, has_plan, problem", [
    (["goal", "step"], True, "step has no acceptance checklist"),
    (["goal"], True, "plan present but no current step"),
    (["goal", "acceptance"], True, "plan present but no current step"),
])
def test_required_task_items_make_an_invalid_pack(kinds, has_plan, problem):
  items = [Item(id="system:i", layer=Layer.SYSTEM, text="sys"), Item(id="task:u", layer=Layer.TASK, kind="user_request", text="go")]
  items += [Item(id=f"task:{k}", layer=Layer.TASK, kind=k, text=f"the {k}") for k in kinds]
  pack = compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=4096, has_plan=has_plan)), COUNTER)
  assert pack.valid is False and pack.manifest["valid"] is False
  assert problem in pack.problems and problem in pack.manifest["problems"]


@pytest.mark.parametrize("kinds, has_plan", [(["goal", "step", "acceptance"], True), ([], False)])
def test_complete_plan_or_no_plan_is_valid(kinds, has_plan):
  items = [Item(id="system:i", layer=Layer.SYSTEM, text="sys"), Item(id="task:u", layer=Layer.TASK, kind="user_request", text="go")]
  items += [Item(id=f"task:{k}", layer=Layer.TASK, kind=k, text=f"the {k}") for k in kinds]
  pack = compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=4096, has_plan=has_plan)), COUNTER)
  assert pack.valid and pack.manifest["valid"] and pack.problems == []


def test_bad_calls_fail_with_a_clear_error():
  session = CompilerSession(PackPolicy(), COUNTER)
  with pytest.raises(ValueError, match="user_request"):
    session.compile(CallInputs(items=[Item(id="s", layer=Layer.SYSTEM, text="x")], window=1000))
  with pytest.raises(ValueError, match="duplicate item id"):
    session.compile(CallInputs(items=_fixed() + [Item(id="task:u", layer=Layer.EVIDENCE, text="x")], window=1000))
  with pytest.raises(ValueError, match="expected conversation"):
    session.extend_history([Item(id="x", layer=Layer.MEMORY, text="x")])
  session.extend_history(_history(2))
  with pytest.raises(ValueError, match="duplicate history id"):
    session.extend_history(_history(1))


def test_tail_is_trimmed_in_chunks_and_the_prefix_is_stable_between_trims():
  """Hysteresis: keep the previous cut while it fits; trim to the low-water mark when it does not."""
  policy = PackPolicy(trim_low_water=0.6)
  session = CompilerSession(policy, COUNTER)
  hint, starts, trims = None, [], 0
  for i, group in enumerate(_history(80, words=60)):
    session.extend_history([group])
    pack = session.compile(CallInputs(items=_fixed(), window=3000, tail_hint=hint))
    assert pack.tokens <= pack.manifest["usable"]
    if any("chunked trim" in e["reason"] for e in pack.manifest["truncation_events"]):
      trims += 1
    starts.append(pack.tail_start_id)
    hint = pack.tail_start_id
  changes = [i for i in range(1, len(starts)) if starts[i] != starts[i - 1]]
  assert trims >= 2, "the fixture must overflow more than once"
  assert len(changes) == trims
  assert len(changes) <= len(starts) // 5, f"tail moved on {len(changes)} of {len(starts)} calls"
  # Each trim cuts several groups at once (down to the low-water mark), not one.
  pos = {f"h{i}": i for i in range(80)}
  jumps = [pos[starts[i]] - pos[starts[i - 1]] for i in changes if starts[i - 1] is not None]
  assert all(j >= 3 for j in jumps), jumps


def test_a_tail_that_holds_few_more_turns_than_recent_turns_still_trims_in_chunks():
  """The low-water mark would cut into the last ``recent_turns`` groups: the cut goes
  as deep as they allow, so the next calls fit. It used to cut just enough to fit,
  one group per call, and the cached prefix broke on every call."""
  policy = PackPolicy(trim_low_water=0.3, recent_turns=6)
  session = CompilerSession(policy, COUNTER)
  hint, starts = None, []
  for group in _history(60, words=120):
    session.extend_history([group])
    pack = session.compile(CallInputs(items=_fixed(), window=3000, tail_hint=hint))
    assert pack.tokens <= pack.manifest["usable"]
    starts.append(pack.tail_start_id)
    hint = pack.tail_start_id
  pos = {f"h{i}": i for i in range(60)}
  changes = [i for i in range(1, len(starts)) if starts[i] != starts[i - 1]]
  assert len(changes) >= 2, "the fixture must overflow more than once"
  assert len(changes) <= len(starts) // 8, f"tail moved on {len(changes)} of {len(starts)} calls"
  # Every trim keeps the recent turns (an opening at their start) and never fewer.
  for i in changes:
    kept = i + 1 - pos[starts[i]]
    assert kept >= policy.recent_turns, (i, kept)
    assert pos[starts[i]] - pos[starts[i - 1]] >= 4


def test_kept_ids_of_a_returned_pack_survive_truncation_and_regrouping():
  """conversation_ids is a view of the session's id list; cutting that list must not reach it."""
  session = CompilerSession(PackPolicy(), COUNTER)
  session.extend_history(_history(40))
  call = CallInputs(items=_fixed(), window=1500, has_plan=True)
  first = session.compile(call)
  kept = list(first.conversation_ids)
  assert 0 < len(kept) < 40 and first.conversation_ids == kept and kept == first.conversation_ids
  # The plugin re-groups the last group each call: truncate, then add other groups in its place.
  session.truncate_history(38)
  session.extend_history([Item(id=f"x{i}", layer=Layer.CONVERSATION, role="user", parts=[{"text": "new"}]) for i in range(3)])
  assert list(first.conversation_ids) == kept and len(first.conversation_ids) == len(kept)
  assert first.conversation_ids[-1] == kept[-1] and first.conversation_ids[:2] == kept[:2]
  assert "x0" not in first.conversation_ids and kept[0] in first.conversation_ids
  session.reset_history()
  assert list(first.conversation_ids) == kept
  second = session.compile(call)  # an empty history keeps nothing
  assert list(second.conversation_ids) == [] and second.conversation_ids != kept
  with pytest.raises(IndexError):
    second.conversation_ids[0]


def test_a_history_batch_that_fails_leaves_the_session_unchanged():
  from aether_frame.retrieval import default_ranker

  ranker = default_ranker()
  session = CompilerSession(PackPolicy(), COUNTER, ranker=ranker, history_index=ranker.new_history_index())
  session.extend_history(_history(3))
  call = CallInputs(items=_fixed(), window=4000, has_plan=True)
  before = session.compile(call)
  bad = Item(id="bad", layer=Layer.CONVERSATION, role="user", text="x", tokens=3, meta={"n": float("nan")})
  with pytest.raises(ValueError, match="item 'bad': meta is not JSON data"):  # no canonical JSON, no digest
    session.extend_history([Item(id="ok", layer=Layer.CONVERSATION, role="user", parts=[{"text": "fine"}]), bad])
  with pytest.raises(ValueError, match="duplicate history id 'h1'"):
    session.extend_history([Item(id="new", layer=Layer.CONVERSATION, role="user", text="y"), _history(2)[1]])
  assert session.history_ids() == ["h0", "h1", "h2"]
  assert len(session.history_index) == 0  # recall indexes trimmed turns only, and nothing was trimmed
  after = session.compile(call)
  assert after.payload == before.payload and after.manifest == before.manifest
  session.extend_history([Item(id="ok", layer=Layer.CONVERSATION, role="user", parts=[{"text": "fine"}])])  # a retry works
  assert session.history_ids()[-1] == "ok"


def test_per_session_memos_stay_the_size_of_one_call():
  """A long session with ever-new memory items must not grow the compiler's memos."""
  session = CompilerSession(PackPolicy(), COUNTER)
  session.extend_history(_history(4))
  for n in range(60):
    memory = [Item(id=f"m{n}-{j}", layer=Layer.MEMORY, text=f"fact {n} {j}") for j in range(5)]
    session.compile(CallInputs(items=_fixed() + memory, window=4000, has_plan=True))
  per_call = len(_fixed()) + 5
  for memo in (session._call_memo, session._norm_memo):
    assert len(memo._prev) <= per_call and len(memo._cur) <= per_call


def _steps(n: int, words: int = 60) -> list[Item]:
  """Complete tool steps of one long invocation (trimmable: not pinned)."""
  return [Item(id=f"step{i}", layer=Layer.CONVERSATION, role="model", kind="finished_step",
               parts=[{"function_call": {"id": f"c{i}", "name": "search", "args": {"page": i}}},
                      {"function_response": {"id": f"c{i}", "name": "search",
                                             "response": {"text": f"Page {i}. " + "pricing notes " * (words // 2)}}}])
          for i in range(n)]


def test_inflight_steps_are_trimmed_oldest_first_after_history_and_in_chunks():
  latest = Item(id="latest", layer=Layer.CONVERSATION, role="model", kind="inflight", pinned=True,
                parts=[{"function_call": {"id": "cz", "name": "search", "args": {}}},
                       {"function_response": {"id": "cz", "name": "search", "response": {"r": "ok"}}}])
  steps = _steps(30)
  inp, pack = _compile(_fixed(), _history(10), window=2600, inflight=[*steps, latest])
  check_accounting(inp, pack)
  assert "latest" in pack.inflight_ids and "step0" not in pack.inflight_ids
  assert pack.inflight_hint is not None and pack.inflight_hint not in pack.inflight_ids
  assert f"step{int(pack.inflight_hint[4:]) + 1}" in pack.inflight_ids
  assert "earlier turns omitted" in pack.payload or "omitted" in pack.payload.split("BUDGET", 1)[1]
  # Replayed from its stored form, the same bytes.
  again = compile_pack(CompileInput.model_validate_json(inp.model_dump_json()), COUNTER)
  assert again.payload == pack.payload and again.manifest == pack.manifest
  # The next step of the loop, with the previous cut as its hint: the cut holds
  # while it fits (the cached prefix survives), and moves only in a chunk.
  cuts, hint = [], None
  for n in range(30, 45):
    steps = _steps(n)
    call = CallInputs(items=_fixed(), inflight=steps + [latest], window=2600, has_plan=True, inflight_hint=hint)
    step_inp = CompileInput(policy=PackPolicy(), history=_history(10), call=call)
    got = compile_pack(step_inp, COUNTER)
    check_accounting(step_inp, got)
    hint = got.inflight_hint
    cuts.append(hint)
  moves = sum(1 for a, b in zip(cuts, cuts[1:]) if a != b)
  assert 1 <= moves <= 5, cuts


def test_in_flight_items_must_be_conversation_and_recall_ids_are_reserved():
  memory_step = Item(id="m", layer=Layer.MEMORY, text="a note")
  with pytest.raises(ValueError, match="in-flight item 'm' is in layer memory"):
    _compile(_fixed(), inflight=[memory_step])
  taken = Item(id="recall:h3", layer=Layer.MEMORY, text="a caller's note")
  with pytest.raises(ValueError, match="'recall:h3' is reserved"):
    _compile(_fixed() + [taken], _history(10))


def test_in_flight_items_of_other_kinds_are_always_sent_as_before():
  """Trimming is opt-in (kind ``finished_step``): in-flight items built as before
  (``pinned`` left at False) are still never dropped; a window too small for them raises."""
  old_style = [item.model_copy(update={"kind": "inflight"}) for item in _steps(12)]
  inp, pack = _compile(_fixed(), _history(10), window=6000, inflight=old_style)
  assert list(pack.inflight_ids) == [i.id for i in old_style]
  check_accounting(inp, pack)
  with pytest.raises(ContextBudgetExhausted):
    _compile(_fixed(), _history(10), window=900, inflight=old_style)


def test_a_hint_naming_no_current_step_is_ignored():
  """ADK may rebuild an invocation's steps (compaction summarises them, a resumed call
  sends a shorter request): a cut kept as a count dropped steps that fit, with a false
  'trimmed in an earlier call'. The hint names a step; one not among the steps is ignored."""
  steps = _steps(30)
  call = CallInputs(items=_fixed(), inflight=steps, window=2600, has_plan=True)
  first = compile_pack(CompileInput(policy=PackPolicy(), history=_history(10), call=call), COUNTER)
  assert first.inflight_hint is not None
  short = _steps(4)  # rebuilt: the hinted step is gone, the rest fits easily
  again = compile_pack(CompileInput(policy=PackPolicy(), history=_history(10), call=call.model_copy(
      update={"inflight": short, "inflight_hint": first.inflight_hint})), COUNTER)
  assert list(again.inflight_ids) == [s.id for s in short] and again.inflight_hint is None
  assert not any("in-flight" in e["reason"] for e in again.manifest["truncation_events"])
