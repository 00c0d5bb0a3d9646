"""End to end through a real ADK Runner; ``OfflineLlm`` records exactly what it received."""

from __future__ import annotations

import copy
import math

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import FileArtifactService, InMemoryArtifactService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

import aether_frame.adk.plugin as plugin_module
from aether_frame.adk.guard import count_request
from aether_frame.adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin, context_pack_callbacks
from aether_frame.core import manifest as manifest_doc
from aether_frame.core.policy import PackPolicy
from aether_frame.core.render import INTERPRETATION_CONTRACT
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter

from tests.adk_support import (
    USER, Recorder, agent, fits, independent_tokens, make_runner, manifests, new_session, payload_of, research_reply, say,
)
from tests.strategies import orphans

pytestmark = pytest.mark.asyncio

COUNTER = get_counter()
PLAN = {"goal": "Research three vendors", "step": "Collect pricing facts", "acceptance": ["Every figure cites a source"]}


def get_weather(city: str) -> dict:
  """Returns the current weather for a city."""
  return {"city": city, "temp_c": 21}


def lookup_price(item: str) -> dict:
  """Looks up the list price of an item."""
  return {"item": item, "usd": 3}


def save_finding(text: str) -> dict:
  """Records a finding for the report."""
  return {"saved": len(text)}


def search_notes(query: str) -> dict:
  """Searches the research notes."""
  return {"query": query, "hits": [f"note on {query}: vendor A leads, vendor B follows."]}


def _decl_names(req) -> list[str]:
  return sorted(d.name for t in req.config.tools or () if isinstance(t, types.Tool) for d in t.function_declarations or ())


def _reserve(req, window: int) -> int:
  out = req.config.max_output_tokens
  return out if out is not None else math.ceil(0.10 * window)


def _payload_index(req) -> int:
  return next(i for i, c in enumerate(req.contents) if c.role == "user" and c.parts and c.parts[0].text
              and c.parts[0].text.startswith("CONTEXT PACK v1"))


def _pack_text(req) -> str:
  return req.contents[_payload_index(req)].parts[0].text


def _dump(contents) -> list[str]:
  return [c.model_dump_json(exclude_none=True) for c in contents]


async def _state(runner, session_id: str) -> dict:
  s = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
  return dict(s.state)


# ------------------------------------------------------------ long session
async def test_long_session_fits_a_small_window_and_trims_the_tail_in_chunks():
  window = 4096
  model = OfflineLlm(default=research_reply())
  ag, _ = agent(model=model, tools=[search_notes])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=window)
  runner = make_runner(ag, [recorder, plugin])
  session = await new_session(runner, state={"plan": PLAN})
  for t in range(30):
    text = f"search vendor {t} pricing" if t % 5 == 2 else f"Turn {t}: " + "more notes on vendor pricing, support and rollout plans. " * 10
    await say(runner, session.id, text)
  received = model.received
  assert len(received) == len(recorder.requests) == 36  # 30 turns + 6 tool steps
  for i, (req, orig) in enumerate(zip(received, recorder.requests)):
    tokens = count_request(req.contents, req.config, COUNTER)
    assert tokens + _reserve(req, window) <= window, f"call {i}: {tokens} tokens"
    assert independent_tokens(req) <= tokens, f"call {i}: the costing counts less than the request holds"
    fits(req, window, _reserve(req, window))
    assert orphans(req.contents, orig.contents) == [], f"call {i}"
    assert INTERPRETATION_CONTRACT in req.config.system_instruction
  originals = [count_request(r.contents, r.config, COUNTER) for r in recorder.requests]
  assert max(originals) > window, "the session must overflow the window without the plugin"
  # The plugin's own count (kept history costed once, at sync) equals a full recount of what was sent.
  docs = await manifests(runner, session.id)
  assert [d["runtime"]["request_tokens_estimate"] for d in docs] == [
      count_request(r.contents, r.config, COUNTER) for r in received
  ]

  # Chunked trimming: most calls keep the previous call's history as their prefix.
  kept, trims = 0, []
  for i in range(1, len(received)):
    prev = _dump(received[i - 1].contents[:_payload_index(received[i - 1])])
    cur = _dump(received[i].contents[:_payload_index(received[i])])
    if cur[:len(prev)] == prev:
      kept += 1
    else:
      trims.append(i)
      # A trim drops several contents at once: the new history starts well inside the old one.
      assert cur[0] in prev and prev.index(cur[0]) >= 2, f"call {i} trimmed a single content"
  assert len(trims) >= 2, "the fixture must trim more than once"
  assert kept >= 0.75 * (len(received) - 1), f"prefix kept on only {kept} of {len(received) - 1} calls"

  # The manifest of every call verifies, and the trimming calls record the trim.
  docs = await manifests(runner, session.id)
  assert len(docs) == len(received)
  for i, doc in enumerate(docs):
    assert doc["window"] == window and doc["agent"] == "assistant"
    assert doc["totals"]["tokens"] <= doc["usable"]
    if i in trims:
      reasons = [e["reason"] for e in doc["truncation_events"] if e["layer"] == "conversation"]
      assert any("chunked trim" in r for r in reasons), (i, reasons)
      assert doc["layers"]["conversation"]["requested"] > doc["layers"]["conversation"]["used"]
  state = await _state(runner, session.id)
  assert state["aether_frame:last_pack"]["pack_id"] == docs[-1]["pack_id"]
  assert "aether_frame:last_fault" not in state


