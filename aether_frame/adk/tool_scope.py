"""Step-only tool scoping, in two modes.

``hard`` removes out-of-step function declarations and their ``tools_dict``
entries together (a smaller prompt, but the tool block changes per step);
``mask`` keeps every declaration byte-stable for the prompt cache and
restricts ``allowed_function_names`` instead. Framework tools are never
removed: agent transfer, sub-agent delegation, structured output, task
completion, loop exit and skills.
Scoping only narrows what the caller's ``tool_config`` already allows; it
never re-enables or widens tool calling.
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
  """Why mask scoping left ``tool_config`` as the caller set it, if it did."""

  def apply_config(self, config: types.GenerateContentConfig) -> types.GenerateContentConfig:
    """Scopes ``config`` to the step; mask mode also settles ``allowed``/``skipped``.

    Hard mode drops out-of-step declarations; a ``Tool`` that also carries
    built-ins (code execution, search) keeps them when its declarations go.

    Mask mode narrows the caller's ``function_calling_config`` and never
    widens it: ``NONE`` stays off; ``ANY`` and ``VALIDATED`` keep their mode;
    caller ``allowed_function_names`` are intersected (a protected tool the
    caller left out is not added back); only an unset, ``AUTO`` or
    ``MODE_UNSPECIFIED`` mode becomes ``VALIDATED``. An empty result is never
    sent, since an empty allow-list reads as "any function" (or is rejected):
    the config is left unchanged, ``allowed`` becomes ``None`` and ``skipped``
    says why, for the manifest.
    """
    if self.mode is ToolScoping.HARD and self.removed:
      keep = {d.name for d in self.declarations}
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
        self._skip(f"no step tool is in the caller's allowed_function_names {sorted(caller)}")
        return
    elif not names:
      self._skip("no step tool or framework tool is declared")
      return
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
        "skipped": self.skipped,
    }


def _declarations(config: types.GenerateContentConfig) -> list[types.FunctionDeclaration]:
  return [
      d for tool in (config.tools or ()) if isinstance(tool, types.Tool)
      for d in (tool.function_declarations or ())
  ]


def scope_tools(llm_request, step_tools: Optional[Sequence[str]], mode: ToolScoping) -> ScopedTools:
  decls = _declarations(llm_request.config)
  if mode is ToolScoping.OFF or step_tools is None:
    return ScopedTools(mode=ToolScoping.OFF if step_tools is None else mode, declarations=decls)
  wanted = set(step_tools)
  present = {d.name for d in decls}
  keep = [d for d in decls if d.name in wanted or is_protected(d.name, llm_request.tools_dict.get(d.name))]
  removed = sorted(present - {d.name for d in keep})
  unknown = sorted(wanted - present)
  if mode is ToolScoping.HARD:
    return ScopedTools(mode=mode, declarations=keep, removed=removed, unknown=unknown)
  return ScopedTools(mode=mode, declarations=decls, allowed=sorted(d.name for d in keep), unknown=unknown)
