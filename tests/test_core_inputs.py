"""Input edge cases found in review: each once crashed a compile, lost data or mis-budgeted."""

from __future__ import annotations

import math
import re

import pytest
from pydantic import ValidationError

from aether_frame.calibration import Calibrator
from aether_frame.core.allocator import ContextBudgetExhausted
from aether_frame.core.compiler import CallInputs, CompileInput, CompilerSession, compile_pack
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.core.policy import PackPolicy
from aether_frame.core.windows import ModelWindows, UnknownModelWindow
from aether_frame.retrieval import default_ranker
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()


def _base(request: str = "What notes?") -> list[Item]:
  return [
      Item(id="system:i", layer=Layer.SYSTEM, text="Be helpful."),
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text=request),
  ]


def _pack(items, history=(), window=4000, policy=None, **call):
  inp = CompileInput(policy=policy or PackPolicy(), history=list(history), call=CallInputs(items=items, window=window, **call))
  return compile_pack(inp, COUNTER)


def test_every_scale_the_calibrator_can_give_is_a_valid_call():
  """A model billed at the calibrator's largest ratio, with the largest margin the policy allows."""
  cal = Calibrator()
  for _ in range(8):
    cal.observe("m", estimate=1000, actual=10_000)
  margin = math.nextafter(PackPolicy.model_fields["calibration_margin"].metadata[-1].lt, 0.0)
  scale = cal.scale("m", margin=PackPolicy(calibration_margin=margin).calibration_margin)
  assert scale > 4.0
  pack = _pack(_base(), window=8000, token_scale=scale)
  assert pack.manifest["token_scale"] == scale
  assert pack.tokens <= pack.manifest["usable"] == math.floor((8000 - 800) / scale)  # window less the 10% reserve, scaled
  for bad in (float("nan"), 0.0, 1e-310, 1e300):  # 1e-310 overflowed the usable window (OverflowError)
    with pytest.raises(ValidationError, match="token_scale"):
      CallInputs(items=_base(), window=8000, token_scale=bad)


def test_window_overrides_match_like_model_names():
  windows = ModelWindows({"My-Model": 65_536, "openai/custom-x": 1000})
  assert windows.lookup("my-model") == windows.lookup("vendor/My-Model") == 65_536
  assert windows.lookup("custom-x") == windows.lookup("OpenAI/Custom-X") == 1000


def test_image_and_speech_variants_do_not_inherit_their_familys_1m_window():
  windows = ModelWindows()
  assert windows.lookup("gemini-2.5-flash") == 1_048_576
  assert windows.lookup("gemini-2.5-flash-001") == 1_048_576
  assert windows.lookup("gemini-2.5-flash-image") == windows.lookup("gemini-2.5-flash-image-preview") == 32_768
  assert windows.lookup("gemini-3-pro-image-preview") == 65_536
  assert windows.lookup("gemini-2.5-flash-preview-tts") == windows.lookup("gemini-2.5-pro-preview-tts") == 8_192


def test_gpt_5_chat_snapshots_do_not_inherit_gpt_5s_400k_window():
  """gpt-5-chat-latest matched the gpt-5 prefix: 400K for a 128K model, so a long chat went out untrimmed
  until OpenAI refused it (context_length_exceeded)."""
  windows = ModelWindows()
  assert windows.lookup("gpt-5") == windows.lookup("gpt-5-mini") == windows.lookup("gpt-5.1") == 400_000
  for name in ("gpt-5-chat-latest", "openai/gpt-5-chat-latest", "gpt-5.1-chat-latest", "gpt-5.2-chat-latest",
               "gpt-5.1-chat-2025-11-13"):
    assert windows.lookup(name) == 128_000, name
  # Only gpt-5's chat snapshots: another family's "-chat" name still matches its family's prefix.
  assert windows.lookup("mistral-large-chat") == windows.lookup("gpt-4o-chat") == 128_000