# ---------------------------------------------------------------- tool turn
@pytest.mark.parametrize("knowledge", [None, [{"uri": "artifact://weather/paris.md", "summary": "Paris is mild in spring."}]],
                         ids=["no-evidence", "with-evidence"])
async def test_tool_turn_keeps_call_and_response_paired_and_the_payload_stable(knowledge):
  model = OfflineLlm(script=["Hi.", tool_call("get_weather", {"city": "Paris"}, "c1"), "It is 21 degrees in Paris."])
  ag, _ = agent(model=model, tools=[get_weather])
  recorder = Recorder()
  runner = make_runner(ag, [recorder, ContextPackPlugin(window=8192)])
  state = {"plan": PLAN} | ({"knowledge": knowledge} if knowledge else {})
  session = await new_session(runner, state=state)
  await say(runner, session.id, "hello")
  events = await say(runner, session.id, "What is the weather in Paris?")
  assert events[-1].content.parts[0].text == "It is 21 degrees in Paris."
  first, second = model.received[-2], model.received[-1]
  # The payload replaces the invocation's user turn, at the same position, in both steps.
  i1, i2 = _payload_index(first), _payload_index(second)
  assert i1 == i2 == len(first.contents) - 1
  assert _pack_text(first).endswith("USER REQUEST (VERBATIM):\nWhat is the weather in Paris?")
  assert _dump(first.contents[:i1]) == _dump(second.contents[:i2])
  # Step two: the call and its response follow the payload, paired and adjacent.
  call, resp = second.contents[i2 + 1:]
  assert call.role == "model" and call.parts[0].function_call.id == "c1"
  assert resp.role == "user" and resp.parts[0].function_response.id == "c1"
  assert resp.parts[0].function_response.response == {"city": "Paris", "temp_c": 21}
  assert orphans(second.contents, recorder.requests[-1].contents) == []
  # Byte-identical payload across the steps of one invocation (cache-stable prefix).
  assert first.contents[i1].model_dump_json() == second.contents[i2].model_dump_json()


