"""The session-state schema the plugin reads, as pydantic models.

Agents (or a planner) write these keys into ``session.state``; the plugin
validates them on every call, so a malformed plan is reported with the
field that is wrong instead of silently producing a thin pack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PLAN_KEY = "plan"
TOOLS_KEY = "tools"
KNOWLEDGE_KEY = "knowledge"
LAST_PACK_KEY = "aether_frame:last_pack"
LAST_FAULT_KEY = "aether_frame:last_fault"
CALIBRATION_KEY = "aether_frame:calibration"
"""Per-session tokenizer calibration (``Calibrator.to_dict()``), shared by all workers."""
TAIL_KEY_PREFIX = "aether_frame:tail:"
"""+ agent: the id of the first history turn the agent's last pack kept (its tail cut), so any
worker keeps that cut. A workflow lane of the agent (its own branch or node path) has a key of its
own, + agent + "|<branch>|<node path>" (``tail_key``): lanes see different histories, and a
worker reading a sibling lane's cut trimmed turns the lane's own cut kept."""
STEPS_KEY_PREFIX = "aether_frame:steps:"
"""+ agent (see ``steps_key``): {"invocation": id, "cut": newest finished step dropped}, written
only once an invocation's own steps were trimmed, so any worker keeps that cut."""


def tail_key(agent: str, lane: str = "|") -> str:
  """The state key of ``agent``'s tail cut in ``lane`` ("<branch>|<node path>"; "|": none)."""
  return TAIL_KEY_PREFIX + agent if lane == "|" else f"{TAIL_KEY_PREFIX}{agent}|{lane}"


def steps_key(agent: str, lane: str = "|") -> str:
  """The state key of ``agent``'s in-flight cut in ``lane``. One key per lane, as for the tail:
  a lane's state delta lands when its model answers, and a shared value written whole by a
  slow lane put back another lane's older cut."""
  return STEPS_KEY_PREFIX + agent if lane == "|" else f"{STEPS_KEY_PREFIX}{agent}|{lane}"


_OWN_KEYS = (LAST_PACK_KEY, LAST_FAULT_KEY, CALIBRATION_KEY)


class StateKeys(BaseModel):
  """Where the plugin reads its inputs in session state.

  The defaults are the plain names of the design. An app whose agents already
  write one of them for their own use (``LlmAgent(output_key="plan")`` is
  common) points the plugin at other keys: ``state_keys={"plan": "pack:plan"}``.
  """

  model_config = ConfigDict(extra="forbid", frozen=True)

  plan: str = Field(default=PLAN_KEY, min_length=1)
  tools: str = Field(default=TOOLS_KEY, min_length=1)
  knowledge: str = Field(default=KNOWLEDGE_KEY, min_length=1)

  @model_validator(mode="after")
  def _distinct(self) -> "StateKeys":
    keys = [self.plan, self.tools, self.knowledge]
    if len(set(keys)) != len(keys):
      raise ValueError(f"plan, tools and knowledge need three different keys, got {keys}")
    for key in keys:
      if key in _OWN_KEYS or key.startswith((TAIL_KEY_PREFIX, STEPS_KEY_PREFIX)):
        raise ValueError(f"{key!r} is a key the plugin writes itself")
    return self


class PlanState(BaseModel):
  """``state["plan"]``: the goal and the current step with its checklist."""

  model_config = ConfigDict(extra="ignore")

  goal: str = Field(min_length=1)
  role: Optional[str] = None
  step: Optional[str] = None
  """The current step, in one or two sentences."""
  step_id: Optional[str] = None
  acceptance: list[str] = Field(default_factory=list)
  """The acceptance checklist for the current step."""
  constraints: list[str] = Field(default_factory=list)

  @field_validator("acceptance", "constraints", mode="before")
  @classmethod
  def _sets_in_order(cls, value: Any) -> Any:
    """A set has no order (its iteration order changes with the process's hash
    seed): its items render sorted, so every worker sends the same text."""
    if isinstance(value, (set, frozenset)):
      return sorted(value, key=str)
    return value


