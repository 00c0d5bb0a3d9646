"""ADK 2.x graph ``Workflow`` roots and resumable apps, through a real Runner.

A ``Workflow`` runs ``LlmAgent`` nodes in sequence, in fan-out branches
(sub-branches ``name@run``), as ``parallel_worker`` items, as concurrent
``ctx.run_node`` lanes (one branch, node paths ``wf@1/fan@1/writer@<n>``),
around loops and retries. A resumable app pauses an invocation on a
long-running tool or a tool confirmation and resumes it by id. Every model
call must still go out packed, each lane on its own compiler, with its own
manifest and no fault left unrecorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.apps import App, ResumabilityConfig
from google.adk.artifacts import InMemoryArtifactService
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.workflow import START, JoinNode, RetryConfig, Workflow, node
from google.genai import types
from pydantic import BaseModel

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, tool_call

from tests.adk_support import USER, Recorder, make_runner, manifests, new_session, say
from tests.test_plugin_e2e import _decl_names, _dump, _pack_text, _payload_index, _state, get_weather

pytestmark = pytest.mark.asyncio

PACK_HEADER = "CONTEXT PACK v1"
REQUEST = "USER REQUEST (VERBATIM):\n"


def other_tool(query: str) -> dict:
  """A tool the step does not list."""
  return {"query": query}


def _user_text(content: types.Content) -> str:
  return "\n".join(p.text for p in content.parts or () if p.text)


def _asked(req) -> str:
  """What the request asks: its last human text content (the user's part of a payload)."""
  users = [c for c in req.contents if c.role == "user" and any(p.text for p in c.parts or ())]
  text = _user_text(users[-1])
  return text.rsplit(REQUEST, 1)[1] if text.startswith(PACK_HEADER) else text


def _same_but_payload(sent, original) -> bool:
  """Everything but the user turn the payload replaced went out as ADK built it, in order."""
  p = _payload_index(sent)
  turn = _pack_text(sent).rsplit(REQUEST, 1)[1]
  q = max(i for i, c in enumerate(original.contents) if c.role == "user" and _user_text(c) == turn)
  return (_dump(sent.contents[:p]) == _dump(original.contents[:q])
          and _dump(sent.contents[p + 1:]) == _dump(original.contents[q + 1:]))


def _originals_by_ask(recorder: Recorder) -> dict[str, list]:
  out: dict[str, list] = {}
  for r in recorder.requests:
    out.setdefault(_asked(r), []).append(r)
  return out


def _pointer_events(events) -> list[Event]:
  return [e for e in events if LAST_PACK_KEY in (e.actions.state_delta or {})]


# ----------------------------------------------------------------- the graph
async def test_every_call_of_a_graph_with_a_fan_out_and_a_join_is_packed():
  """START -> planner -> function -> (left, right) -> join -> merge: each agent's
  node input is its user turn (the function's output, the join's dict), each
  branch compiles on its own key, and each call writes its own manifest."""
  models = {n: OfflineLlm(default=f"answer from {n}") for n in ("planner", "left", "right", "merge")}
  agents = {n: LlmAgent(name=n, model=m, instruction=f"You are the {n}.") for n, m in models.items()}

  def shape(node_input: str) -> str:
    return f"shaped: {node_input}"

  wf = Workflow(name="wf", edges=[
      (START, agents["planner"], shape, (agents["left"], agents["right"]), JoinNode(name="join"), agents["merge"]),
  ])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(wf, [recorder, plugin])
  session = await new_session(runner)
  events = await say(runner, session.id, "Design a harbour.")

  assert [len(m.received) for m in models.values()] == [1, 1, 1, 1]
  originals = _originals_by_ask(recorder)
  asks = {"planner": "Design a harbour.", "left": "shaped: answer from planner", "right": "shaped: answer from planner"}
  for name, model in models.items():
    sent = model.received[0]
    ask = _pack_text(sent).rsplit(REQUEST, 1)[1]
    assert _pack_text(sent).startswith(PACK_HEADER), name
    if name == "merge":  # the join's dict, keyed in the order the branches finished
      assert json.loads(ask) == {"left": "answer from left", "right": "answer from right"}
    else:
      assert ask == asks[name], name
    assert _same_but_payload(sent, originals[ask][0]), name
  branches = {e.author: e.branch for e in events if e.author in ("left", "right") and e.content}
  assert branches["left"] != branches["right"] and None not in branches.values()
  by_agent = {k[3]: k[4] for k in plugin._sessions}  # one compiler per agent, keyed by its branch
  assert len(plugin._sessions) == 4 and by_agent["left"] == branches["left"] and by_agent["right"] == branches["right"]
  docs = await manifests(runner, session.id)
  assert sorted(d["agent"] for d in docs) == sorted(models)
  assert all(d["valid"] and d["runtime"]["guard"] == {"ok": True, "problems": [], "fallback": False} for d in docs)
  assert plugin.faults == 0 and LAST_FAULT_KEY not in await _state(runner, session.id)


async def test_parallel_workers_each_point_at_their_own_manifest():
  """``parallel_worker=True`` runs one agent per item, each in a sub-branch; the
  pointer each call leaves in state names that call's own manifest version."""
  model = OfflineLlm(default=lambda req: "done: " + _asked(req))
  worker = LlmAgent(name="worker", model=model, instruction="Work the item.", parallel_worker=True)

  def split(node_input: str) -> list:
    return ["item-one", "item-two", "item-three"]

  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(Workflow(name="wf", edges=[(START, split, worker)]), [plugin])
  session = await new_session(runner)
  events = await say(runner, session.id, "Work through the list.")

  assert sorted(_pack_text(r).rsplit(REQUEST, 1)[1] for r in model.received) == ["item-one", "item-three", "item-two"]
  docs = await manifests(runner, session.id)
  by_version = dict(enumerate(docs))
  pointers = _pointer_events(events)
  assert len(pointers) == 3 and len({e.branch for e in pointers}) == 3
  for e in pointers:
    ptr = e.actions.state_delta[LAST_PACK_KEY]
    doc = by_version[ptr["version"]]
    assert doc["pack_id"] == ptr["pack_id"] and doc["agent"] == e.author == "worker"
  assert (await _state(runner, session.id))[LAST_PACK_KEY] == pointers[-1].actions.state_delta[LAST_PACK_KEY]
  assert len({k[4:] for k in plugin._sessions}) == 3
  assert plugin.faults == 0


def _lane_reply(req):
  """Lane 0 calls a tool on the first turn, so the lanes' histories differ in length."""
  ask = _asked(req)
  if ask == "turn0 part 0" and not any(p.function_response for c in req.contents for p in c.parts or ()):
    return tool_call("get_weather", {"city": "Paris"})
  return f"answer to {ask}: " + "detail " * 30


async def test_concurrent_run_node_lanes_of_one_agent_keep_their_own_history():
  """A function node that gathers ``ctx.run_node(agent)`` runs the lanes on one
  branch; each sees only its own earlier turns. Keyed by branch alone they
  shared a compiler: a lane re-synced it while another awaited the artifact
  listing, which then compiled the other lane's history (its tool call cut,
  the guard fell back to the minimal pack; or a turn silently dropped)."""
  model = OfflineLlm(default=_lane_reply)
  writer = LlmAgent(name="writer", model=model, instruction="Write.", include_contents="default", tools=[get_weather])

  @node(rerun_on_resume=True)
  async def fan(ctx: Context, node_input: str) -> list:
    return await asyncio.gather(*(ctx.run_node(writer, node_input=f"{node_input} part {i}") for i in range(3)))

  recorder = Recorder()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(Workflow(name="wf", edges=[(START, fan)]), [recorder, plugin])
  session = await new_session(runner)
  for t in range(3):
    await say(runner, session.id, f"turn{t}")

  assert len(model.received) == 10  # three lanes a turn, and lane 0's tool step
  originals = _originals_by_ask(recorder)
  for sent in model.received:
    ask = _asked(sent)  # the lane's node input, sent after the payload on the invocation's user turn
    original = originals[ask].pop(0)
    assert _same_but_payload(sent, original), ask  # a 100k window keeps every lane's whole history
  assert not any(originals.values())
  docs = await manifests(runner, session.id)
  assert [d["runtime"]["guard"]["fallback"] for d in docs] == [False] * 10
  paths = sorted(k[5] for k in plugin._sessions)  # keyed without the top run's number (see ``_key``)
  assert paths == ["wf/fan@1/writer@1", "wf/fan@1/writer@2", "wf/fan@1/writer@3"]
  assert len(plugin.manifests._encoder._streams) == 3  # the replay-input memo is per lane too
  assert plugin.faults == 0


async def test_a_graph_loop_packs_every_iteration_and_stays_warm_across_turns():
  """A route back to the agent runs it once per iteration, each a node run of its
  own (``a@1``, ``a@2``) whose history ADK filters by node path; each iteration
  keeps its compiler from turn to turn."""
  model = OfflineLlm(default=lambda req: "draft for " + _asked(req))
  writer = LlmAgent(name="writer", model=model, instruction="Improve the draft.", include_contents="default")
  runs = {"n": 0}

  def judge(node_input: str):
    runs["n"] += 1
    return Event(output=node_input, route="again" if runs["n"] % 2 else "done")

  def publish(node_input: str) -> str:
    return "published " + node_input

  wf = Workflow(name="wf", edges=[(START, writer, judge), (judge, {"again": writer, "done": publish})])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(wf, [recorder, plugin])
  session = await new_session(runner)
  await say(runner, session.id, "Write a poem.")
  caches = dict(plugin._sessions)
  sizes = {k: len(c.fps) for k, c in caches.items()}
  events = await say(runner, session.id, "Shorter, please.")

  assert len(model.received) == 4
  for sent, original in zip(model.received, recorder.requests):
    assert _pack_text(sent).startswith(PACK_HEADER)
    assert _same_but_payload(sent, original)
  assert sorted(k[5] for k in caches) == ["wf/writer@1", "wf/writer@2"]
  assert all(plugin._sessions[k] is c for k, c in caches.items())  # the same compilers on turn two
  assert all(len(plugin._sessions[k].fps) > sizes[k] for k in caches)  # whose history grew
  assert events[-1].output == "published draft for draft for Shorter, please."
  assert plugin.faults == 0


class _Flaky(OfflineLlm):
  """Fails its first ``fails`` calls with a connection error."""

  fails: int = 1

  async def generate_content_async(self, llm_request, stream: bool = False):
    if self.fails:
      self.fails -= 1
      self._received.append(llm_request.model_copy(deep=True))
      raise ConnectionError("connection reset")
    async for r in super().generate_content_async(llm_request, stream):
      yield r


async def test_a_retried_node_is_packed_on_every_attempt():
  """``RetryConfig`` reruns the node after a model error: the retry is packed
  again on the node's compiler, not sent raw or faulted."""
  model = _Flaky(default="fine")
  agent = LlmAgent(name="a", model=model, instruction="Do it.")

  def prep(node_input: str) -> str:
    return "prepared " + node_input

  wf = Workflow(name="wf", edges=[(START, prep, node(agent, retry_config=RetryConfig(max_attempts=2, initial_delay=0, jitter=0)))])
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(wf, [plugin])
  session = await new_session(runner)
  logging.getLogger("google_adk").disabled = True  # ADK logs the retried error with its traceback
  try:
    events = await say(runner, session.id, "hello")
  finally:
    logging.getLogger("google_adk").disabled = False

  assert events[-1].content.parts[0].text == "fine"
  assert [_pack_text(r).rsplit(REQUEST, 1)[1] for r in model.received] == ["prepared hello"] * 2
  assert len(await manifests(runner, session.id)) == 2
  assert len(plugin._sessions) == 1 and plugin.faults == 0


class _Verdict(BaseModel):
  ok: bool


@pytest.mark.parametrize("mode", ["hard", "mask"])
async def test_step_scoping_keeps_the_tools_that_end_or_hand_off_a_workflow_node(mode):
  """A task node ends on ``finish_task``, an ``output_schema`` node with tools on
  ``set_model_response``, a chat node hands off with ``transfer_to_agent``:
  scoped away, the node could never finish or delegate."""
  task_model = OfflineLlm(script=[tool_call("finish_task", {"result": "done"})])
  judge_model = OfflineLlm(script=[tool_call("set_model_response", {"ok": True})], default='{"ok": true}')
  coord_model = OfflineLlm(script=[tool_call("transfer_to_agent", {"agent_name": "helper"})], default="coordinated")
  helper_model = OfflineLlm(default="helped")
  tools = [get_weather, other_tool]
  task = LlmAgent(name="tasker", model=task_model, instruction="Do the task.", mode="task", tools=tools)
  judge = LlmAgent(name="judge", model=judge_model, instruction="Judge.", tools=tools, output_schema=_Verdict)
  helper = LlmAgent(name="helper", model=helper_model, instruction="Help.")
  coord = LlmAgent(name="coord", model=coord_model, instruction="Coordinate.", tools=tools, sub_agents=[helper])
  plugin = ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping=mode))
  runner = make_runner(Workflow(name="wf", edges=[(START, task, judge, coord)]), [plugin])
  session = await new_session(runner, state={"tools": ["get_weather"]})
  events = await say(runner, session.id, "Go.")

  for model, framework in ((task_model, "finish_task"), (judge_model, "set_model_response"),
                           (coord_model, "transfer_to_agent")):
    sent = model.received[0]
    assert framework in _decl_names(sent) and framework in sent.tools_dict
    if mode == "hard":
      assert "other_tool" not in _decl_names(sent)
    else:
      allowed = sent.config.tool_config.function_calling_config.allowed_function_names
      assert allowed == sorted([framework, "get_weather"])
  outputs = [e.output for e in events if e.output is not None]
  assert {"result": "done"} in outputs and {"ok": True} in outputs
  assert helper_model.received, "the coordinator handed off to its sub-agent"
  assert plugin.faults == 0