# ----------------------------------------------------------------- transfer
@pytest.mark.parametrize("scoping, step_tools", [("off", None), ("hard", []), ("mask", [])])
async def test_transfer_between_agents_never_loses_transfer_to_agent(scoping, step_tools):
  helper_model = OfflineLlm(script=["Helper here: vendor B is cheapest."])
  helper = LlmAgent(name="helper", model=helper_model, instruction="You look up prices.", description="Price lookups.",
                    tools=[lookup_price])
  root_model = OfflineLlm(script=[tool_call("transfer_to_agent", {"agent_name": "helper"}, "t1")])
  root = LlmAgent(name="router", model=root_model, instruction="You route requests.", sub_agents=[helper], tools=[get_weather])
  recorder = Recorder()
  runner = make_runner(root, [recorder, ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping=scoping))])
  state = {"plan": PLAN} | ({"tools": step_tools} if step_tools is not None else {})
  session = await new_session(runner, state=state)
  events = await say(runner, session.id, "Which vendor is cheapest?")
  assert events[-1].author == "helper" and "vendor B" in events[-1].content.parts[0].text
  assert len(root_model.received) == 1 and len(helper_model.received) == 1
  for req, own_tool in ((root_model.received[0], "get_weather"), (helper_model.received[0], "lookup_price")):
    assert "transfer_to_agent" in _decl_names(req)
    assert "transfer_to_agent" in req.tools_dict
    assert _pack_text(req).endswith("USER REQUEST (VERBATIM):\nWhich vendor is cheapest?")
    allowed = req.config.tool_config.function_calling_config.allowed_function_names if req.config.tool_config else None
    if scoping == "hard":
      assert own_tool not in _decl_names(req) and own_tool not in req.tools_dict
    else:
      assert own_tool in _decl_names(req) and own_tool in req.tools_dict
    if scoping == "mask":
      assert allowed == ["transfer_to_agent"]
    else:
      assert allowed is None
  helper_req, helper_orig = helper_model.received[0], recorder.requests[-1]
  assert orphans(helper_req.contents, helper_orig.contents) == []
  # The helper's payload replaces the invocation's user turn in place; the
  # transcript of the router's transfer follows it unchanged.
  user_turn = next(i for i, c in enumerate(helper_orig.contents) if c.parts and c.parts[0].text == "Which vendor is cheapest?")
  assert _payload_index(helper_req) == user_turn
  assert _dump(helper_req.contents[user_turn + 1:]) == _dump(helper_orig.contents[user_turn + 1:])
  state = await _state(runner, session.id)
  assert "aether_frame:last_fault" not in state


# --------------------------------------------------------------- tool scoping
@pytest.mark.parametrize("mode", ["hard", "mask"])
async def test_step_tool_scoping(mode):
  model = OfflineLlm(script=["ok"])
  ag, _ = agent(model=model, tools=[get_weather, lookup_price, save_finding])
  runner = make_runner(ag, [ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping=mode))])
  session = await new_session(runner, state={"plan": PLAN, "tools": ["get_weather", "no_such_tool"]})
  await say(runner, session.id, "Check the weather.")
  req = model.received[0]
  tools_section = payload_of(req).split("TOOLS:\n", 1)[1].split("\n\n", 1)[0]
  if mode == "hard":
    assert _decl_names(req) == ["get_weather"]
    assert sorted(req.tools_dict) == ["get_weather"]
    assert req.config.tool_config is None or req.config.tool_config.function_calling_config is None
    assert tools_section == "- get_weather"
  else:
    assert _decl_names(req) == ["get_weather", "lookup_price", "save_finding"]
    assert sorted(req.tools_dict) == ["get_weather", "lookup_price", "save_finding"]
    fcc = req.config.tool_config.function_calling_config
    assert fcc.allowed_function_names == ["get_weather"]
    assert fcc.mode == types.FunctionCallingConfigMode.VALIDATED  # the agent set no mode of its own
  docs = await manifests(runner, session.id)
  scoping = docs[-1]["runtime"]["tool_scoping"]
  assert scoping["mode"] == mode and scoping["unknown"] == ["no_such_tool"]
  tool_rows = sorted(r["id"] for r in docs[-1]["items"] if r["layer"] == "tools")
  if mode == "hard":
    assert scoping["removed"] == ["lookup_price", "save_finding"]
    assert tool_rows == ["tool:get_weather"]
  else:
    assert scoping["allowed"] == ["get_weather"] and scoping["removed"] == []
    assert tool_rows == ["tool:get_weather", "tool:lookup_price", "tool:save_finding"]


async def test_mask_mode_keeps_declarations_byte_stable_across_steps():
  """Mask scoping exists for the prompt cache: declarations must not change between steps."""
  model = OfflineLlm(script=["one", "two"])
  ag, _ = agent(model=model, tools=[get_weather, lookup_price])
  runner = make_runner(ag, [ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping="mask"))])
  session = await new_session(runner, state={"tools": ["get_weather"]})
  await say(runner, session.id, "first")
  await runner.session_service.create_session(app_name=runner.app_name, user_id=USER, session_id="s2", state={"tools": ["lookup_price"]})
  await say(runner, "s2", "second")
  a, b = model.received
  assert [t.model_dump_json() for t in a.config.tools] == [t.model_dump_json() for t in b.config.tools]
  assert a.config.tool_config.function_calling_config.allowed_function_names == ["get_weather"]
  assert b.config.tool_config.function_calling_config.allowed_function_names == ["lookup_price"]


