"""Workflow agents, agent-level callbacks and loop control through a real ADK Runner.

Each test is a repro of a bug found by driving the plugin under ADK's
workflow agents (``LoopAgent``, ``SequentialAgent``, ``ParallelAgent``) and
next to the agent-level callbacks of ``context_pack_callbacks``.
"""

from __future__ import annotations

import warnings

import pytest
from google.adk.agents import LlmAgent, LoopAgent
from google.adk.tools import exit_loop
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin, context_pack_callbacks
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, tool_call

from tests.adk_support import Recorder, make_runner, manifests, new_session, say
from tests.test_plugin_e2e import _decl_names, _dump, _pack_text, _payload_index, _state, get_weather

pytestmark = pytest.mark.asyncio

PACK_HEADER = "CONTEXT PACK v1"


def _loop(*sub_agents, max_iterations: int) -> LoopAgent:
  with warnings.catch_warnings():  # deprecated in favour of Workflow, still shipped and used
    warnings.simplefilter("ignore", DeprecationWarning)
    return LoopAgent(name="loop", sub_agents=list(sub_agents), max_iterations=max_iterations)


# ------------------------------------------------------------------ LoopAgent
async def test_a_loop_iteration_ending_on_the_agents_own_turn_keeps_the_full_pack():
  """A LoopAgent's next iteration reaches the model ending on the agent's own
  reply: ADK's own shape. The guard used to reject it ("ends with role 'model'")
  and send the minimal pack, dropping every earlier turn from every iteration
  after the first."""
  model = OfflineLlm(default="Draft improved. " + "More detail on the vendor comparison. " * 4)
  worker = LlmAgent(name="worker", model=model, instruction="Improve the draft.")
  recorder = Recorder()
  runner = make_runner(_loop(worker, max_iterations=2), [recorder, ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  await say(runner, session.id, "Write a first draft.")
  await say(runner, session.id, "Now make it shorter.")

  assert len(model.received) == 4
  orig, sent = recorder.requests[-1], model.received[-1]
  assert orig.contents[-1].role == "model"  # ADK itself ends the iteration's request on the model turn
  docs = await manifests(runner, session.id)
  assert [d["runtime"]["guard"]["fallback"] for d in docs] == [False] * 4
  # The whole history (both turn-one iterations) goes out, the iteration's own reply after the payload.
  p = _payload_index(sent)
  assert _dump(sent.contents[:p]) == _dump(orig.contents[:p])
  assert _dump(sent.contents[p + 1:]) == _dump(orig.contents[p + 1:])
  assert _pack_text(sent).endswith("USER REQUEST (VERBATIM):\nNow make it shorter.")
  # Same invocation, same payload on both iterations.
  assert sent.contents[p].model_dump_json() == model.received[-2].contents[p].model_dump_json()


@pytest.mark.parametrize("mode", ["hard", "mask"])
async def test_step_scoping_keeps_exit_loop_so_a_loop_can_end(mode):
  """``exit_loop`` is how a LoopAgent's sub-agent ends the loop. Step scoping
  removed (hard) or disallowed (mask) it like any out-of-step tool, so the loop
  could only run to ``max_iterations`` (forever without one)."""
  model = OfflineLlm(script=[tool_call("exit_loop", {}, "x1")], default="Still looping.")
  worker = LlmAgent(name="worker", model=model, instruction="Stop when done.", tools=[get_weather, exit_loop])
  runner = make_runner(_loop(worker, max_iterations=3), [ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping=mode))])
  session = await new_session(runner, state={"tools": ["get_weather"]})
  events = await say(runner, session.id, "Check the weather once, then stop.")

  first = model.received[0]
  assert "exit_loop" in _decl_names(first) and "exit_loop" in first.tools_dict
  if mode == "mask":
    assert first.config.tool_config.function_calling_config.allowed_function_names == ["exit_loop", "get_weather"]
  assert any(e.actions.escalate for e in events)
  assert len(model.received) == 1, "the loop must end on the exit_loop call"


