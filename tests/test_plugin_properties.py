"""Plugin-level properties, through a real ADK Runner per example.

Each example builds a session whose history is random real ADK events (user
and model text, tool calls with results, some calls still pending), random
plan / evidence state and a random window, then sends one to three
messages (some make the model call a tool first, so the warm incremental
history sync and in-flight steps are exercised). A
recording plugin placed before ``ContextPackPlugin`` keeps the original
request; ``OfflineLlm`` keeps what was actually sent. Checked on the sent
request: (a) real token count + reserve <= window, (b) no orphaned call or
response, (c) every original history content is sent or covered by the
manifest's truncation events, and the fixed parts are never lost.
"""

from __future__ import annotations

import asyncio
import math

from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from aether_frame.adk.guard import check_request, count_request, pending_calls
from aether_frame.adk.manifest_store import ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.canonical import sha256_hex
from aether_frame.core.render import INTERPRETATION_CONTRACT
from aether_frame.offline_model import OfflineLlm, tool_call
from google.genai import types
from aether_frame.tokenizers import get_counter

from tests.adk_support import agent, fits, independent_tokens, make_runner, manifests, new_session, say
from tests.strategies import PLUGIN_EXAMPLES, TOOL_NAMES, conversation_scripts, orphans, parse_budget, prose, script_to_events
from tests.test_plugin_e2e import Recorder, get_weather, lookup_price, save_finding, search_notes

COUNTER = get_counter()
TOOLS = {f.__name__: f for f in (search_notes, get_weather, save_finding, lookup_price)}
assert set(TOOLS) == set(TOOL_NAMES)


@st.composite
def sessions(draw):
  knowledge = [
      {"uri": f"artifact://k/{i}.md", "summary": draw(prose(1, 10)), "checklist": draw(st.booleans()), "score": i / 10}
      for i in range(draw(st.integers(0, 6)))
  ]
  plan = draw(st.none() | st.just({"goal": "Compare vendors", "step": "Collect prices", "acceptance": ["Cite sources"]}))
  return {
      "script": draw(conversation_scripts(max_turns=40)),
      "knowledge": knowledge,
      "plan": plan,
      # Weighted toward windows the scripts overflow (trimmed tails), with tiny (unpackable) and roomy ones.
      "window": draw(st.one_of(st.integers(600, 1400), st.integers(1400, 2200), st.integers(1800, 3000), st.integers(3000, 8000))),
      "max_out": draw(st.none() | st.integers(0, 400)),
      # A message mentioning "weather" makes the model call a tool first.
      "messages": draw(st.lists(prose(1, 4), min_size=1, max_size=3)),
  }


def _reply():
  n = iter(range(10**6))

  def reply(req):
    last = req.contents[-1]
    if any(p.function_response for p in last.parts or ()):
      return "done"
    if "weather" in (last.parts[0].text or "").rsplit("USER REQUEST (VERBATIM):", 1)[-1].lower():
      return tool_call("get_weather", {"city": "Paris"}, f"live-{next(n)}")
    return "ok"

  return reply


def _pack_index(contents) -> int:
  hits = [i for i, c in enumerate(contents) if c.role == "user" and c.parts and (c.parts[0].text or "").startswith("CONTEXT PACK v1")]
  assert len(hits) == 1, hits
  return hits[0]


def _anchor(contents) -> int:
  return max(i for i, c in enumerate(contents) if c.role == "user" and not any(p.function_response for p in c.parts or ()))


async def _run(case: dict) -> None:
  model = OfflineLlm(default=_reply())
  ag, _ = agent(model=model, tools=list(TOOLS.values()))
  if case["max_out"] is not None:
    ag.generate_content_config = types.GenerateContentConfig(max_output_tokens=case["max_out"])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=case["window"], manifest_writer=ManifestWriter(store_inputs=False, spool_dir=False))
  runner = make_runner(ag, [recorder, plugin])
  state = {"knowledge": case["knowledge"]} if case["knowledge"] else {}
  if case["plan"]:
    state["plan"] = case["plan"]
  session = await new_session(runner, state=state)
  for event in script_to_events(case["script"], agent=ag.name):
    await runner.session_service.append_event(session, event)
  calls, fault = [], None
  for message in case["messages"]:
    before = len(model.received)
    await say(runner, session.id, message)
    s = await runner.session_service.get_session(app_name=runner.app_name, user_id="u1", session_id=session.id)
    fault = s.state.get("aether_frame:last_fault")
    calls += [(message, i) for i in range(before, len(model.received))]
  docs = iter(await manifests(runner, session.id))  # one per packed call, in call order
  for message, i in calls:
    _check_call(case, message, model.received[i], recorder.requests[i], fault, docs)
  assert next(docs, None) is None, "more manifests than packed calls"


