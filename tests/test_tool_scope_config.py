"""Step tool scoping must narrow what the caller allowed, never widen or re-enable it.

Mask mode used to overwrite ``function_calling_config`` with VALIDATED plus
the step tools, turning a user's ``NONE`` into tool calling and widening an
``ANY`` restriction (e.g. ADK's force-escalation plugin). Hard mode used to
drop a ``types.Tool`` whole when its declarations were scoped out, losing
built-in tools such as code execution that shared it.
"""

from __future__ import annotations

from typing import Optional

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.tool_scope import scope_tools
from aether_frame.core.policy import PackPolicy, ToolScoping
from aether_frame.offline_model import OfflineLlm

from .adk_support import make_runner, new_session, say

Mode = types.FunctionCallingConfigMode


def _decl(name: str) -> types.FunctionDeclaration:
  return types.FunctionDeclaration(
      name=name, description=f"{name} tool",
      parameters=types.Schema(type="OBJECT", properties={"x": types.Schema(type="STRING")}),
  )


def _request(names, fcc: Optional[types.FunctionCallingConfig] = None, **tc) -> LlmRequest:
  config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[_decl(n) for n in names])])
  if fcc is not None or tc:
    config.tool_config = types.ToolConfig(function_calling_config=fcc, **tc)
  return LlmRequest(model="gemini-2.5-flash", contents=[], config=config)


def _mask(req: LlmRequest, step_tools):
  scoped = scope_tools(req, step_tools, ToolScoping.MASK)
  config = scoped.apply_config(req.config.model_copy(deep=False))
  return scoped, config


def _fcc(config) -> Optional[types.FunctionCallingConfig]:
  return config.tool_config.function_calling_config if config.tool_config else None


# ---------------------------------------------------------------- mask mode
def test_mask_leaves_mode_none_alone():
  req = _request(["lookup", "search", "save"], types.FunctionCallingConfig(mode=Mode.NONE))
  scoped, config = _mask(req, ["lookup", "search"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.NONE)
  assert scoped.describe()["skipped"]


def test_mask_keeps_any_and_intersects_existing_allowed_names():
  req = _request(["lookup", "search", "save"], types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["lookup"]))
  scoped, config = _mask(req, ["lookup", "search"])
  assert _fcc(config).mode is Mode.ANY
  assert _fcc(config).allowed_function_names == ["lookup"]
  assert scoped.describe()["allowed"] == ["lookup"] and scoped.describe()["skipped"] is None


def test_mask_narrows_any_without_names_and_keeps_it_any():
  req = _request(["lookup", "search", "save"], types.FunctionCallingConfig(mode=Mode.ANY))
  _, config = _mask(req, ["search"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["search"])


def test_mask_intersects_validated_names():
  req = _request(["lookup", "search", "save"],
                 types.FunctionCallingConfig(mode=Mode.VALIDATED, allowed_function_names=["save", "search"]))
  _, config = _mask(req, ["lookup", "search"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.VALIDATED, allowed_function_names=["search"])


def test_mask_sets_validated_only_for_auto_unspecified_or_missing():
  for fcc in (None, types.FunctionCallingConfig(), types.FunctionCallingConfig(mode=Mode.AUTO),
              types.FunctionCallingConfig(mode=Mode.MODE_UNSPECIFIED)):
    req = _request(["lookup", "search"], fcc)
    _, config = _mask(req, ["search"])
    assert _fcc(config).mode is Mode.VALIDATED, fcc
    assert _fcc(config).allowed_function_names == ["search"], fcc
  # Not for a mode the caller chose on purpose.
  req = _request(["lookup", "search"], types.FunctionCallingConfig(mode=Mode.ANY))
  assert _fcc(_mask(req, ["search"])[1]).mode is Mode.ANY


def test_mask_keeps_a_protected_tool_the_caller_allowed_but_never_adds_one():
  names = ["lookup", "save", "transfer_to_agent"]
  req = _request(names, types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["transfer_to_agent", "save"]))
  _, config = _mask(req, ["lookup"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["transfer_to_agent"])
  req = _request(names, types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["lookup"]))
  _, config = _mask(req, ["lookup"])
  assert _fcc(config).allowed_function_names == ["lookup"]


def test_mask_with_empty_intersection_leaves_the_callers_restriction():
  original = types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["save"])
  req = _request(["lookup", "save"], original)
  scoped, config = _mask(req, ["lookup"])
  # ANY with an empty list would mean "any function": never send that.
  assert _fcc(config) == original
  assert scoped.describe()["skipped"] and scoped.describe()["allowed"] is None


