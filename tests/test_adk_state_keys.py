"""Session-state inputs that do not fit the schema, and the keys they are read from.

``LlmAgent(output_key="plan")`` is a common ADK idiom: a planner's text lands
in ``state["plan"]``. The plugin used to fail open on it, so every later call of
the session went out without a pack (one ERROR line). Now such a value is left
out of the pack, with the reason in the manifest, the pointer and one warning,
and ``state_keys`` points the plugin at keys of its own.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.artifacts import FileArtifactService
from pydantic import ValidationError

from aether_frame.adk.plugin import ContextPackPlugin, context_pack_callbacks
from aether_frame.adk.state_schema import LAST_FAULT_KEY, LAST_PACK_KEY, StateKeys, read_state, unread_keys
from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import USER, agent, make_runner, manifests, new_session, say

PLAN = {"goal": "Summarise Q3 sales", "step": "Compare Q3 with Q2", "acceptance": ["names the growth rate"]}


def _pack_text(request) -> str:
  found = [p.text for c in request.contents for p in c.parts or () if (p.text or "").startswith("CONTEXT PACK v1")]
  assert len(found) <= 1
  return found[0] if found else ""


def _packed(request) -> bool:
  return bool(_pack_text(request))


async def _state(runner, sid):
  return (await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=sid)).state


def _pipeline(plugin_kwargs, store):
  planner_model = OfflineLlm(default="1. Gather sales data. 2. Compare with Q2. 3. Write the summary.")
  worker_model = OfflineLlm(default="Here is the summary.")
  planner = LlmAgent(name="planner", model=planner_model, instruction="Write a plan.", output_key="plan")
  worker = LlmAgent(name="worker", model=worker_model, instruction="Follow the plan.")
  plugin = ContextPackPlugin(window=16_000, **plugin_kwargs)
  root = SequentialAgent(name="pipeline", sub_agents=[planner, worker])
  runner = make_runner(root, [plugin], artifact_service=FileArtifactService(str(store)))
  return runner, plugin, planner_model, worker_model


def test_an_output_key_plan_is_left_out_with_its_reason_and_every_call_is_packed(tmp_path, caplog):
  async def go():
    runner, plugin, planner_model, worker_model = _pipeline({}, tmp_path / "store")
    s = await new_session(runner)
    with caplog.at_level(logging.WARNING, logger="aether_frame"):
      for t in range(3):
        await say(runner, s.id, f"Turn {t}: summarise Q3 sales.")
    state = await _state(runner, s.id)
    assert isinstance(state["plan"], str)  # ADK wrote the planner's text there
    assert plugin.faults == 0 and LAST_FAULT_KEY not in state
    calls = planner_model.received + worker_model.received
    assert len(calls) == 6 and all(_packed(r) for r in calls)
    docs = await manifests(runner, s.id)
    assert len(docs) == 6
    assert docs[0]["valid"] is True and "state_rejected" not in docs[0]["runtime"]  # no plan yet
    for doc in docs[1:]:
      assert doc["valid"] is False
      assert doc["problems"][0].startswith("state['plan'] left out: ")
      assert "(got str)" in doc["runtime"]["state_rejected"]["state['plan']"]
    assert state[LAST_PACK_KEY]["valid"] is False
    warned = [r for r in caplog.records if "state['plan']" in r.getMessage() and "state_keys" in r.getMessage()]
    assert len(warned) == 1  # once per plugin and problem
    reports = await replay(open_location(str(tmp_path / "store")))
    assert [r.status for r in reports] == ["identical"] * 6  # the problems are part of the replayable input
  asyncio.run(go())


def test_state_keys_give_the_pack_a_plan_of_its_own(tmp_path):
  async def go():
    runner, plugin, planner_model, worker_model = _pipeline({"state_keys": {"plan": "pack:plan"}}, tmp_path / "store")
    s = await new_session(runner, state={"pack:plan": PLAN})
    for t in range(2):
      await say(runner, s.id, f"Turn {t}: summarise Q3 sales.")
    assert plugin.faults == 0
    for request in planner_model.received + worker_model.received:
      payload = _pack_text(request)
      assert "Summarise Q3 sales" in payload and "names the growth rate" in payload
    docs = await manifests(runner, s.id)
    assert all(d["valid"] and "state_rejected" not in d["runtime"] for d in docs)
    assert (await _state(runner, s.id))["plan"].startswith("1. Gather")  # the planner's own key, untouched
  asyncio.run(go())


def test_one_bad_knowledge_entry_costs_only_itself_and_bad_tools_turn_scoping_off():
  def search(query: str) -> dict:
    """Searches."""
    return {"hits": []}

  def fetch(url: str) -> dict:
    """Fetches."""
    return {"body": ""}

  async def go():
    knowledge = [
        {"uri": "artifact://a.md", "summary": "Alpha revenue rose 12 percent."},
        {"uri": "artifact://b.md"},  # no summary
        {"uri": "artifact://c.md", "summary": "Gamma churn fell to 3 percent."},
    ]
    ag, model = agent(tools=[search, fetch])
    plugin = ContextPackPlugin(window=16_000, policy=None)
    runner = make_runner(ag, [plugin])
    s = await new_session(runner, state={"plan": PLAN, "knowledge": knowledge, "tools": "search"})
    await say(runner, s.id, "What changed?")
    assert plugin.faults == 0
    request = model.received[0]
    payload = _pack_text(request)
    assert "Alpha revenue rose 12 percent." in payload and "Gamma churn fell to 3 percent." in payload
    names = sorted(d.name for t in request.config.tools for d in t.function_declarations or ())
    assert names == ["fetch", "search"]  # a tools value that is not a list scopes nothing
    doc = (await manifests(runner, s.id))[0]
    rejected = doc["runtime"]["state_rejected"]
    assert sorted(rejected) == ["state['knowledge'][1]", "state['tools']"]
    assert rejected["state['knowledge'][1]"].startswith("summary: Field required")
    assert "(got str)" in rejected["state['tools']"]
    assert doc["valid"] is False and len(doc["problems"]) == 2
  asyncio.run(go())


def test_read_state_reports_and_keeps_what_fits():
  got = read_state({"plan": {"step": "x"}, "knowledge": {"uri": "u"}, "tools": ["a", 3]})
  assert got.plan is None and got.knowledge == [] and got.tools is None
  assert got.rejected["state['plan']"].startswith("goal: Field required")
  assert got.rejected["state['knowledge']"] == "expected a list of knowledge items, got dict"
  assert got.rejected["state['tools']"].startswith("1: Input should be a valid string")
  fine = read_state({"p": PLAN, "plan": "ignored"}, StateKeys(plan="p"))
  assert fine.plan is not None and fine.plan.goal == "Summarise Q3 sales" and fine.rejected == {}
  for cleared in ([], (), {}, "", None, 0, False):  # a key cleared the only way ADK allows: no knowledge, no problem
    assert read_state({"knowledge": cleared}).rejected == {}
  assert read_state({"tools": None}).rejected == {}
  assert unread_keys({"knowledge": ({"uri": "u", "summary": "s", "titel": "x"},)}) == {"knowledge": ["titel"]}


@pytest.mark.parametrize("keys, needle", [
    ({"plan": "tools"}, "three different keys"),
    ({"plan": ""}, "plan"),
    ({"plam": "x"}, "plam"),
    ({"plan": LAST_PACK_KEY}, "writes itself"),
    ({"knowledge": "aether_frame:tail:worker"}, "writes itself"),
])
def test_bad_state_keys_fail_at_construction_naming_the_problem(keys, needle):
  with pytest.raises(ValidationError, match=needle):
    ContextPackPlugin(window=8_000, state_keys=keys)
  with pytest.raises(ValidationError, match=needle):
    context_pack_callbacks(window=8_000, state_keys=keys)


def test_a_plan_checklist_given_as_a_set_renders_alike_in_every_process():
  """InMemorySessionService stores any value: a set's order follows the process's hash
  seed, so ACCEPTANCE and CONSTRAINTS came out in another order on every worker."""
  import os
  import subprocess
  import sys

  script = (
      "from aether_frame.adk.state_schema import read_state\n"
      "from aether_frame.adk import sources\n"
      "plan = {'goal': 'Ship it', 'step': 'Review', 'acceptance': {'Cite sources', 'Name every vendor', 'Keep it short',"
      " 'Give prices in USD', 'Flag gaps'}, 'constraints': frozenset({'No tables', 'Under 300 words', 'Plain English'})}\n"
      "read = read_state({'plan': plan})\n"
      "print([i.text for i in sources.plan_items(read.plan)])\n"
  )
  outs = set()
  for seed in ("1", "2", "3", "4"):
    env = {**os.environ, "PYTHONHASHSEED": seed}
    outs.add(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout)
  assert len(outs) == 1, outs
  texts = eval(outs.pop())  # noqa: S307 - our own list of strings
  assert texts.index("Cite sources") < texts.index("Flag gaps") < texts.index("Give prices in USD")