class KnowledgeItem(BaseModel):
  """One entry of ``state["knowledge"]``: an evidence summary and its artifact URI."""

  model_config = ConfigDict(extra="ignore")

  uri: str = Field(min_length=1)
  summary: str = Field(min_length=1)
  id: Optional[str] = None
  timestamp: Optional[float] = None
  checklist: bool = False
  """True when this evidence backs an acceptance item (kept as essential)."""
  score: float = 0.0


class ToolsState(BaseModel):
  """``state["tools"]``: names of the tools the current step may use."""

  names: list[str]


def unread_keys(state: Any, keys: StateKeys = StateKeys()) -> dict[str, list[str]]:
  """Keys of the plan and of the knowledge entries that no field reads.

  The schema ignores extra keys (other agent code may keep its own there), so
  a misspelt or differently shaped plan (``"steps"``, ``"current_step"``)
  would vanish without a word; the plugin reports these instead.
  """
  out: dict[str, list[str]] = {}
  plan = state.get(keys.plan)
  if isinstance(plan, dict):
    extra = sorted(str(k) for k in plan if k not in PlanState.model_fields)
    if extra:
      out[keys.plan] = extra
  knowledge = state.get(keys.knowledge)
  if isinstance(knowledge, (list, tuple)):
    extra = sorted({str(k) for entry in knowledge if isinstance(entry, dict)
                    for k in entry if k not in KnowledgeItem.model_fields})
    if extra:
      out[keys.knowledge] = extra
  return out


@dataclass
class StateInputs:
  """What one call reads from session state, and what it had to leave out."""

  plan: Optional[PlanState] = None
  knowledge: list[KnowledgeItem] = field(default_factory=list)
  tools: Optional[list[str]] = None
  """Step tool names; None: no scoping."""
  rejected: dict[str, str] = field(default_factory=dict)
  """Where (``state['plan']``, ``state['knowledge'][2]``…) -> why the value was left out."""


def read_state(state: Mapping[str, Any], keys: StateKeys = StateKeys()) -> StateInputs:
  """Validates the plan, knowledge and tools; a value that fails its schema is left out, with the reason.

  Leaving it out (rather than failing the whole pack) keeps the session packed
  when another agent writes the same key for its own use; the caller reports
  every rejection, so nothing is dropped without a word. Knowledge is read entry
  by entry: one bad entry does not cost the others.
  """
  out = StateInputs()
  plan = state.get(keys.plan)
  if plan is not None:
    try:
      out.plan = PlanState.model_validate(plan)
    except ValidationError as e:
      out.rejected[f"state[{keys.plan!r}]"] = _reason(e, plan)
  knowledge = state.get(keys.knowledge)
  if knowledge:  # None, [], {} or "": no knowledge (ADK cannot delete a key, so a cleared one is empty)
    if not isinstance(knowledge, (list, tuple)):
      out.rejected[f"state[{keys.knowledge!r}]"] = f"expected a list of knowledge items, got {type(knowledge).__name__}"
    else:
      for i, entry in enumerate(knowledge):
        try:
          out.knowledge.append(KnowledgeItem.model_validate(entry))
        except ValidationError as e:
          out.rejected[f"state[{keys.knowledge!r}][{i}]"] = _reason(e, entry)
  tools = state.get(keys.tools)
  if tools is not None:
    try:
      out.tools = ToolsState.model_validate({"names": tools}).names
    except ValidationError as e:
      out.rejected[f"state[{keys.tools!r}]"] = _reason(e, tools, prefix="names")
  return out


def _reason(error: ValidationError, value: Any, prefix: str = "") -> str:
  """pydantic's complaints in one line: ``goal: Field required; step: Input should be…``."""
  parts = []
  for err in error.errors(include_url=False)[:3]:
    loc = [str(x) for x in err.get("loc", ())]
    if prefix and loc[:1] == [prefix]:
      loc = loc[1:]
    parts.append(f"{'.'.join(loc)}: {err['msg']}" if loc else err["msg"])
  more = error.error_count() - len(parts)
  if more > 0:
    parts.append(f"{more} more")
  return f"{'; '.join(parts)} (got {type(value).__name__})"