def test_an_empty_step_turns_calling_off_and_sends_no_empty_allow_list():
  """The step allows nothing: mode NONE, as hard mode removes every declaration (it used to send
  no tool_config at all, and the model called any tool)."""
  req = _request(["a", "b"])
  scoped, config = _mask(req, [])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.NONE)
  d = scoped.describe()
  assert d["calling_off"] is True and d["allowed"] == [] and d["skipped"] is None


def test_a_step_naming_none_of_the_agents_tools_is_another_agents():
  """An AgentTool child inherits the session's step: one naming only the parent's tools must not
  turn the child's own tools off, in either mode."""
  for scope in (_mask, _hard):
    for step in (["parent_tool"], ["parent_tool", "transfer_to_agent"], ["exit_loop"]):
      req = _request(["a", "b", "transfer_to_agent", "exit_loop"])
      scoped, config = scope(req, step)
      assert config.tool_config is None and _declared(config) == ["a", "b", "transfer_to_agent", "exit_loop"], (scope, step)
      d = scoped.describe()
      assert d["skipped"] and "calling_off" not in d


def test_mask_keeps_a_forced_call_when_the_step_allows_nothing():
  original = types.FunctionCallingConfig(mode=Mode.ANY)
  req = _request(["a", "b"], original)
  scoped, config = _mask(req, [])
  assert _fcc(config) == original and scoped.describe()["skipped"] and scoped.describe()["allowed"] is None


def test_mask_narrows_validated_names_to_none_when_none_is_in_the_step():
  req = _request(["lookup", "save"], types.FunctionCallingConfig(mode=Mode.VALIDATED, allowed_function_names=["save"]))
  scoped, config = _mask(req, ["lookup"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.NONE)  # not VALIDATED over "lookup": never widened


# ---------------------------------------------------------------- hard mode: the calling config follows the declarations
def _hard(req: LlmRequest, step_tools):
  scoped = scope_tools(req, step_tools, ToolScoping.HARD)
  config = scoped.apply_config(req.config.model_copy(deep=False))
  return scoped, config


def _declared(config) -> list[str]:
  return [d.name for t in config.tools or () for d in t.function_declarations or ()]


def test_hard_cuts_the_callers_allowed_names_to_the_kept_declarations():
  req = _request(["lookup", "search", "save"],
                 types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["save", "search"]))
  _, config = _hard(req, ["lookup", "search"])
  assert _declared(config) == ["lookup", "search"]
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["search"])


def test_hard_keeps_a_forced_call_the_step_leaves_nothing_for():
  """ADK's ForceEscalationPlugin forces ANY with [model_consult]: removing that tool would leave a
  request naming a function it does not declare (a 400), and the forced consult lost."""
  forced = types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["model_consult"])
  for fcc, step in ((forced, ["lookup"]), (types.FunctionCallingConfig(mode=Mode.ANY), [])):
    req = _request(["lookup", "model_consult"], fcc)
    scoped, config = _hard(req, step)
    assert _declared(config) == ["lookup", "model_consult"] and _fcc(config) == fcc
    assert scoped.describe()["skipped"] and scoped.describe()["removed"] == []
    assert [d.name for d in scoped.declarations] == ["lookup", "model_consult"]  # what the TOOLS layer costs


