"""Step-only tool scoping, in two modes.

``hard`` removes out-of-step function declarations and their ``tools_dict``
entries together (a smaller prompt, but the tool block changes per step);
``mask`` keeps every declaration byte-stable for the prompt cache and
restricts ``allowed_function_names`` instead. Framework tools are never
removed: agent transfer, sub-agent delegation, structured output, task
completion, loop exit and skills.
Scoping only narrows what the caller's ``tool_config`` already allows; it
never re-enables or widens tool calling, and never leaves a ``tool_config``
naming functions the request no longer declares. A step that allows no
function turns calling off (mode ``NONE``, or no declarations in hard mode),
unless the caller forces a call (``ANY``): a forced call outranks the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from google.genai import types

from ..core.policy import ToolScoping

# ``exit_loop`` is ADK's way out of a LoopAgent: scoped out, the loop runs to max_iterations (or forever).
PROTECTED_TOOLS = frozenset({"transfer_to_agent", "set_model_response", "finish_task", "exit_loop"})
SKILL_TOOL_SUFFIXES = (
    "list_skills", "search_skills", "load_skill", "unload_skill", "load_skill_resource", "run_skill_script",
)

try:  # the tools ADK adds to reach its single_turn and task sub-agents (as transfer_to_agent reaches chat ones)
  from google.adk.tools.agent_tool import _SingleTurnAgentTool, _TaskAgentTool
  _DELEGATION_TOOLS: tuple[type, ...] = (_SingleTurnAgentTool, _TaskAgentTool)
except ImportError:  # pragma: no cover - an ADK without agent modes
  _DELEGATION_TOOLS = ()


try:  # the toolset whose skills may bring tools of their own (``adk_additional_tools``)
  from google.adk.tools.skill_toolset import SkillToolset as _SkillToolset
except ImportError:  # pragma: no cover - an ADK without skills
  _SkillToolset = None


def skill_provided_names(agent: Any) -> frozenset[str]:
  """Names of the tools the agent's ``SkillToolset``s hand to a skill once it is loaded.

  A loaded skill's instructions say to use them; scoping them out would make
  loading the skill pointless. Tools a skill draws from a provided *toolset*
  are not known without listing that toolset (an MCP server, say), so they are
  scoped like any other.
  """
  if _SkillToolset is None:
    return frozenset()
  names: set[str] = set()
  for tool in getattr(agent, "tools", None) or ():
    if isinstance(tool, _SkillToolset):
      provided = getattr(tool, "_provided_tools_by_name", None)
      if isinstance(provided, dict):
        names.update(str(n) for n in provided)
  return frozenset(names)


def is_protected(name: str, tool: Any = None) -> bool:
  if name in PROTECTED_TOOLS or name.endswith(SKILL_TOOL_SUFFIXES):
    return True
  return tool is not None and ("skill" in type(tool).__module__ or isinstance(tool, _DELEGATION_TOOLS))


@dataclass
class ScopedTools:
  mode: ToolScoping
  declarations: list[types.FunctionDeclaration]
  """Declarations that will be sent (what the TOOLS layer costs)."""
  allowed: Optional[list[str]] = None
  removed: list[str] = field(default_factory=list)
  unknown: list[str] = field(default_factory=list)
  skipped: Optional[str] = None
  """Why scoping left the request as the caller set it, if it did."""
  calling_off: bool = False
  """The step allows no function: mask sends mode NONE, hard drops the calling config."""

  def apply_config(self, config: types.GenerateContentConfig) -> types.GenerateContentConfig:
    """Scopes ``config`` to the step; mask mode also settles ``allowed``/``skipped``.

    Hard mode drops out-of-step declarations; a ``Tool`` that also carries
    built-ins (code execution, search) keeps them when its declarations go.

    Mask mode narrows the caller's ``function_calling_config`` and never
    widens it: ``NONE`` stays off; ``ANY`` and ``VALIDATED`` keep their mode;
    caller ``allowed_function_names`` are intersected (a protected tool the
    caller left out is not added back); only an unset, ``AUTO`` or
    ``MODE_UNSPECIFIED`` mode becomes ``VALIDATED``. An empty allow-list is
    never sent, since it reads as "any function" (or is rejected): a step that
    allows no declared function sends mode ``NONE`` (``calling_off``), except
    under the caller's ``ANY``, which forces a call: that config is left as it
    is, ``allowed`` becomes ``None`` and ``skipped`` says why, for the manifest.
    """
    if self.mode is ToolScoping.HARD and self.removed:
      keep = {d.name for d in self.declarations}
      self._narrow_hard(config, keep)
      tools = []
      for tool in config.tools or ():
        if isinstance(tool, types.Tool) and tool.function_declarations:
          decls = [d for d in tool.function_declarations if d.name in keep]
          if decls:
            tools.append(tool.model_copy(update={"function_declarations": decls}))
          elif tool.model_dump(exclude_none=True, exclude={"function_declarations"}):
            tools.append(tool.model_copy(update={"function_declarations": None}))
        else:
          tools.append(tool)
      config.tools = tools
    elif self.mode is ToolScoping.MASK and self.allowed is not None:
      self._mask(config)
    return config

  def _narrow_hard(self, config: types.GenerateContentConfig, keep: set[str]) -> None:
    """The caller's calling config, for the declarations hard mode keeps (``scope_tools``
    already refused a scoping that would leave a forced call nothing to call).

    No declaration left: no calling config (one without declarations is refused).
    The caller's allowed names are cut to the kept ones; none left: mode NONE.
    """
    modes = types.FunctionCallingConfigMode
    self.calling_off = not keep
    fcc = config.tool_config.function_calling_config if config.tool_config else None
    if fcc is None:
      return
    if not keep:
      narrowed = None
    elif fcc.mode is modes.NONE or not fcc.allowed_function_names:
      return
    else:
      names = [n for n in fcc.allowed_function_names if n in keep]
      self.calling_off = not names
      narrowed = fcc.model_copy(update={"allowed_function_names": names} if names
                                else {"mode": modes.NONE, "allowed_function_names": None})
    tc = config.tool_config.model_copy(deep=True)
    tc.function_calling_config = narrowed
    config.tool_config = tc if tc.model_dump(exclude_none=True) else None

  def _mask(self, config: types.GenerateContentConfig) -> None:
    modes = types.FunctionCallingConfigMode
    fcc = config.tool_config.function_calling_config if config.tool_config else None
    mode = fcc.mode if fcc else None
    if mode is modes.NONE:
      self._skip("function calling is off (mode NONE)")
      return
    names = list(self.allowed)
    if fcc and fcc.allowed_function_names:
      caller = set(fcc.allowed_function_names)
      names = [n for n in names if n in caller]
    if not names:
      if mode is modes.ANY:  # an empty allow-list would read as "any function"
        self._skip("the step allows no declared function, and the caller's mode ANY forces a call")
        return
      update: dict[str, Any] = {"mode": modes.NONE, "allowed_function_names": None}
      self.calling_off = True
    else:
      if mode not in (modes.ANY, modes.VALIDATED):
        mode = modes.VALIDATED
      update = {"mode": mode, "allowed_function_names": names}
    tc = config.tool_config.model_copy(deep=True) if config.tool_config else types.ToolConfig()
    tc.function_calling_config = fcc.model_copy(update=update) if fcc else types.FunctionCallingConfig(**update)
    config.tool_config = tc
    self.allowed = names

  def _skip(self, reason: str) -> None:
    self.skipped, self.allowed = reason, None

  def apply_tools_dict(self, llm_request) -> None:
    if self.mode is ToolScoping.HARD and self.removed:
      llm_request.tools_dict = {k: v for k, v in llm_request.tools_dict.items() if k not in set(self.removed)}

  def describe(self) -> dict[str, Any]:
    return {
        "mode": self.mode.value, "allowed": self.allowed, "removed": self.removed, "unknown": self.unknown,
        "skipped": self.skipped, **({"calling_off": True} if self.calling_off else {}),
    }


def _forced_names(config: types.GenerateContentConfig) -> Optional[frozenset[str]]:
  """The functions a caller's mode ANY forces a call among (empty: any function), or None when no call is forced."""
  fcc = config.tool_config.function_calling_config if config and config.tool_config else None
  if fcc is None or fcc.mode is not types.FunctionCallingConfigMode.ANY:
    return None
  return frozenset(fcc.allowed_function_names or ())


