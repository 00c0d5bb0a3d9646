"""The session-state schema the plugin reads, as pydantic models.

Agents (or a planner) write these keys into ``session.state``; the plugin
validates them on every call, so a malformed plan is reported with the
field that is wrong instead of silently producing a thin pack.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

PLAN_KEY = "plan"
TOOLS_KEY = "tools"
KNOWLEDGE_KEY = "knowledge"
LAST_PACK_KEY = "aether_frame:last_pack"
LAST_FAULT_KEY = "aether_frame:last_fault"
CALIBRATION_KEY = "aether_frame:calibration"
"""Per-session tokenizer calibration (``Calibrator.to_dict()``), shared by all workers."""
TAIL_KEY_PREFIX = "aether_frame:tail:"


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


class KnowledgeState(BaseModel):
  items: list[KnowledgeItem]


class ToolsState(BaseModel):
  """``state["tools"]``: names of the tools the current step may use."""

  names: list[str]


def unread_keys(state: Any) -> dict[str, list[str]]:
  """Keys of ``state["plan"]`` and ``state["knowledge"]`` entries that no field reads.

  The schema ignores extra keys (other agent code may keep its own there), so
  a misspelt or differently shaped plan (``"steps"``, ``"current_step"``)
  would vanish without a word; the plugin reports these instead.
  """
  out: dict[str, list[str]] = {}
  plan = state.get(PLAN_KEY)
  if isinstance(plan, dict):
    extra = sorted(str(k) for k in plan if k not in PlanState.model_fields)
    if extra:
      out[PLAN_KEY] = extra
  knowledge = state.get(KNOWLEDGE_KEY)
  if isinstance(knowledge, list):
    extra = sorted({str(k) for entry in knowledge if isinstance(entry, dict)
                    for k in entry if k not in KnowledgeItem.model_fields})
    if extra:
      out[KNOWLEDGE_KEY] = extra
  return out
