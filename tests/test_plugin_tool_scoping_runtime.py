"""Tool scoping at run time, through a real Runner.

Mask scoping holds on models whose ADK adapter does not send
``allowed_function_names``: Gemini applies the mask; ADK's OpenAI, LiteLLM and
Anthropic adapters drop it, and mask mode keeps every tool in ``tools_dict``,
so a model that called an out-of-step tool had it run. The plugin now answers
such a call with an error instead. And the tools a loaded skill brings
(``adk_additional_tools``) survive both modes, as the skill tools do.
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import make_runner, new_session, say


def step_tools(ran: list[str]) -> list:
  """The step's tool (``lookup``) and one outside it (``delete_all``); each call is logged in ``ran``."""
  def lookup(x: str) -> dict:
    """Looks something up."""
    ran.append("lookup")
    return {"x": x}

  def delete_all(x: str) -> dict:
    """Deletes everything."""
    ran.append("delete_all")
    return {"deleted": True}

  return [lookup, delete_all]


def _agent(script, ran: list[str], model="gpt-4o"):
  llm = OfflineLlm(model=model, script=script)
  return LlmAgent(name="worker", model=llm, instruction="Work.", tools=step_tools(ran)), llm


def _run(script, policy, state, model="gpt-4o"):
  ran: list[str] = []
  agent, llm = _agent(script, ran, model)
  plugin = ContextPackPlugin(policy=policy)

  async def go():
    runner = make_runner(agent, [plugin])
    s = await new_session(runner, state=state)
    await say(runner, s.id, "tidy up")
  asyncio.run(go())
  return ran, llm, plugin


def _response_to(llm, call_id):
  return next(p.function_response.response for c in llm.received[-1].contents for p in c.parts or ()
              if p.function_response and p.function_response.id == call_id)


def test_an_out_of_step_call_is_answered_with_an_error_not_run():
  ran, llm, plugin = _run([tool_call("delete_all", {"x": "1"}, "c1"), "done"], PackPolicy(tool_scoping="mask"),
                          {"tools": ["lookup"]})
  assert ran == [] and plugin.faults == 0
  assert "not available in this step" in _response_to(llm, "c1")["error"]


def test_an_in_step_call_runs_and_no_mask_means_no_check():
  ran, _, _ = _run([tool_call("lookup", {"x": "1"}, "c1"), "done"], PackPolicy(tool_scoping="mask"), {"tools": ["lookup"]})
  assert ran == ["lookup"]
  ran, _, _ = _run([tool_call("delete_all", {"x": "1"}, "c1"), "done"], PackPolicy(tool_scoping="off"), {"tools": ["lookup"]})
  assert ran == ["delete_all"]  # scoping off: the plugin does not judge tool calls
  ran, _, _ = _run([tool_call("delete_all", {"x": "1"}, "c1"), "done"], PackPolicy(tool_scoping="mask"), {})
  assert ran == ["delete_all"]  # no step tools in state: nothing is masked


def test_a_step_that_allows_nothing_blocks_every_function():
  ran, llm, _ = _run([tool_call("lookup", {"x": "1"}, "c1"), "done"], PackPolicy(tool_scoping="mask"), {"tools": []})
  assert ran == [] and "none" in _response_to(llm, "c1")["error"]


def test_a_loaded_skills_own_tools_survive_scoping():
  from google.adk.skills import models as skills
  from google.adk.tools.skill_toolset import SkillToolset

  skill = skills.Skill(frontmatter=skills.Frontmatter(name="pdf-skill", description="PDF work",
                                                      metadata={"adk_additional_tools": ["pdf_extract"]}),
                       instructions="Use pdf_extract.")
  for mode in ("hard", "mask"):
    ran: list[str] = []

    def pdf_extract(path: str) -> dict:
      """Extracts the text of a PDF."""
      ran.append("pdf_extract")
      return {"text": "..."}

    def lookup(x: str) -> dict:
      """Looks something up."""
      return {"x": x}

    def delete_all(x: str) -> dict:
      """Deletes everything."""
      return {"deleted": True}

    llm = OfflineLlm(model="gpt-4o", script=[tool_call("load_skill", {"skill_name": "pdf-skill"}, "l1"),
                                             tool_call("pdf_extract", {"path": "a.pdf"}, "p1"), "done"])
    agent = LlmAgent(name="worker", model=llm, instruction="Work.",
                     tools=[lookup, delete_all, SkillToolset(skills=[skill], additional_tools=[pdf_extract])])
    plugin = ContextPackPlugin(policy=PackPolicy(tool_scoping=mode))

    async def go():
      runner = make_runner(agent, [plugin])
      s = await new_session(runner, state={"tools": ["lookup"]})
      await say(runner, s.id, "read a.pdf")
    asyncio.run(go())
    assert ran == ["pdf_extract"] and plugin.faults == 0, mode
    last = llm.received[-1].config
    sent = [d.name for t in last.tools or () for d in t.function_declarations or ()]
    allowed = last.tool_config.function_calling_config.allowed_function_names if last.tool_config else None
    if mode == "hard":
      assert "pdf_extract" in sent and "delete_all" not in sent
    else:
      assert "pdf_extract" in allowed and "delete_all" not in allowed


