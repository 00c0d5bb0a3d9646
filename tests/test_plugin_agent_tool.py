"""``AgentTool`` children, state keys the plugin does not read, and Interactions-API agents,
through a real Runner.

ADK runs an ``AgentTool`` child in a runner of its own that inherits the app's
plugins, forwards its artifacts to the calling session and forwards its state
deltas to it. So the child is packed by the same plugin, and its manifests
land in the caller's session, told apart by their ``agent`` field.
"""

from __future__ import annotations

import logging

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.agent_tool import AgentTool
from google.genai import types
from pydantic import Field

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.offline_model import OfflineLlm, tool_call

from tests.adk_support import USER, make_runner, manifests, new_session, payload_of, say

pytestmark = pytest.mark.asyncio

PLAN = {"goal": "Answer geography questions", "step": "Find the capital", "acceptance": ["Name the city"]}


async def _state(runner, session_id: str) -> dict:
  s = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
  return dict(s.state)


async def test_agent_tool_child_is_packed_and_its_manifests_land_in_the_calling_session():
  child_model = OfflineLlm(script=["The capital of France is Paris."])
  child = LlmAgent(name="researcher", model=child_model, instruction="You look up facts.", description="Looks up facts")
  root_model = OfflineLlm(script=[tool_call("researcher", {"request": "capital of France?"}, "c1"), "Paris."])
  root = LlmAgent(name="root", model=root_model, instruction="You answer.", tools=[AgentTool(child)])
  runner = make_runner(root, [ContextPackPlugin(window=8192)])
  session = await new_session(runner, state={"plan": PLAN})

  events = await say(runner, session.id, "What is the capital of France?")

  assert events[-1].content.parts[0].text == "Paris."
  # The child's request was packed: the plan came along in the copied state,
  # and its verbatim request is what the parent asked it.
  child_payload = payload_of(child_model.received[0])
  assert child_payload.startswith("CONTEXT PACK v1")
  assert "Find the capital" in child_payload
  assert child_payload.rstrip().endswith("USER REQUEST (VERBATIM):\ncapital of France?")
  # Both root calls were packed too, the second with the tool round trip kept.
  assert all(payload_of(r).startswith("CONTEXT PACK v1") for r in root_model.received)
  second = root_model.received[1].contents
  assert any(p.function_response and p.function_response.name == "researcher" for c in second for p in c.parts or ())

  docs = await manifests(runner, session.id)
  assert [d["agent"] for d in docs] == ["root", "researcher", "root"]
  assert all(d["valid"] for d in docs)
  state = await _state(runner, session.id)
  assert LAST_FAULT_KEY not in state
  # The caller's pointer names the caller's last pack, not the child's.
  assert state[LAST_PACK_KEY]["pack_id"] == docs[-1]["pack_id"]


async def test_plan_keys_the_plugin_does_not_read_are_reported(caplog):
  model = OfflineLlm(script=["ok", "ok"])
  root = LlmAgent(name="root", model=model, instruction="You answer.")
  runner = make_runner(root, [ContextPackPlugin(window=8192)])
  plan = {"goal": "Ship the report", "steps": ["draft", "review"], "current_step": "draft"}
  knowledge = [{"uri": "artifact://a.md", "summary": "Draft outline", "title": "Outline"}]
  session = await new_session(runner, state={"plan": plan, "knowledge": knowledge})

  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    await say(runner, session.id, "Start drafting.")
    await say(runner, session.id, "Go on.")

  want = {"plan": ["current_step", "steps"], "knowledge": ["title"]}
  docs = await manifests(runner, session.id)
  assert [d["runtime"].get("state_unread") for d in docs] == [want, want]
  warnings = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
  assert len(warnings) == 1  # once per shape, not once per call
  assert "current_step" in warnings[0] and "step_id" in warnings[0]
  # The pack still went out; the missing step is what makes it invalid.
  assert docs[-1]["valid"] is False and "CONTEXT PACK v1" in payload_of(model.received[-1])


async def test_a_plan_the_schema_fully_reads_reports_nothing():
  model = OfflineLlm(script=["ok"])
  root = LlmAgent(name="root", model=model, instruction="You answer.")
  runner = make_runner(root, [ContextPackPlugin(window=8192)])
  session = await new_session(runner, state={"plan": PLAN})
  await say(runner, session.id, "Which city?")
  docs = await manifests(runner, session.id)
  assert "state_unread" not in docs[0]["runtime"] and docs[0]["valid"]


class _OfflineInteractionsGemini(Gemini):
  """Gemini on the stateful Interactions API, answering offline: it records each
  request and returns an interaction id, as the real API does."""

  seen: list = Field(default_factory=list)

  async def generate_content_async(self, llm_request, stream: bool = False):
    self.seen.append(llm_request.model_copy(deep=True))
    yield LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=f"answer {len(self.seen)}")]),
        interaction_id=f"interaction-{len(self.seen)}",
    )