def _declarations(config: types.GenerateContentConfig) -> list[types.FunctionDeclaration]:
  return [
      d for tool in (config.tools or ()) if isinstance(tool, types.Tool)
      for d in (tool.function_declarations or ())
  ]


def scope_tools(llm_request, step_tools: Optional[Sequence[str]], mode: ToolScoping,
                also_protected: frozenset[str] = frozenset()) -> ScopedTools:
  decls = _declarations(llm_request.config)
  if mode is ToolScoping.OFF or step_tools is None:
    return ScopedTools(mode=ToolScoping.OFF if step_tools is None else mode, declarations=decls)
  wanted = set(step_tools)
  present = {d.name for d in decls}
  protected = {n for n in present if n in also_protected or is_protected(n, llm_request.tools_dict.get(n))}
  unknown = sorted(wanted - present)
  if wanted and not wanted & (present - protected):
    # The step is another agent's (an AgentTool child or a sub-agent inherits the session's
    # state): it names none of this agent's own tools (a framework tool such as
    # transfer_to_agent, which every agent may have, does not count), so it does not scope
    # them. An explicitly empty step does: no tools for anyone.
    return ScopedTools(mode=mode, declarations=decls, unknown=unknown, skipped="the step names none of this agent's tools")
  kept = (wanted & present) | protected
  keep = [d for d in decls if d.name in kept]
  if mode is ToolScoping.HARD:
    forced = _forced_names(llm_request.config)
    callable_after = kept & forced if forced else kept
    if forced is not None and not callable_after:  # a forced call outranks the step
      why = (f"no kept tool is in the caller's allowed_function_names {sorted(forced)} (mode ANY)" if forced
             else "the step keeps no function, and the caller's mode ANY forces a call")
      return ScopedTools(mode=mode, declarations=decls, unknown=unknown, skipped=why)
    return ScopedTools(mode=mode, declarations=keep, removed=sorted(present - kept), unknown=unknown)
  return ScopedTools(mode=mode, declarations=decls, allowed=sorted(kept), unknown=unknown)