# ------------------------------------------------ agent callbacks + app plugin
async def test_agent_level_callbacks_next_to_the_app_plugin_pack_once(tmp_path):
  """ADK runs the app's plugin, then the agent's own callbacks. With both,
  the request was packed twice: a pack inside a pack, two manifests per call
  and every calibration sample counted twice."""
  before, after = context_pack_callbacks(window=6000)
  model = OfflineLlm(default="ok")
  solo = LlmAgent(name="solo", model=model, instruction="Be brief.", before_model_callback=before, after_model_callback=after)
  app_plugin = ContextPackPlugin(window=8192)
  runner = make_runner(solo, [app_plugin])
  session = await new_session(runner)
  await say(runner, session.id, "one")
  await say(runner, session.id, "two")

  for req in model.received:
    assert _pack_text(req).count(PACK_HEADER) == 1
    assert _pack_text(req).endswith("USER REQUEST (VERBATIM):\n" + ("one" if req is model.received[0] else "two"))
  assert _dump(model.received[1].contents[:2]) == _dump([
      types.Content(role="user", parts=[types.Part(text="one")]), types.Content(role="model", parts=[types.Part(text="ok")]),
  ])
  # The agent's own, more specific, callbacks pack: one manifest per call, under their window.
  docs = await manifests(runner, session.id)
  assert [d["window"] for d in docs] == [6000, 6000]
  state = await _state(runner, session.id)
  assert state["aether_frame:calibration"]["models"]["offline-model"]["samples"] == 2
  assert app_plugin.faults == before.plugin.faults == 0


async def test_a_wrapped_agent_callback_next_to_the_app_plugin_packs_once(caplog):
  """A user's own callback that calls ``context_pack_callbacks``' one inside it hides it from
  the plugin, which packed the request first; the callback then packed the pack again (two
  packs nested, two manifests per call). The second packer now leaves a packed request alone,
  and says so once."""
  import logging

  before, after = context_pack_callbacks(window=6000)

  async def audited(callback_context, llm_request):  # e.g. a user's own logging around it
    return await before(callback_context, llm_request)

  model = OfflineLlm(default="ok")
  solo = LlmAgent(name="solo", model=model, instruction="Be brief.", before_model_callback=audited,
                  after_model_callback=after)
  runner = make_runner(solo, [ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    for text in ("one", "two", "three"):
      await say(runner, session.id, text)
  assert len(model.received) == 3
  for req, text in zip(model.received, ("one", "two", "three")):
    assert _pack_text(req).count(PACK_HEADER) == 1
    assert _pack_text(req).endswith("USER REQUEST (VERBATIM):\n" + text)
  assert len(await manifests(runner, session.id)) == 3
  said = [r.getMessage() for r in caplog.records if "already packed" in r.getMessage()]
  assert len(said) == 1 and "agent solo" in said[0]


# ------------------------------------------------------ sub-agent delegation
@pytest.mark.parametrize("mode", ["hard", "mask"])
async def test_step_scoping_keeps_the_tool_adk_adds_to_reach_a_single_turn_sub_agent(mode):
  """A ``single_turn`` (or ``task``) sub-agent is reached through a tool ADK
  adds under its name, as a chat sub-agent is reached through
  ``transfer_to_agent``. Step scoping kept the one and removed the other, so
  the coordinator could not delegate."""
  worker_model = OfflineLlm(default="Vendor B is cheapest.")
  worker = LlmAgent(name="researcher", model=worker_model, instruction="Research.", description="Researches vendors.",
                    mode="single_turn")
  model = OfflineLlm(script=[tool_call("researcher", {"request": "find the cheapest vendor"}, "d1"), "Done: vendor B."])
  coordinator = LlmAgent(name="coordinator", model=model, instruction="Delegate research.", sub_agents=[worker],
                         tools=[get_weather])
  runner = make_runner(coordinator, [ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping=mode))])
  session = await new_session(runner, state={"tools": ["get_weather"]})
  events = await say(runner, session.id, "Which vendor is cheapest?")

  first = model.received[0]
  assert _decl_names(first) == ["get_weather", "researcher"] and "researcher" in first.tools_dict
  if mode == "mask":
    assert first.config.tool_config.function_calling_config.allowed_function_names == ["get_weather", "researcher"]
  assert len(worker_model.received) == 1
  assert events[-1].content.parts[0].text == "Done: vendor B."