def _check_call(case, message, sent, orig, fault, docs) -> None:
  window = case["window"]
  reserve = case["max_out"] if case["max_out"] is not None else math.ceil(0.10 * window)
  note(f"window={window} reserve={reserve} original={count_request(orig.contents, orig.config, COUNTER)} fault={fault}")
  if not any((c.parts[0].text or "").startswith("CONTEXT PACK v1") for c in sent.contents if c.parts):
    event("call: unpacked (window too small)")
    # Only an impossible window may stop the pack; then the request goes out
    # untouched (and no manifest is written).
    assert fault is not None and fault["error"] == "ContextBudgetExhausted", fault
    assert [c.model_dump_json() for c in sent.contents] == [c.model_dump_json() for c in orig.contents]
    return

  # (a) fits, by the real tokenizer, on the request the model received.
  tokens = count_request(sent.contents, sent.config, COUNTER)
  assert tokens + reserve <= window, f"{tokens} + reserve {reserve} > window {window}"
  assert independent_tokens(sent) <= tokens, "the costing counts less than the request holds"
  fits(sent, window, reserve)
  # (b) no orphans; the plugin's own guard agrees.
  assert orphans(sent.contents, orig.contents) == []
  guard = check_request(sent.contents, sent.config, COUNTER, usable=window - reserve, pending=pending_calls(orig.contents))
  assert guard.ok, guard.problems
  # Fixed parts survive: system instruction (+ contract), the user's words verbatim, the tools.
  assert INTERPRETATION_CONTRACT in sent.config.system_instruction
  assert orig.config.system_instruction in sent.config.system_instruction
  p = _pack_index(sent.contents)
  payload = sent.contents[p].parts[0].text
  assert payload.endswith("USER REQUEST (VERBATIM):\n" + message)
  assert sorted(sent.tools_dict) == sorted(orig.tools_dict)
  doc = next(docs)
  anchor = _anchor(orig.contents)
  # In-flight steps of this invocation follow the payload unchanged.
  assert [c.model_dump_json() for c in sent.contents[p + 1:]] == [c.model_dump_json() for c in orig.contents[anchor + 1:]]
  assert doc["runtime"]["request_tokens_estimate"] == tokens
  if doc["runtime"]["guard"]["fallback"]:
    event("call: guard fallback")
    assert p == 0  # the validity guard's minimal safe pack: no history at all
    return
  assert doc["payload_sha256"] == "sha256:" + sha256_hex(payload)
  # The compiler's accounting never understates what was sent (it is exact
  # near the limit and a cheap upper bound elsewhere).
  assert tokens <= doc["totals"]["tokens"] <= doc["usable"]

  # (c) every original history content is sent, or dropped with a record.
  hist_dump = [c.model_dump_json() for c in orig.contents[:anchor]]
  kept_dump = [c.model_dump_json() for c in sent.contents[:p]]
  tail = doc["tail"]
  first_kept = int(tail["start_id"][1:].split("-")[0]) if tail["start_id"] else len(hist_dump)
  n_tail = len(hist_dump) - first_kept
  # The kept history is the original suffix from the tail start, preceded
  # only by pinned contents that come from before it, in order.
  assert kept_dump[len(kept_dump) - n_tail:] == hist_dump[first_kept:], "the kept tail is not the original suffix"
  pinned_kept, rest = kept_dump[:len(kept_dump) - n_tail], iter(hist_dump[:first_kept])
  assert all(d in rest for d in pinned_kept), "a sent history content is not an original one"
  dropped_positions = sorted(q for ev in doc["truncation_events"] if ev["layer"] == "conversation"
                             for q in range(ev["range"]["start"], ev["range"]["end"]))
  assert dropped_positions == list(range(tail["start"])), "dropped groups are not exactly the trimmed prefix"
  event("call: packed, history trimmed" if tail["start"] else "call: packed, whole history")
  pinned_rows = sum(1 for r in doc["items"] if r["layer"] == "conversation" and r.get("reason", "").startswith("pinned"))
  assert parse_budget(payload).get("conversation", {"count": 0})["count"] == tail["start"] - pinned_rows
  # Evidence from state: rendered or named by an event.
  named = {i for ev in doc["truncation_events"] for i in ev.get("item_ids", ())}
  for k in case["knowledge"]:
    assert f"- {k['uri']} " in payload or f"evidence:{k['uri']}" in named, k["uri"]


@settings(max_examples=PLUGIN_EXAMPLES)
@given(case=sessions())
def test_plugin_sent_request_fits_pairs_and_accounts(case):
  asyncio.run(_run(case))