# -------------------------------------------------------------------- faults
async def test_fault_in_the_compiler_fails_open_and_is_recorded(tmp_path):
  def boom():
    raise RuntimeError("injected compiler fault")

  baseline_model = OfflineLlm(script=["fine"])
  base_agent, _ = agent(model=baseline_model, tools=[get_weather])
  base_runner = make_runner(base_agent, [])
  base_session = await new_session(base_runner, state={"plan": PLAN})
  await say(base_runner, base_session.id, "Hello there")

  model = OfflineLlm(script=["fine"])
  ag, _ = agent(model=model, tools=[get_weather])
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom, manifest_writer=ManifestWriter(spool_dir=tmp_path))
  runner = make_runner(ag, [plugin])
  session = await new_session(runner, state={"plan": PLAN})
  events = await say(runner, session.id, "Hello there")
  assert events[-1].content.parts[0].text == "fine"  # the run continued
  sent, base = model.received[0], baseline_model.received[0]
  assert _dump(sent.contents) == _dump(base.contents)  # the request went out unmodified
  assert sent.config.system_instruction == base.config.system_instruction
  assert INTERPRETATION_CONTRACT not in (sent.config.system_instruction or "")
  assert _decl_names(sent) == _decl_names(base)
  state = await _state(runner, session.id)
  fault = state["aether_frame:last_fault"]
  assert {k: fault[k] for k in ("error", "message", "count", "outcome", "callback", "agent")} == {
      "error": "RuntimeError", "message": "injected compiler fault", "count": 1,
      "outcome": "request sent unmodified", "callback": "before_model", "agent": ag.name}
  assert fault["invocation_id"] == events[0].invocation_id and fault["at"] > 0
  assert "test_plugin_e2e.py:" in fault["raised_at"]  # the line that raised (here, the injector)
  assert "aether_frame:last_pack" not in state
  assert plugin.faults == 1
  assert await runner.artifact_service.list_artifact_keys(app_name=runner.app_name, user_id=USER, session_id=session.id) == []


async def test_fault_count_accumulates_across_calls(tmp_path):
  def boom():
    raise ValueError("again")

  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  runner = make_runner(ag, [ContextPackPlugin(window=8192, _fault_injector=boom)])
  session = await new_session(runner)
  await say(runner, session.id, "one")
  await say(runner, session.id, "two")
  state = await _state(runner, session.id)
  assert state["aether_frame:last_fault"]["count"] == 2
  assert [payload_of(r) for r in model.received] == ["one", "two"]


# ----------------------------------------------------------------- manifests
@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_manifest_is_stored_loadable_and_verifies(kind, tmp_path):
  service = InMemoryArtifactService() if kind == "memory" else FileArtifactService(root_dir=tmp_path / "artifacts")
  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192, manifest_writer=ManifestWriter(spool_dir=tmp_path / "spool"))
  runner = make_runner(ag, [plugin], artifact_service=service)
  session = await new_session(runner, state={"plan": PLAN, "knowledge": [{"uri": "artifact://r/q2.md", "summary": "Q2 prices fell."}]})
  await say(runner, session.id, "first question")
  await say(runner, session.id, "second question")
  keys = await service.list_artifact_keys(app_name=runner.app_name, user_id=USER, session_id=session.id)
  assert MANIFEST_FILENAME in keys
  docs = await manifests(runner, session.id)
  assert len(docs) == 2
  last = docs[-1]
  assert last["invocation_id"] and last["agent"] == "assistant" and last["model"] == "offline-model"
  assert last["artifact_uris"] == ["artifact://r/q2.md"]
  assert last["payload_sha256"] == "sha256:" + __import__("hashlib").sha256(payload_of(model.received[-1]).encode()).hexdigest()
  state = await _state(runner, session.id)
  assert state["aether_frame:last_pack"]["pack_id"] == last["pack_id"]
  assert state["aether_frame:last_pack"]["version"] == 1
  tampered = copy.deepcopy(last)
  tampered["window"] += 1
  with pytest.raises(manifest_doc.ManifestIntegrityError, match="checksum mismatch"):
    manifest_doc.verify(tampered)