def test_a_call_that_is_not_packed_leaves_no_earlier_mask_in_force():
  """A tool moves the step on and returns more than the window holds: the next call is not packed
  (its budget is exhausted) and goes out unmasked; the mask of the call before must not judge the
  tool call it brings back."""
  from google.adk.tools import ToolContext

  ran: list[str] = []

  def lookup(x: str, tool_context: ToolContext) -> dict:
    """Looks something up, and moves on to the next step."""
    ran.append("lookup")
    tool_context.state["tools"] = ["delete_all"]
    return {"x": "word " * 3000}

  def delete_all(x: str) -> dict:
    """Deletes everything."""
    ran.append("delete_all")
    return {"deleted": True}

  llm = OfflineLlm(model="gpt-4o", script=[tool_call("lookup", {"x": "1"}, "c1"), tool_call("delete_all", {"x": "1"}, "c2"), "done"])
  agent = LlmAgent(name="worker", model=llm, instruction="Work.", tools=[lookup, delete_all])
  plugin = ContextPackPlugin(policy=PackPolicy(tool_scoping="mask"), window=3_000)

  async def go():
    runner = make_runner(agent, [plugin])
    s = await new_session(runner, state={"tools": ["lookup"]})
    await say(runner, s.id, "tidy up")
  asyncio.run(go())
  assert plugin.faults >= 1  # the exhausted budget, recorded
  assert ran == ["lookup", "delete_all"]  # the step in force when it was called allows it


def test_mask_lets_adks_model_error_recovery_run():
  """ADK's ReflectAndRetryModelPlugin answers a model error with a call to ``adk_handle_model_error``,
  a tool it puts in ``tools_dict`` but never declares: no mask lists it, and mask mode refused it, so
  model-error recovery stopped working. A masked, declared tool is still refused on the same run."""
  from google.adk.models.llm_response import LlmResponse
  from google.adk.plugins import ReflectAndRetryModelPlugin
  from google.genai import types

  class ErrorsFirst(OfflineLlm):
    async def generate_content_async(self, llm_request, stream=False):
      if not self.received:
        self.received.append(llm_request.model_copy(deep=True))
        yield LlmResponse(error_code="MALFORMED_FUNCTION_CALL", error_message="bad call",
                          finish_reason=types.FinishReason.MALFORMED_FUNCTION_CALL)
        return
      async for r in super().generate_content_async(llm_request, stream):
        yield r

  for mode in ("off", "mask"):
    ran: list[str] = []
    llm = ErrorsFirst(model="gpt-4o", script=[tool_call("delete_all", {"x": "1"}, "c1"), "done"])
    agent = LlmAgent(name="worker", model=llm, instruction="Work.", tools=step_tools(ran))
    plugin = ContextPackPlugin(policy=PackPolicy(tool_scoping=mode))

    async def go():
      runner = make_runner(agent, [ReflectAndRetryModelPlugin(), plugin])
      s = await new_session(runner, state={"tools": ["lookup"]})
      return await say(runner, s.id, "tidy up")
    events = asyncio.run(go())
    answers = {p.function_response.name: p.function_response.response
               for e in events for p in (e.content.parts if e.content else ()) if p.function_response}
    assert "reflection_guidance" in answers["adk_handle_model_error"], (mode, answers)
    assert plugin.faults == 0
    if mode == "mask":
      assert ran == [] and "not available in this step" in answers["delete_all"]["error"]
    else:
      assert ran == ["delete_all"]


def test_force_escalation_listed_after_the_pack_is_warned_about(caplog):
  """ADK's ForceEscalationPlugin forces its consult tool through ``tool_config``. Listed after the
  plugin, it edits the request after the pack (and past a mask that leaves the tool out): the plugin
  warns, naming it, as for ADK's other request-editing plugins; listed before, no warning."""
  import logging

  from google.adk.plugins import ForceEscalationPlugin

  def warned(order):
    ran: list[str] = []
    llm = OfflineLlm(model="gpt-4o", script=["done"])
    agent = LlmAgent(name="worker", model=llm, instruction="Work.", tools=step_tools(ran))
    pack, force = ContextPackPlugin(policy=PackPolicy(tool_scoping="mask")), ForceEscalationPlugin(force_first_consult=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aether_frame"):
      async def go():
        runner = make_runner(agent, [pack, force] if order == "after" else [force, pack])
        s = await new_session(runner, state={"tools": ["lookup"]})
        await say(runner, s.id, "tidy up")
      asyncio.run(go())
    return [r.getMessage() for r in caplog.records if "runs after ContextPackPlugin" in r.getMessage()]

  after = warned("after")
  assert len(after) == 1 and "model_consult_force_escalation" in after[0]
  assert warned("before") == []