async def test_a_fault_in_parallel_branches_fails_open_and_is_recorded_on_each(caplog):
  """The plugin fails open: every branch's request goes out as ADK built it, the
  graph completes, and each call's event records the fault in state."""
  def boom():
    raise RuntimeError("injected compile fault")

  models = {n: OfflineLlm(default=f"answer from {n}") for n in ("left", "right", "merge")}
  agents = {n: LlmAgent(name=n, model=m, instruction=f"You are the {n}.") for n, m in models.items()}
  wf = Workflow(name="wf", edges=[(START, (agents["left"], agents["right"]), JoinNode(name="join"), agents["merge"])])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom)
  runner = make_runner(wf, [recorder, plugin])
  session = await new_session(runner)
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.plugin"):
    events = await say(runner, session.id, "Go.")

  assert events[-1].content.parts[0].text == "answer from merge"
  sent = [r for m in models.values() for r in m.received]
  assert sorted(_dump(r.contents)[0] for r in sent) == sorted(_dump(r.contents)[0] for r in recorder.requests)
  assert not any(PACK_HEADER in (p.text or "") for r in sent for c in r.contents for p in c.parts or ())
  recorded = [e.actions.state_delta[LAST_FAULT_KEY] for e in events if LAST_FAULT_KEY in (e.actions.state_delta or {})]
  assert sorted(e.author for e in events if LAST_FAULT_KEY in (e.actions.state_delta or {})) == ["left", "merge", "right"]
  assert {r["error"] for r in recorded} == {"RuntimeError"} and sorted(r["count"] for r in recorded) == [1, 2, 3]
  assert plugin.faults == 3 and await manifests(runner, session.id) == []
  assert len([r for r in caplog.records if "aether-frame fault" in r.getMessage()]) == 1  # once per kind