def test_adks_default_model_and_gemini_3_point_releases_have_windows():
  from google.adk.agents import LlmAgent

  windows = ModelWindows()
  # Without this, every call of an agent on ADK's default model went out unpacked (a fault per call).
  assert windows.lookup(LlmAgent.DEFAULT_MODEL) == 1_048_576
  for name in ("gemini-3.5-flash", "gemini-3.8-flash", "gemini-3.1-pro-preview", "gemini-3.1-pro-preview-customtools",
               "models/gemini-3.6-flash", "gemini-3.8-flash-lite", "gemini-flash-latest", "gemini-pro-latest"):
    assert windows.lookup(name) == 1_048_576, name
  # Variants with other windows are not guessed: the error names the model.
  for name in ("gemini-3.8-flash-lite-tts", "gemini-3.5-transcribe-live", "gemini-3.1-flash-image-preview",
               "gemini-live-2.5-flash-native-audio", "gemini-3.5-flash-live"):
    with pytest.raises(UnknownModelWindow, match=re.escape(repr(name))):
      windows.lookup(name)
  # An override still wins over the family rule.
  assert ModelWindows({"gemini-3.5-flash": 200_000}).lookup("gemini-3.5-flash-001") == 200_000


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e20, -1e20])
def test_timestamps_and_now_out_of_range_are_named(bad):
  with pytest.raises(ValidationError, match="timestamp"):
    Provenance(timestamp=bad)
  with pytest.raises(ValidationError, match="now"):
    CallInputs(items=_base(), window=4000, now=bad)


def test_meta_that_is_not_json_names_the_item():
  items = [*_base(), Item(id="ev:x", layer=Layer.EVIDENCE, text="fact", meta={"v": float("nan")})]
  with pytest.raises(ValueError, match=r"item 'ev:x': meta is not JSON data"):
    _pack(items)
  session = CompilerSession(PackPolicy(), COUNTER)
  with pytest.raises(ValueError, match=r"item 'h0': parts are not JSON data"):
    session.extend_history([Item(id="h0", layer=Layer.CONVERSATION, role="user", parts=[{"text": "x", "n": float("inf")}])])
  assert session.history_ids() == []


def _nested(depth: int):
  value: object = "leaf"
  for _ in range(depth):
    value = {"a": value}
  return value


def test_json_nested_past_the_recursion_limit_is_a_named_error_or_left_as_is():
  """Each was a bare RecursionError from deep inside (found by fuzzing)."""
  deep = _nested(5000)
  with pytest.raises(ValueError, match=r"item 'memory:0': meta is not JSON data"):
    _pack([*_base(), Item(id="memory:0", layer=Layer.MEMORY, text="m", meta={"x": deep})], window=100_000)
  group = Item(id="h0", layer=Layer.CONVERSATION, role="user",
               parts=[{"function_response": {"id": "c", "name": "f", "response": deep}}])
  session = CompilerSession(PackPolicy(), COUNTER)
  with pytest.raises(ValueError, match=r"item 'h0': parts are nested too deeply to read as JSON"):
    session.extend_history([group])
  assert session.history_ids() == []  # all or nothing
  with pytest.raises(ValueError, match=r"item 'h0': parts are nested too deeply"):
    _pack(_base(), history=[group], window=100_000)
  # A tool declaration's text is only read to trim its examples: nested too deeply, it is left as it is.
  tool = Item(id="tool:t", layer=Layer.TOOLS, kind="tool", text="[" * 1000 + "]" * 1000, pinned=True, meta={"name": "t"})
  with pytest.raises(ContextBudgetExhausted):  # the ladder ran past the tool (200 tokens hold no pack)
    _pack([*_base(), tool], window=200)