async def test_no_artifact_service_the_run_continues_and_packs_anyway(tmp_path):
  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192, manifest_writer=ManifestWriter(spool_dir=tmp_path))
  app = App(name="noart", root_agent=ag, plugins=[plugin])
  runner = Runner(app=app, session_service=InMemorySessionService())
  assert runner.artifact_service is None
  session = await runner.session_service.create_session(app_name="noart", user_id=USER, state={"plan": PLAN})
  await say(runner, session.id, "hello")
  await say(runner, session.id, "again")
  assert all(payload_of(r).startswith("CONTEXT PACK v1") for r in model.received)
  s = await runner.session_service.get_session(app_name="noart", user_id=USER, session_id=session.id)
  assert "aether_frame:last_fault" not in s.state
  assert s.state["aether_frame:last_pack"]["version"] is None
  manifest_doc.verify(plugin.manifests.last_document)
  assert plugin.manifests.last_document["pack_id"] == s.state["aether_frame:last_pack"]["pack_id"]


# ------------------------------------------------------------ agent callbacks
async def test_agent_level_callbacks_pack_every_call(tmp_path):
  before, after = context_pack_callbacks(window=2048, manifest_writer=ManifestWriter(spool_dir=tmp_path))
  assert before.plugin is after.plugin
  model = OfflineLlm(default="Sure. " + "Details follow. " * 20)
  ag = LlmAgent(name="solo", model=model, instruction="Be brief.", before_model_callback=before, after_model_callback=after)
  runner = make_runner(ag, [])
  session = await new_session(runner, state={"plan": PLAN})
  for t in range(12):
    await say(runner, session.id, f"Message {t}: " + "notes " * 80)
  for req in model.received:
    assert payload_of(req).startswith("CONTEXT PACK v1")
    assert count_request(req.contents, req.config, COUNTER) + _reserve(req, 2048) <= 2048
    fits(req, 2048, _reserve(req, 2048))
  docs = await manifests(runner, session.id)
  assert len(docs) == 12 and all(d["agent"] == "solo" for d in docs)
  assert any(e["layer"] == "conversation" for e in docs[-1]["truncation_events"])
  # The after-callback feeds the calibrator with the model's reported usage.
  assert before.plugin.calibrator.snapshot("offline-model")["samples"] >= 11


# ------------------------------------------------------------- restart, media, memory
async def test_a_restarted_plugin_keeps_the_cached_prefix():
  """A cold plugin (new process) on the same session sends the same history prefix as the warm one."""
  window = 3000
  texts = [f"Turn {t}: " + "notes about vendor prices and rollout dates. " * 12 for t in range(24)]
  model_a = OfflineLlm(default="Reply. " + "Understood, noted for the comparison. " * 4)
  ag_a, _ = agent(model=model_a)
  runner_a = make_runner(ag_a, [ContextPackPlugin(window=window)])
  s1 = await new_session(runner_a, state={"plan": PLAN})
  for text in texts[:-1]:
    await say(runner_a, s1.id, text)
  snap = await runner_a.session_service.get_session(app_name=runner_a.app_name, user_id=USER, session_id=s1.id)
  snap = copy.deepcopy(snap)
  await say(runner_a, s1.id, texts[-1])
  warm = model_a.received[-1]

  model_b = OfflineLlm(default="Reply.")
  ag_b, _ = agent(model=model_b)
  runner_b = make_runner(ag_b, [ContextPackPlugin(window=window)], session_service=runner_a.session_service)
  s2 = await runner_a.session_service.create_session(app_name=runner_a.app_name, user_id=USER, state=dict(snap.state))
  for ev in snap.events:
    await runner_a.session_service.append_event(s2, ev)
  await say(runner_b, s2.id, texts[-1])
  cold = model_b.received[-1]
  assert any("chunked trim" in e["reason"] for d in await manifests(runner_a, s1.id) for e in d["truncation_events"]), \
      "the fixture must have trimmed before the restart"
  assert _dump(cold.contents[:_payload_index(cold)]) == _dump(warm.contents[:_payload_index(warm)])
  assert cold.config.system_instruction == warm.config.system_instruction


PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


async def test_non_text_user_parts_ride_along_with_the_payload():
  model = OfflineLlm(default="A red pixel.")
  ag, _ = agent(model=model)
  runner = make_runner(ag, [ContextPackPlugin(window=4096)])
  session = await new_session(runner)
  image = types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG_1X1))
  await say(runner, session.id, "What is in this image?", parts=[image])
  req = model.received[0]
  msg = req.contents[_payload_index(req)]
  assert msg.parts[0].text.endswith("USER REQUEST (VERBATIM):\nWhat is in this image?")
  assert len(msg.parts) == 2 and msg.parts[1].inline_data.data == PNG_1X1
  doc = (await manifests(runner, session.id))[-1]
  # The image is costed (258 tokens for a small image) in the task layer and the total.
  assert doc["layers"]["task"]["used"] >= 258
  assert count_request(req.contents, req.config, COUNTER) <= doc["usable"]


async def test_memory_service_hits_land_fenced_in_memory():
  from google.adk.memory import InMemoryMemoryService

  memory = InMemoryMemoryService()
  model = OfflineLlm(default="Noted.")
  ag, _ = agent(model=model)
  runner = make_runner(ag, [ContextPackPlugin(window=8192)], memory_service=memory)
  old = await new_session(runner)
  await say(runner, old.id, "My favourite vendor is Zeta Corporation because of their support.")
  await memory.add_session_to_memory(await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=old.id))
  fresh = await new_session(runner)
  await say(runner, fresh.id, "Which vendor is my favourite?")
  payload = model.received[-1].contents[-1].parts[0].text
  memory_section = payload.split("\nMEMORY:\n", 1)[1].split("\n\n", 1)[0].split("\n")
  assert memory_section[0].startswith("<<<DATA ") and memory_section[-1].startswith("<<<END DATA ")
  assert any("Zeta Corporation" in ln for ln in memory_section[1:-1])
  doc = (await manifests(runner, fresh.id))[-1]
  assert any(r["layer"] == "memory" and r["status"] == "included" and r["pointer"].startswith("memory://") for r in doc["items"])


class _InflateAnOldTurn(BasePlugin):
  """Another plugin, ahead of ours, that rewrites an old content in place: same number of
  contents, same first and last one, so the plugin's incremental history sync cannot see it."""

  def __init__(self):
    super().__init__("inflate_old_turn")
    self.active = False

  async def before_model_callback(self, *, callback_context, llm_request):
    if self.active and len(llm_request.contents) > 3:
      old = llm_request.contents[1]
      llm_request.contents[1] = types.Content(role=old.role, parts=[types.Part(text="long answer " * 3000)])
    return None


async def test_the_guard_recounts_the_sent_request_and_catches_a_stale_history_view(monkeypatch):
  # The history sync notices an edited turn (see test_plugin_history_edits); blinded here,
  # the compiler's view goes stale, and the guard is the safety net under test.
  monkeypatch.setattr(plugin_module, "_same_payloads", lambda history, known: True)
  window = 4096
  model = OfflineLlm(default="Short answer.")
  ag, _ = agent(model=model)
  inflate = _InflateAnOldTurn()
  plugin = ContextPackPlugin(window=window)
  runner = make_runner(ag, [inflate, plugin])
  session = await new_session(runner)
  for t in range(3):
    await say(runner, session.id, f"Turn {t}: a short question.")
  inflate.active = True
  await say(runner, session.id, "Turn 3: and now?")
  req = model.received[-1]
  # The compiler still costs the old turn as short and keeps it; the guard's own recount of
  # the rewritten request finds it over the window and sends the minimal safe pack instead.
  assert count_request(req.contents, req.config, COUNTER) + _reserve(req, window) <= window
  fits(req, window, _reserve(req, window))
  doc = (await manifests(runner, session.id))[-1]
  assert doc["runtime"]["guard"]["fallback"] is True
  assert any("over the usable" in p for p in doc["runtime"]["guard"]["problems"])
  assert plugin.faults == 0