# -------------------------------------------------------------- resumability
def _resumable_runner(root, plugins, session_service=None, artifact_service=None) -> Runner:
  with warnings.catch_warnings():  # ResumabilityConfig is experimental in 2.13
    warnings.simplefilter("ignore")
    app = App(name="testapp", root_agent=root, plugins=list(plugins),
              resumability_config=ResumabilityConfig(is_resumable=True))
  return Runner(app=app, session_service=session_service or InMemorySessionService(),
                artifact_service=artifact_service or InMemoryArtifactService())


async def _run(runner, session_id: str, message: types.Content, invocation_id=None) -> list[Event]:
  return [e async for e in runner.run_async(user_id=USER, session_id=session_id, new_message=message,
                                            invocation_id=invocation_id)]


def _text(text: str) -> types.Content:
  return types.Content(role="user", parts=[types.Part(text=text)])


def _answer(name: str, call_id: str, response: dict) -> types.Content:
  return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
      name=name, id=call_id, response=response))])


def _call(events, name: str) -> types.FunctionCall:
  return next(p.function_call for e in events if e.content for p in e.content.parts or ()
              if p.function_call and p.function_call.name == name)


def _steps(req) -> list[tuple]:
  """The calls and responses after the payload, by name."""
  return [("call", p.function_call.name) if p.function_call else ("response", p.function_response.name)
          for c in req.contents[_payload_index(req) + 1:] for p in c.parts or ()
          if p.function_call or p.function_response]