async def test_interactions_api_agents_are_left_alone(caplog):
  # The server keeps the conversation: a pack would join it on every call.
  model = _OfflineInteractionsGemini(model="gemini-3.5-flash", use_interactions_api=True)
  root = LlmAgent(name="root", model=model, instruction="You answer.")
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(root, [plugin])
  session = await new_session(runner, state={"plan": PLAN})
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    await say(runner, session.id, "First question?")
    await say(runner, session.id, "Second question?")

  assert [r.previous_interaction_id for r in model.seen] == [None, "interaction-1"]
  texts = [p.text for r in model.seen for c in r.contents for p in c.parts or () if p.text]
  assert texts == ["First question?", "Second question?"]  # as ADK built them, no pack
  assert await manifests(runner, session.id) == []
  assert plugin.faults == 0
  warnings = [r.getMessage() for r in caplog.records if "Interactions API" in r.getMessage()]
  assert len(warnings) == 1 and "root" in warnings[0]


def _root_with_researcher() -> LlmAgent:
  """A root agent that asks its AgentTool child "researcher" once per user turn, then answers."""
  child = LlmAgent(name="researcher", model=OfflineLlm(default="The capital is Paris."), instruction="You look up facts.",
                   description="Looks up facts")
  calls = iter(range(100))

  def root_reply(req):
    if any(p.function_response for p in req.contents[-1].parts or ()):
      return "Answer: Paris."
    return tool_call("researcher", {"request": "capital?"}, f"c{next(calls)}")

  return LlmAgent(name="root", model=OfflineLlm(default=root_reply), instruction="You answer.", tools=[AgentTool(child)])


async def test_an_agent_tool_childs_inputs_go_to_the_blob_scope_and_its_manifests_replay(tmp_path):
  """The child's artifact service forwards every save into the caller's session: its input
  blobs landed there as session artifacts (in the user's listing, outside the blob scope),
  and replay refused the child's calls for missing blobs."""
  from google.adk.artifacts import FileArtifactService

  from aether_frame.audit.replay import replay
  from aether_frame.audit.source import open_location


  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(_root_with_researcher(), [plugin], artifact_service=FileArtifactService(str(tmp_path / "store")))
  s = await new_session(runner)
  for text in ("capital of France?", "and of Spain?"):
    await say(runner, s.id, text)
  assert plugin.faults == 0
  keys = await runner.artifact_service.list_artifact_keys(app_name=runner.app_name, user_id=USER, session_id=s.id)
  assert keys == ["context_pack/manifest.json"]
  docs = await manifests(runner, s.id)
  assert [d["agent"] for d in docs].count("researcher") == 2
  reports = await replay(open_location(str(tmp_path / "store")))
  assert [r.status for r in reports] == ["identical"] * len(docs) == ["identical"] * 6


async def test_with_a_dedicated_manifest_store_an_agent_tool_childs_manifests_join_the_callers_history(tmp_path):
  """``ManifestWriter(service=...)`` (a bucket of its own): each child call wrote a one-manifest
  session of the child's throwaway id instead of joining the caller's history (GCS review)."""
  from google.adk.artifacts import FileArtifactService

  from aether_frame.adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
  from aether_frame.audit.replay import replay
  from aether_frame.audit.source import open_location


  store = FileArtifactService(str(tmp_path / "manifests"))
  plugin = ContextPackPlugin(window=8192, manifest_writer=ManifestWriter(service=store, spool_dir=tmp_path / "spool"))
  runner = make_runner(_root_with_researcher(), [plugin])
  s = await new_session(runner)
  for text in ("capital of France?", "and of Spain?"):
    await say(runner, s.id, text)
  assert plugin.faults == 0
  versions = await store.list_versions(app_name=runner.app_name, user_id=USER, session_id=s.id, filename=MANIFEST_FILENAME)
  assert len(versions) == 6, versions  # root, researcher, root, twice: all in the caller's history
  refs = await open_location(str(tmp_path / "manifests")).sessions()
  assert [r.session for r in refs] == [s.id], refs
  reports = await replay(open_location(str(tmp_path / "manifests")))
  assert [r.status for r in reports] == ["identical"] * 6


async def test_an_agent_tool_child_and_an_untrimmed_agent_leave_no_cut_keys_in_the_callers_state():
  """The child runs in a throwaway session whose state deltas ADK forwards to the caller's:
  ``aether_frame:tail:researcher`` (None: no cut) landed in the caller's session for good,
  beside the caller's own None key."""
  child = LlmAgent(name="researcher", model=OfflineLlm(default="facts"), description="Looks up facts")
  root_model = OfflineLlm(script=[tool_call("researcher", {"request": "x"}), "done"], default="ok")
  root = LlmAgent(name="root", model=root_model, tools=[AgentTool(agent=child)])
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(root, [plugin])
  session = await new_session(runner)
  for text in ("go", "again"):
    await say(runner, session.id, text)
  state = await _state(runner, session.id)
  assert [k for k in state if k.startswith(("aether_frame:tail:", "aether_frame:steps:"))] == []
  docs = await manifests(runner, session.id)
  assert sorted({d["agent"] for d in docs}) == ["researcher", "root"] and plugin.faults == 0
  assert state[LAST_PACK_KEY]["pack_id"] == docs[-1]["pack_id"]