async def test_single_turn_delegations_leave_no_cut_keys_behind_in_session_state():
  """Each delegation to a ``single_turn`` sub-agent runs on a branch of its own, named after its
  function call id. Its tail cut was kept in state under that lane, so every delegation left a
  key nobody reads again, for the session's life; workflow lanes keep theirs (stable names)."""
  worker_model = OfflineLlm(default="Vendor B is cheapest.")
  worker = LlmAgent(name="researcher", model=worker_model, instruction="Research.", description="Researches vendors.",
                    mode="single_turn")
  script = []
  for i in range(3):
    script += [tool_call("researcher", {"request": f"find vendor {i}"}, f"call-{i}"), f"Done {i}."]
  model = OfflineLlm(script=script)
  coordinator = LlmAgent(name="coordinator", model=model, instruction="Delegate research.", sub_agents=[worker])
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(coordinator, [plugin])
  session = await new_session(runner)
  for i in range(3):
    events = await say(runner, session.id, f"Which vendor is cheapest, round {i}?")
    assert events[-1].content.parts[0].text == f"Done {i}."
  assert len(worker_model.received) == 3
  for req in worker_model.received:
    assert _pack_text(req).count(PACK_HEADER) == 1
  state = await _state(runner, session.id)
  assert [k for k in state if k.startswith(("aether_frame:tail:researcher", "aether_frame:steps:researcher"))] == []
  # No lane keeps a key with no cut in it (a lane that never trims leaves none behind).
  assert all(v is not None for k, v in state.items() if k.startswith("aether_frame:tail:"))
  lanes = [d.get("lane") for d in await manifests(runner, session.id) if d["agent"] == "researcher"]
  assert len(set(lanes)) == 3 and all("@call-" in lane for lane in lanes)
  # Nor a warm cache each: the lane's goes when the sub-agent's run ends.
  assert [k[3] for k in plugin._sessions] == ["coordinator"]
  assert plugin._cached_bytes == sum(plugin._cache_bytes.values()) and set(plugin._cache_bytes) == set(plugin._sessions)
  assert plugin.faults == 0


async def test_a_task_sub_agent_keeps_its_warm_cache_and_tail_cut_across_the_users_replies():
  """A ``task`` sub-agent's branch is named after the delegating call too, but it chats with the
  user over many invocations: it is not a one-call lane. Taken for one, its warm cache went after
  every reply and its tail cut was never kept, so every call recompiled the whole history and the
  cut lost its hysteresis."""
  coord_model = OfflineLlm(script=[tool_call("tasker", {"request": "compare vendors A and B"}, "deleg-1")],
                           default="coordinated")
  task_model = OfflineLlm(default="A question back to the user? " + "Clarifying detail. " * 60)
  tasker = LlmAgent(name="tasker", model=task_model, instruction="Do the task.", mode="task", description="Does tasks.")
  coord = LlmAgent(name="coord", model=coord_model, instruction="Coordinate.", sub_agents=[tasker])
  plugin = ContextPackPlugin(window=2500)
  runner = make_runner(coord, [plugin])
  session = await new_session(runner)
  cuts = []
  for t in range(10):
    await say(runner, session.id, f"Reply {t}: more detail " + "blah " * 20)
    assert [k[4] for k in plugin._sessions if k[3] == "tasker"] == ["tasker@deleg-1"], t
    state = await _state(runner, session.id)
    cuts.append([v for k, v in state.items() if k.startswith("aether_frame:tail:tasker|")])
  assert len(task_model.received) >= 6
  # Kept in state once it trims (every worker trims alike); no key before (no cut to keep).
  assert all(len(c) <= 1 for c in cuts) and len(cuts[-1]) == 1 and cuts[-1][0] is not None
  assert plugin.faults == 0