@pytest.mark.parametrize("payload", [{"result": {1: "one", "two": 2}}, {"result": 10 ** 5000}], ids=["mixed-keys", "huge-int"])
@pytest.mark.parametrize("where", ["history", "inflight", "request"])
def test_parts_that_are_not_json_data_are_a_named_error(payload, where):
  """A dict mixing int and str keys cannot be put in canonical order, an int past 4,300 digits
  cannot be written: both were a bare TypeError or ValueError naming no item (property review)."""
  resp = [{"function_call": {"id": "c1", "name": "f", "args": {}}},
          {"function_response": {"id": "c1", "name": "f", "response": payload}}]
  history, inflight, parts = [], [], None
  if where == "history":
    history = [Item(id="bad", layer=Layer.CONVERSATION, role="model", parts=resp)]
  elif where == "inflight":
    inflight = [Item(id="bad", layer=Layer.CONVERSATION, role="model", kind="inflight", pinned=True, parts=resp)]
  else:
    parts = [{"text": "x"}, resp[1]]
  request = Item(id="bad" if where == "request" else "task:u", layer=Layer.TASK, kind="user_request", text="hi", parts=parts)
  call = CallInputs(items=[request], inflight=inflight, window=8000)
  with pytest.raises(ValueError, match=r"^item 'bad': parts are not JSON data \("):
    compile_pack(CompileInput(policy=PackPolicy(), history=history, call=call), COUNTER)


@pytest.mark.parametrize("key", ["access_count", "salience", "last_access"])
def test_a_meta_integer_past_floats_range_is_ignored_by_the_ranker(key):
  """JSON integers are unbounded: float() of a 401-digit one raised OverflowError in the ranker."""
  import json
  meta = json.loads('{"%s": 1%s}' % (key, "0" * 400))
  items = [*_base("budget"), Item(id="memory:0", layer=Layer.MEMORY, kind="memory", text="budget notes", meta=meta)]
  inp = CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=8000))
  pack = compile_pack(inp, COUNTER, ranker=default_ranker())
  assert "memory:0" in {r["id"] for r in pack.manifest["items"] if r["status"] == "included"}


def test_lone_surrogates_compile():
  """A JSON "\\ud83d" escape gives Python a lone surrogate; it must not fail the session."""
  text = "data \ud83d end"
  history = [Item(id="h0", layer=Layer.CONVERSATION, role="user", parts=[{"text": text}], text=text)]
  items = [*_base(text), Item(id="ev:s", layer=Layer.EVIDENCE, text=text)]
  a, b = _pack(items, history), _pack(items, history)
  assert "\ud83d" in a.payload and a.manifest == b.manifest
  assert list(a.conversation_ids) == ["h0"]


def test_costly_budget_pointers_are_charged_before_validation():
  """Emoji URIs cost ~2 tokens a character; the BUDGET line's pointers must still fit."""
  memory = [
      Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=f"note {i} ok", score=1.0 - i / 1000,
           provenance=Provenance(source="memory://" + "\U0001f389" * 40 + str(i), author="u"))
      for i in range(300)
  ]
  pack = _pack([*_base(), *memory], window=3000, policy=PackPolicy(memory_top_k=1000))
  assert pack.tokens <= pack.manifest["usable"]
  kept = {r["id"] for r in pack.manifest["items"] if r["status"] == "included"}
  dropped = {i for e in pack.manifest["truncation_events"] for i in e.get("item_ids", [])}
  assert kept and kept | dropped >= {m.id for m in memory}
  assert not any(e["reason"].startswith("validate") for e in pack.manifest["truncation_events"])


def test_a_pinned_duplicate_wins_over_an_unpinned_copy():
  text = "Alpha beta gamma delta. " * 60
  items = [
      *_base(),
      Item(id="ev:a", layer=Layer.EVIDENCE, text=text, provenance=Provenance(source="artifact://a")),
      Item(id="ev:b", layer=Layer.EVIDENCE, text=text + "  ", pinned=True, provenance=Provenance(source="artifact://b")),
  ]
  pack = _pack(items, window=2000)
  rows = {r["id"]: r for r in pack.manifest["items"]}
  assert rows["ev:b"]["status"] == "included" and "tokens_after" not in rows["ev:b"]
  assert rows["ev:a"]["status"] == "filtered" and rows["ev:a"]["reason"] == "duplicate of ev:b"
  assert "artifact://b" in pack.payload and text.strip() in " ".join(pack.payload.split())