@pytest.mark.parametrize("restarted", [False, True], ids=["warm", "restarted"])
async def test_a_resumed_long_running_call_keeps_its_pack_and_its_pending_call(restarted):
  """Paused on a long-running tool, the invocation resumes by id with the tool's
  response: the resumed call keeps the call and response after the payload,
  the payload is the paused call's, byte for byte, and its manifest names the
  original invocation (also when another worker resumes it)."""
  def long_job(x: str) -> dict:
    """Starts a long job."""
    return None

  model = OfflineLlm(script=["Hello.", tool_call("long_job", {"x": "a"}), "Job a finished."])
  agent = LlmAgent(name="assistant", model=model, instruction="Help.", tools=[LongRunningFunctionTool(long_job)])
  recorder = Recorder()
  runner = _resumable_runner(agent, [recorder, ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  await _run(runner, session.id, _text("hi"))
  paused = await _run(runner, session.id, _text("start job a"))
  call = _call(paused, "long_job")
  assert paused[-1].long_running_tool_ids == {call.id}
  if restarted:  # a new worker, with a cold plugin, picks the invocation up
    recorder = Recorder()
    runner = _resumable_runner(agent, [recorder, ContextPackPlugin(window=8192)],
                               runner.session_service, runner.artifact_service)
  resumed = await _run(runner, session.id, _answer("long_job", call.id, {"status": "done"}), paused[0].invocation_id)

  assert any(e.content and e.content.parts[0].text == "Job a finished." for e in resumed)
  assert {e.invocation_id for e in resumed} == {paused[0].invocation_id}
  first, last = model.received[-2], model.received[-1]
  assert _pack_text(last).endswith(REQUEST + "start job a")
  assert last.contents[_payload_index(last)] == first.contents[_payload_index(first)]
  assert _steps(last) == [("call", "long_job"), ("response", "long_job")]
  assert _same_but_payload(last, recorder.requests[-1])
  docs = await manifests(runner, session.id)
  assert [d["invocation_id"] for d in docs[-2:]] == [paused[0].invocation_id] * 2
  assert docs[-1]["runtime"]["guard"] == {"ok": True, "problems": [], "fallback": False}
  assert LAST_FAULT_KEY not in await _state(runner, session.id)


def delete_file(path: str) -> dict:
  """Deletes a file."""
  return {"deleted": path}


async def test_a_confirmed_tool_resumes_with_the_original_pack():
  """``require_confirmation`` pauses on ``adk_request_confirmation``; the user's
  approval resumes the invocation, the tool runs, and the model's next call
  carries the paused call's payload and the call with its real response."""
  model = OfflineLlm(script=[tool_call("delete_file", {"path": "/tmp/x"}), "Deleted it."])
  agent = LlmAgent(name="assistant", model=model, instruction="Help.",
                   tools=[FunctionTool(delete_file, require_confirmation=True)])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=8192)
  runner = _resumable_runner(agent, [recorder, plugin])
  session = await new_session(runner)
  paused = await _run(runner, session.id, _text("delete /tmp/x"))
  ask = _call(paused, "adk_request_confirmation")
  resumed = await _run(runner, session.id, _answer("adk_request_confirmation", ask.id, {"confirmed": True}),
                       paused[0].invocation_id)

  assert any(e.content and e.content.parts[0].text == "Deleted it." for e in resumed)
  assert len(model.received) == 2
  first, last = model.received
  assert last.contents[_payload_index(last)] == first.contents[_payload_index(first)]
  assert _pack_text(last).endswith(REQUEST + "delete /tmp/x")
  assert _steps(last) == [("call", "delete_file"), ("response", "delete_file")]
  response = next(p.function_response for c in last.contents for p in c.parts or () if p.function_response)
  assert response.response == {"deleted": "/tmp/x"}
  assert _same_but_payload(last, recorder.requests[-1])
  docs = await manifests(runner, session.id)
  assert [d["invocation_id"] for d in docs] == [paused[0].invocation_id] * 2
  assert all(d["runtime"]["guard"]["ok"] for d in docs) and plugin.faults == 0


async def test_a_workflow_node_resumed_after_a_confirmation_is_packed():
  """Resumed, a single-turn node is rerun without its node input (ADK does not
  inject it again) and ADK builds the request around the invocation's own user
  message: the payload replaces that turn, the confirmed call and its response
  follow it, and the node keeps its compiler (same run id, same node path)."""
  model = OfflineLlm(script=[tool_call("delete_file", {"path": "/tmp/x"}), "Deleted it."])
  agent = LlmAgent(name="assistant", model=model, instruction="Help.",
                   tools=[FunctionTool(delete_file, require_confirmation=True)])

  def prep(node_input: str) -> str:
    return "prepared: " + node_input

  recorder = Recorder()
  plugin = ContextPackPlugin(window=8192)
  runner = _resumable_runner(Workflow(name="wf", edges=[(START, prep, agent)]), [recorder, plugin])
  session = await new_session(runner)
  paused = await _run(runner, session.id, _text("delete /tmp/x"))
  ask = _call(paused, "adk_request_confirmation")
  resumed = await _run(runner, session.id, _answer("adk_request_confirmation", ask.id, {"confirmed": True}),
                       paused[0].invocation_id)

  assert any(e.content and e.content.parts[0].text == "Deleted it." for e in resumed)
  first, last = model.received
  assert _pack_text(first).endswith(REQUEST + "prepared: delete /tmp/x")
  assert _pack_text(last).endswith(REQUEST + _asked(recorder.requests[-1]))
  assert _steps(last) == [("call", "delete_file"), ("response", "delete_file")]
  assert _same_but_payload(last, recorder.requests[-1])
  assert len(plugin._sessions) == 1
  docs = await manifests(runner, session.id)
  assert [d["invocation_id"] for d in docs] == [paused[0].invocation_id] * 2
  assert all(d["valid"] and d["runtime"]["guard"]["ok"] for d in docs) and plugin.faults == 0


def _lane_sized_reply(req):
  """Lane i answers with 20 + 25 i words, so the lanes' tails are cut at different turns."""
  ask = _asked(req)
  return f"answer to {ask}: " + "detail " * (20 + 25 * int(ask.rsplit(" ", 1)[1]))


async def _last_turn_tails(fresh_worker: bool, turns: int = 14) -> tuple[dict[str, list[str]], list[str]]:
  """Three ``run_node`` lanes of one agent under a small window; the last turn is served by
  this worker, or by a fresh one (another process: no warm cache). Per lane: the history
  texts sent before the payload; and the tail keys in state."""
  model = OfflineLlm(default=_lane_sized_reply)
  writer = LlmAgent(name="writer", model=model, instruction="Write.", include_contents="default")

  @node(rerun_on_resume=True)
  async def fan(ctx: Context, node_input: str) -> list:
    return [await ctx.run_node(writer, node_input=f"{node_input} part {i}") for i in range(3)]

  wf = Workflow(name="wf", edges=[(START, fan)])
  sessions, artifacts = InMemorySessionService(), InMemoryArtifactService()

  def worker():
    return make_runner(wf, [ContextPackPlugin(window=1100)], session_service=sessions, artifact_service=artifacts)

  runner = worker()
  session = await new_session(runner)
  for t in range(turns - 1):
    await say(runner, session.id, f"turn{t}")
  if fresh_worker:
    runner = worker()
  start = len(model.received)
  await say(runner, session.id, f"turn{turns - 1}")
  stored = await sessions.get_session(app_name=runner.app_name, user_id=USER, session_id=session.id)
  out = {}
  for sent in model.received[start:]:
    out[_asked(sent)] = [_user_text(c) for c in sent.contents[:_payload_index(sent)]]
  return out, sorted(k for k in stored.state if k.startswith("aether_frame:tail:"))


async def test_a_fresh_worker_keeps_each_lanes_own_tail_cut():
  """The tail cut is kept in state per lane. Kept per agent, a worker without a warm cache
  read the lane that wrote last: the user turns are shared, so its cut (turn 10) was in
  every lane's history, and the lane of short answers sent 3 turns instead of 13."""
  warm, _ = await _last_turn_tails(False)
  cold, keys = await _last_turn_tails(True)
  assert sorted(warm) == ["turn13 part 0", "turn13 part 1", "turn13 part 2"]
  lengths = [len(warm[k]) for k in sorted(warm)]
  assert lengths[0] > lengths[2] > 0, lengths  # the lanes really are cut at different turns
  assert cold == warm
  # One key per lane that trims (a lane with no cut keeps none).
  assert keys == [f"aether_frame:tail:writer||wf/fan@1/writer@{n}" for n in (2, 3)], keys
