"""A trimmed request starts on a user turn, through a real Runner.

Gemini refuses contents that open with a function call, and Anthropic any
that open with other than a user message. The tail was cut at any group
boundary: of 28 requests of a tool-calling chat under a 2,048-token window,
12 opened with the model's reply and one with its function call.
"""

from __future__ import annotations

from google.adk.agents import LlmAgent

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.compiler import CallInputs, CompileInput, compile_pack
from aether_frame.core.items import Item, Layer
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter
from tests.adk_support import fits, manifests, make_runner, new_session, say

FILL = "Notes on vendor pricing, support tiers and rollout dates. " * 4


def get_weather(city: str) -> dict:
  """Weather for a city."""
  return {"city": city, "forecast": "sunny and mild with light winds from the west " * 6}


def _reply(request):
  answered = any(p.function_response for c in request.contents[-2:] for p in c.parts or ())
  return "Answer. " + FILL if answered else tool_call("get_weather", {"city": "Paris"})


async def test_every_trimmed_request_of_a_tool_calling_chat_opens_with_a_user_turn():
  model = OfflineLlm(default=_reply)
  plugin = ContextPackPlugin(window=2048)
  runner = make_runner(LlmAgent(name="a", model=model, instruction="Help.", tools=[get_weather]), [plugin])
  session = await new_session(runner)
  for t in range(14):
    await say(runner, session.id, f"Turn {t}: weather? " + FILL)
  docs = await manifests(runner, session.id)
  assert plugin.faults == 0 and len(model.received) == len(docs) == 28
  assert sum(1 for d in docs if d["tail"]["start"]) > 10, "the window must trim: nothing was tested"
  for i, request in enumerate(model.received):
    first = request.contents[0]
    assert first.role == "user", (i, first)
    assert not any(p.function_response or p.function_call for p in first.parts or ()), (i, first)
    fits(request, 2048, docs[i]["reserve"])
    assert docs[i]["runtime"]["guard"]["ok"], docs[i]["runtime"]["guard"]


def test_the_cut_moves_forward_to_a_user_turn_and_records_what_it_drops():
  counter = get_counter()
  history = []
  for t in range(30):  # user, model call + tool response, model answer
    history.append(Item(id=f"u{t}", layer=Layer.CONVERSATION, role="user", parts=[{"text": f"Turn {t}. " + FILL}]))
    history.append(Item(id=f"c{t}", layer=Layer.CONVERSATION, role="model", parts=[
        {"function_call": {"id": f"f{t}", "name": "get_weather", "args": {"city": "Paris"}}},
        {"function_response": {"id": f"f{t}", "name": "get_weather", "response": {"ok": FILL}}}]))
    history.append(Item(id=f"a{t}", layer=Layer.CONVERSATION, role="model", parts=[{"text": "Answer. " + FILL}]))
  items = [Item(id="task:u", layer=Layer.TASK, kind="user_request", text="And tomorrow?")]
  for window in range(1500, 6000, 97):  # many budgets: cuts that would land on c/a groups
    pack = compile_pack(CompileInput(policy=PackPolicy(), history=history, call=CallInputs(items=items, window=window)), counter)
    kept = pack.conversation_ids
    assert not kept or kept[0].startswith("u"), (window, kept[:2])
    dropped = set()
    for e in pack.manifest["truncation_events"]:
      if e["layer"] == "conversation" and "range" in e:
        dropped.update(g.id for g in history[e["range"]["start"]:e["range"]["end"]])
    assert set(kept).isdisjoint(dropped) and set(kept) | dropped == {g.id for g in history}, window  # nothing lost


def long_job(x: str) -> dict:
  """Starts a long job."""
  return None


async def test_a_pending_long_running_call_from_a_trimmed_turn_comes_after_its_user_turn():
  """The pending call is never dropped, and came first once its own user turn was cut."""
  from google.adk.tools.long_running_tool import LongRunningFunctionTool
  from google.genai import types

  call = types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name="long_job", args={"x": "beta"}))])
  model = OfflineLlm(script=[call, "beta is running."] + [f"Reply {t}. " + FILL * 2 for t in range(10)], default="4")
  plugin = ContextPackPlugin(window=2048)
  runner = make_runner(LlmAgent(name="a", model=model, instruction="Help.", tools=[LongRunningFunctionTool(long_job)]), [plugin])
  session = await new_session(runner)
  await say(runner, session.id, "start job beta")
  for t in range(10):
    await say(runner, session.id, f"Turn {t}: " + FILL * 2)
  await say(runner, session.id, "meanwhile, what's 2+2?")
  docs = await manifests(runner, session.id)
  last = model.received[-1].contents
  assert plugin.faults == 0 and docs[-1]["tail"]["start"] > 2, "the window must trim past the call: nothing was tested"
  assert [c.role for c in last[:2]] == ["user", "model"]
  assert last[0].parts[0].text == "start job beta" and last[1].parts[0].function_call.name == "long_job"
  rows = {r["id"]: r for r in docs[-1]["items"] if r["layer"] == "conversation"}
  assert sorted(r["reason"] for r in rows.values() if r.get("reason", "").startswith(("pinned", "kept:"))) == [
      "kept: the user turn of a pending call", "pinned (pending call or confirmation)"]
  for i, request in enumerate(model.received):
    assert request.contents[0].role == "user", i


def test_a_pending_call_keeps_its_user_turn_however_far_back_it_is():
  """A long tool loop (100 call/response groups) before a long-running call: the user turn
  that started the invocation is kept with the pending call, and the request opens with it."""
  counter = get_counter()
  history = [Item(id="u0", layer=Layer.CONVERSATION, role="user", parts=[{"text": "Run the whole audit."}])]
  for k in range(100):
    history.append(Item(id=f"c{k}", layer=Layer.CONVERSATION, role="model", parts=[
        {"function_call": {"id": f"f{k}", "name": "check", "args": {"n": k}}},
        {"function_response": {"id": f"f{k}", "name": "check", "response": {"ok": FILL}}}]))
  history.append(Item(id="job", layer=Layer.CONVERSATION, role="model", pinned=True, parts=[
      {"function_call": {"id": "lr", "name": "long_job", "args": {"x": "beta"}}}]))
  for t in range(12):
    history.append(Item(id=f"u{t + 1}", layer=Layer.CONVERSATION, role="user", parts=[{"text": f"Turn {t}. " + FILL}]))
    history.append(Item(id=f"a{t + 1}", layer=Layer.CONVERSATION, role="model", parts=[{"text": "Answer. " + FILL}]))
  items = [Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Status?")]
  pack = compile_pack(CompileInput(policy=PackPolicy(), history=history, call=CallInputs(items=items, window=4096)), counter)
  kept = list(pack.conversation_ids)
  assert pack.manifest["tail"]["start"] > 101, "the window must trim past the pending call: nothing was tested"
  assert kept[:2] == ["u0", "job"], kept[:4]
  rows = {r["id"]: r for r in pack.manifest["items"]}
  assert rows["u0"]["reason"] == "kept: the user turn of a pending call"
