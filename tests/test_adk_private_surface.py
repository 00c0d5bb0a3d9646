"""The private corners of ADK the plugin reads, pinned on the installed ADK (the 2.13 line).

Each is read behind a fallback (an ImportError, a ``getattr`` default), so an
ADK release that renamed one would not fail a call: the feature that needs it
would quietly stop working (instruction files trimmed as history, a
FallbackModel's backups not sized for, the call limit not seen). This test
fails instead, naming what moved.
"""

from __future__ import annotations

import importlib.metadata

import pytest
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext, _InvocationCostManager
from google.adk.artifacts.in_memory_artifact_service import InMemoryArtifactService
from google.adk.models.llm_request import LlmRequest
from google.adk.sessions import InMemorySessionService

from aether_frame.adk import artifact_listing, plugin, sources, tool_scope


def test_the_installed_adk_is_the_pinned_line():
  assert importlib.metadata.version("google-adk").startswith("2.13."), "pyproject pins google-adk to the 2.13 line"


def test_every_optional_import_resolved():
  assert plugin._LABEL_HEAD and plugin._LABEL_TAIL, "google.adk.flows.llm_flows.instructions._INSTRUCTION_*"
  assert plugin._FallbackModel is not None, "google.adk.models._fallback_model.FallbackModel"
  assert sources.OTHER_AGENT_CONTEXT_PREAMBLE, "google.adk.flows.llm_flows.context._fencing.OTHER_AGENT_CONTEXT_PREAMBLE"
  assert len(tool_scope._DELEGATION_TOOLS) == 2, "google.adk.tools.agent_tool._SingleTurnAgentTool/_TaskAgentTool"


def test_the_private_attributes_read_exist():
  assert {"_has_static_instruction", "_static_instruction_prefix_end_index", "_dynamic_instructions"} <= set(
      LlmRequest.__private_attributes__)
  assert "_invocation_cost_manager" in InvocationContext.__private_attributes__
  assert "_number_of_llm_calls" in _InvocationCostManager.__private_attributes__
  from google.adk.tools.skill_toolset import SkillToolset
  import inspect

  assert "_provided_tools_by_name" in inspect.getsource(SkillToolset)
  from google.adk.tools._forwarding_artifact_service import ForwardingArtifactService  # manifest_store unwraps it

  assert "self._invocation_context = " in inspect.getsource(ForwardingArtifactService.__init__)


async def test_the_callback_context_holds_the_shared_invocation_context():
  service = InMemorySessionService()
  session = await service.create_session(app_name="a", user_id="u")
  from google.adk.agents import LlmAgent

  ic = InvocationContext(session_service=service, invocation_id="i", agent=LlmAgent(name="x"), session=session,
                         artifact_service=InMemoryArtifactService())
  ctx = CallbackContext(ic)
  assert plugin._invocation_of(ctx) is ic
  assert plugin._llm_calls(ctx) is not None, "the invocation's LLM call counter"


@pytest.mark.parametrize("names", [["report.pdf"], ["a.txt", "context_pack/manifest.json"]])
async def test_adk_artifact_listing_is_rebuilt(names):
  assert await artifact_listing.listing_text(names) is not None, "load_artifacts_tool._append_artifacts_to_llm_request"