async def test_a_sub_agent_transferred_to_again_in_one_invocation_keeps_one_compiler():
  """root -> spec -> root -> spec in one invocation: ADK numbers root's runs, so spec ran under
  ``root@1/spec@1`` then ``root@2/spec@1``. Each was keyed as a lane of its own, with its own
  compiler and tail cut on the one conversation: the cached prefix broke at every bounce."""
  root_model = OfflineLlm(script=[
      tool_call("transfer_to_agent", {"agent_name": "spec"}, "t1"),
      tool_call("transfer_to_agent", {"agent_name": "spec"}, "t2"),
  ])
  spec_model = OfflineLlm(script=[tool_call("transfer_to_agent", {"agent_name": "root"}, "b1"), "Spec answer."])
  spec = LlmAgent(name="spec", model=spec_model, instruction="Specialist.")
  root = LlmAgent(name="root", model=root_model, instruction="Router.", sub_agents=[spec])
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(root, [plugin])
  session = await new_session(runner)
  events = await say(runner, session.id, "Route this to the specialist.")
  assert events[-1].content.parts[0].text == "Spec answer."
  assert len(spec_model.received) == 2
  docs = [d for d in await manifests(runner, session.id) if d["agent"] == "spec"]
  assert len(docs) == 2 and docs[0]["lane"] == docs[1]["lane"] == "|root/spec@1"
  assert len([k for k in plugin._sessions if k[3] == "spec"]) == 1
  assert plugin.faults == 0


async def test_an_include_contents_none_agent_in_a_sequence_gets_a_pack():
  """Such an agent sees only ADK's relay of the previous agent ("For context: ...");
  with no user turn to anchor on, its requests used to go out unmodified: no contract,
  no plan, no budget, no manifest."""
  from google.adk.agents import SequentialAgent

  first_model = OfflineLlm(default="Draft: vendor A is cheaper, vendor B is faster.")
  second_model = OfflineLlm(default="Reviewed.")
  first = LlmAgent(name="drafter", model=first_model, instruction="Draft an answer.")
  second = LlmAgent(name="reviewer", model=second_model, instruction="Review the draft.", include_contents="none")
  recorder = Recorder()
  with warnings.catch_warnings():  # deprecated in favour of Workflow, still shipped and used
    warnings.simplefilter("ignore", DeprecationWarning)
    pipeline = SequentialAgent(name="pipeline", sub_agents=[first, second])
  runner = make_runner(pipeline, [recorder, ContextPackPlugin(window=8192)])
  session = await new_session(runner, state={"plan": {
      "goal": "Pick a vendor.", "step": "Review the draft.", "acceptance": ["Name the cheaper vendor"]}})
  await say(runner, session.id, "Compare the vendors.")

  orig, sent = recorder.requests[-1], second_model.received[-1]
  assert not any("Compare the vendors." in (p.text or "") for c in orig.contents for p in c.parts or ())
  relay = "\n".join(p.text for p in orig.contents[-1].parts if p.text)
  assert relay.startswith("For context:") and "vendor A is cheaper" in relay
  msg = sent.contents[_payload_index(sent)]
  assert _pack_text(sent).startswith(PACK_HEADER)
  assert "Name the cheaper vendor" in _pack_text(sent)  # the plan reaches the reviewer
  assert "\n".join(p.text for p in msg.parts if p.text).endswith(relay.split("\n", 1)[1])  # the relay, unchanged
  docs = await manifests(runner, session.id)
  assert [d["agent"] for d in docs] == ["drafter", "reviewer"]
  assert docs[-1]["valid"]