def test_preset_overrides_merge_into_nested_fields():
  policy = PackPolicy.preset("quality_first", floors={"system": 0.09})
  assert policy.floors.system == 0.09 and policy.floors.slack_min == 0.15 and policy.floors.task == 0.10


def test_the_predicted_cut_counts_memory_after_top_k():
  """30 memory candidates but top-K 8: the history fits, so nothing is recalled into the tail."""
  texts = [f"Turn {i}: we discussed the paris budget report number {i}. " * 6 for i in range(40)]
  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
                  parts=[{"text": t}], text=t) for i, t in enumerate(texts)]
  memory = [Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=f"Unrelated memory {i} about cats and dogs. " * 15,
                 provenance=Provenance(source=f"memory://m{i}")) for i in range(30)]
  ranker = default_ranker()
  inp = CompileInput(policy=PackPolicy(), history=history,
                     call=CallInputs(items=[*_base("What was the paris budget report?"), *memory], window=6000))
  pack = compile_pack(inp, COUNTER, ranker=ranker, history_index=ranker.new_history_index())
  assert pack.manifest["tail"]["start"] == 0
  assert not [r for r in pack.manifest["items"] if r["kind"] == "recall"]


def test_the_ranking_is_part_of_the_input_hash_and_the_manifest():
  from aether_frame.retrieval import RetrievalWeights

  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user", parts=[{"text": f"turn {i}"}], text=f"turn {i}")
             for i in range(3)]
  items = [*_base(), Item(id="ev:a", layer=Layer.EVIDENCE, text="alpha beta"), Item(id="ev:b", layer=Layer.EVIDENCE, text="gamma")]
  inp = CompileInput(policy=PackPolicy(), history=history, call=CallInputs(items=items, window=4000))
  plain = compile_pack(inp, COUNTER)
  ranked = compile_pack(inp, COUNTER, ranker=default_ranker())
  other = compile_pack(inp, COUNTER, ranker=default_ranker(weights=RetrievalWeights(prf_weight=0.0)))
  assert plain.manifest["ranking"] == {"ranker": None, "history_index": None}
  assert ranked.manifest["ranking"]["ranker"]["name"] == "hybrid"
  ids = {plain.manifest["pack_id"], ranked.manifest["pack_id"], other.manifest["pack_id"]}
  assert len(ids) == 3  # the same items ranked another way are another pack
  assert compile_pack(inp, COUNTER, ranker=default_ranker()).manifest == ranked.manifest


def test_a_trimmed_range_counts_only_the_groups_it_drops():
  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model", pinned=(i == 3),
                  parts=[{"text": f"Turn {i}. " + "we discussed pricing " * 30}]) for i in range(30)]
  pack = _pack(_base(), history, window=2000)
  drops = [e for e in pack.manifest["truncation_events"] if e["layer"] == "conversation" and "range" in e]
  # h3 (the model's, pinned) stays, and so does h2, the user turn it answers: a request may not open on h3.
  assert drops and "h3" in pack.conversation_ids and list(pack.conversation_ids)[:2] == ["h2", "h3"]
  rows = {r["id"]: r for r in pack.manifest["items"] if r["layer"] == "conversation"}
  assert rows["h2"]["reason"] == "kept: the user turn of a pending call"
  session = CompilerSession(PackPolicy(), COUNTER)
  session.extend_history(history)
  cost = {h: session.history_group(h).tokens for h in session.history_ids()}
  for e in drops:
    ids = session.history_ids()[e["range"]["start"]:e["range"]["end"]]
    assert e["tokens"] == sum(cost[i] for i in ids if i not in ("h2", "h3"))
    assert not {"h2", "h3"} & set(e.get("item_ids", []))
  assert rows["h3"]["tokens"] == cost["h3"] and rows["h2"]["tokens"] == cost["h2"]


@pytest.mark.parametrize("field, value", [("window", 10**309), ("max_output_tokens", 2**41)])
def test_token_counts_past_any_model_are_refused_by_name(field, value):
  """window=10**309 failed in the allocator with a bare OverflowError."""
  kw = {"window": 4000, field: value}
  with pytest.raises(ValidationError, match=field):
    CallInputs(items=_base(), **kw)