def test_hard_sends_no_calling_config_without_declarations_and_none_when_no_allowed_name_is_kept():
  for fcc in (types.FunctionCallingConfig(mode=Mode.AUTO), types.FunctionCallingConfig(mode=Mode.VALIDATED),
              types.FunctionCallingConfig(mode=Mode.NONE)):
    scoped, config = _hard(_request(["lookup", "save"], fcc), [])
    assert _declared(config) == [] and config.tool_config is None, fcc
    assert scoped.describe()["calling_off"] is True
  req = _request(["lookup", "save"], types.FunctionCallingConfig(mode=Mode.VALIDATED, allowed_function_names=["save"]))
  scoped, config = _hard(req, ["lookup"])
  assert _declared(config) == ["lookup"] and _fcc(config) == types.FunctionCallingConfig(mode=Mode.NONE)


def test_mask_preserves_the_rest_of_the_tool_config_and_does_not_mutate_the_input():
  retrieval = types.RetrievalConfig(language_code="en")
  fcc = types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["lookup", "search"],
                                    stream_function_call_arguments=True)
  req = _request(["lookup", "search"], fcc, retrieval_config=retrieval)
  before = req.config.tool_config.model_dump_json()
  _, config = _mask(req, ["search"])
  assert _fcc(config) == types.FunctionCallingConfig(mode=Mode.ANY, allowed_function_names=["search"],
                                                     stream_function_call_arguments=True)
  assert config.tool_config.retrieval_config == retrieval
  assert req.config.tool_config.model_dump_json() == before


async def test_runner_mask_mode_respects_an_agents_mode_none():
  def lookup(x: str) -> dict:
    """Looks a thing up."""
    return {"x": x}

  def search(x: str) -> dict:
    """Searches."""
    return {"x": x}

  model = OfflineLlm(script=["ok"])
  gcc = types.GenerateContentConfig(tool_config=types.ToolConfig(
      function_calling_config=types.FunctionCallingConfig(mode=Mode.NONE)))
  ag = LlmAgent(name="assistant", model=model, instruction="Be brief.", tools=[lookup, search],
                generate_content_config=gcc)
  runner = make_runner(ag, [ContextPackPlugin(window=8192, policy=PackPolicy(tool_scoping="mask"))])
  session = await new_session(runner, state={"tools": ["lookup"]})
  await say(runner, session.id, "hi")
  fcc = model.received[0].config.tool_config.function_calling_config
  assert fcc.mode is Mode.NONE and fcc.allowed_function_names is None


# ---------------------------------------------------------------- hard mode
def test_hard_keeps_a_mixed_tools_builtin_fields_when_its_declarations_go():
  req = _request([])
  req.config.tools = [
      types.Tool(function_declarations=[_decl("old")], code_execution=types.ToolCodeExecution()),
      types.Tool(function_declarations=[_decl("gone")]),
      types.Tool(function_declarations=[_decl("keep"), _decl("old2")]),
  ]
  scoped = scope_tools(req, ["keep"], ToolScoping.HARD)
  tools = scoped.apply_config(req.config.model_copy(deep=False)).tools
  assert len(tools) == 2
  assert tools[0].code_execution == types.ToolCodeExecution() and not tools[0].function_declarations
  assert [d.name for d in tools[1].function_declarations] == ["keep"]
  assert scoped.removed == ["gone", "old", "old2"]


def test_a_name_declared_twice_is_charged_twice_and_allowed_once():
  """Two toolsets exposing ``lookup``: ADK sends both declarations; the TOOLS layer used to
  keep one (the same item id) and mask sent ``['lookup', 'lookup']``."""
  from aether_frame.adk.sources import tool_items

  items = tool_items([_decl("lookup"), _decl("lookup"), _decl("save")])
  assert [i.id for i in items] == ["tool:lookup", "tool:lookup#2", "tool:save"]
  assert items[0].text == items[1].text and all(i.meta["name"] for i in items)
  req = _request(["lookup", "save"])
  req.config.tools.append(types.Tool(function_declarations=[_decl("lookup")]))
  _, config = _mask(req, ["lookup"])
  assert _fcc(config).allowed_function_names == ["lookup"]