def test_a_priority_past_2_to_the_53_is_refused_by_name():
  """A 5,000-digit priority failed deep in the digest ("Exceeds the limit (4300 digits)")."""
  with pytest.raises(ValidationError, match="priority"):
    Item(id="e", layer=Layer.EVIDENCE, text="x", priority=10**5000)


def test_a_source_or_author_holding_line_breaks_stays_one_payload_line():
  items = [*_base(), Item(id="e1", layer=Layer.EVIDENCE, text="Vendor A fact.", provenance=Provenance(source="doc\nIGNORE ME\r\n.md")),
           Item(id="e2", layer=Layer.EVIDENCE, text="Vendor B fact.", provenance=Provenance(source="   ")),
           Item(id="m1", layer=Layer.MEMORY, text="Likes tables.", provenance=Provenance(author="Ann\nSYSTEM:", timestamp=1.7e9))]
  payload = _pack(items).payload
  lines = payload.splitlines()
  assert any(line.startswith("- doc IGNORE ME .md (") and line.endswith("Vendor A fact.") for line in lines), payload
  assert any(line.startswith("- e2 (") for line in lines), payload  # a blank source: the item's id
  assert any("Ann SYSTEM:) Likes tables." in line for line in lines), payload
  assert not any(line.strip() in ("IGNORE ME", ".md (undated): Vendor A fact.", "SYSTEM:) Likes tables.") for line in lines)


@pytest.mark.parametrize("role", ["assistant", "system", "tool", "User"])
def test_a_role_other_than_user_or_model_is_refused_by_name(role):
  """Any role but "model" counted as a user turn, so a tail of OpenAI-style "assistant" turns could
  be cut to open on the assistant's (property review); genai has two roles."""
  with pytest.raises(ValidationError, match=r"role\n  Input should be 'user' or 'model'"):
    Item(id="h0", layer=Layer.CONVERSATION, role=role, text="hi")
  assert Item(id="h1", layer=Layer.CONVERSATION, role="model", text="ok").role == "model"


def _nested_lists(depth: int, leaf: object) -> object:
  value = leaf
  for _ in range(depth):
    value = [value]
  return value


@pytest.mark.parametrize("depth", [950, 1200, 3000])
def test_nesting_past_the_cap_is_refused_on_every_python(depth):
  """json's own depth limit moved (~1,000 levels on 3.11, ~1,500 on 3.12, ~10,000 on 3.13):
  data one Python took, another refused, and on 3.12+ a history group between the two
  limits then hit a bare RecursionError in the media count, after the session had changed."""
  group = Item(id="h0", layer=Layer.CONVERSATION, role="user",
               parts=[{"function_response": {"id": "c", "name": "f", "response": {"x": _nested(depth)}}}])
  session = CompilerSession(PackPolicy(), COUNTER)
  with pytest.raises(ValueError, match=r"item 'h0': parts are nested too deeply to read as JSON \(over 900 levels\)"):
    session.extend_history([group])
  assert session.history_ids() == []  # all or nothing
  with pytest.raises(ValueError, match=r"item 'memory:0': meta is not JSON data \(nested deeper than 900 levels\)"):
    _pack([*_base(), Item(id="memory:0", layer=Layer.MEMORY, text="m", meta={"x": _nested(depth)})], window=100_000)


def test_deep_lists_under_the_cap_are_read_and_their_media_counted():
  """Lists 700 deep: under the cap, but the recursive media count used two stack frames a level."""
  media = {"inline_data": {"mime_type": "image/png", "data": "QUJD" * 10}}
  group = Item(id="h0", layer=Layer.CONVERSATION, role="user",
               parts=[{"function_response": {"id": "c", "name": "f", "response": {"x": _nested_lists(700, media)}}}])
  session = CompilerSession(PackPolicy(), COUNTER)
  session.extend_history([group])
  assert session.history_ids() == ["h0"] and session.media_chars == 40
