"""``PackPolicy``: every knob of the compiler, validated at construction.

Configuration errors fail loudly here (pydantic names the field), never
later inside a model call.
"""

from __future__ import annotations

import difflib
import math
from enum import Enum
from typing import Any, Collection, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from .canonical import digest


class TaskProfile(str, Enum):
  """Seed 003's task profiles: how the elastic remainder is split by default."""

  GENERAL = "general"
  RESEARCH = "research"
  REQUIREMENTS = "requirements"
  TEST_CONSTRUCTION = "test_construction"


QUANTUM_MAX = 4096
"""Largest ``PackPolicy.quantum`` of a new policy (earlier versions stored any positive one)."""

# Base remainder weights (evidence, memory, conversation) per profile: the
# midpoints of seed 003's "Task Profiles" table, renormalised.
PROFILE_WEIGHTS: dict[TaskProfile, tuple[float, float, float]] = {
    TaskProfile.GENERAL: (0.35, 0.25, 0.40),
    TaskProfile.RESEARCH: (0.60, 0.225, 0.125),
    TaskProfile.REQUIREMENTS: (0.50, 0.275, 0.175),
    TaskProfile.TEST_CONSTRUCTION: (0.55, 0.225, 0.125),
}


class OverflowPolicy(str, Enum):
  """What happens when the elastic layers do not fit (seed 001 §6.4.3)."""

  LADDER = "ladder"
  """select → compress → drop, recording every truncation (the default)."""
  FAIL_LOUD = "fail_loud"
  """Raise ``ContextBudgetExhausted`` instead of dropping anything (the plugin fails the run; nothing is sent)."""


class ToolScoping(str, Enum):
  """How step-only tool scoping is applied to the request."""

  OFF = "off"
  HARD = "hard"
  """Remove out-of-step declarations and ``tools_dict`` entries together."""
  MASK = "mask"
  """Keep declarations (cache-stable) and restrict ``allowed_function_names``."""


class _Fields(BaseModel):
  """A misspelled field (``recent_turn``) is refused as pydantic refuses any unknown one,
  at its own location, and the error names the field it was probably meant to be."""

  @model_validator(mode="wrap")
  @classmethod
  def _suggest(cls, data: Any, handler: Any) -> Any:
    try:
      return handler(data)
    except ValidationError as e:
      errors, changed = [], False
      for err in e.errors():
        name = err["loc"][0] if err["type"] == "extra_forbidden" and len(err["loc"]) == 1 else None
        close = difflib.get_close_matches(name, list(cls.model_fields), n=1, cutoff=0.75) if isinstance(name, str) else []
        if close:
          err = {**err, "type": PydanticCustomError(
              "extra_forbidden", "Extra inputs are not permitted; did you mean '{suggestion}'?", {"suggestion": close[0]})}
          changed = True
        errors.append(err)
      if not changed:
        raise
      raise ValidationError.from_exception_data(e.title, errors) from None


class Signals(_Fields):
  """Allocator signals from seed 003; each nudges one layer's remainder weight."""

  model_config = ConfigDict(extra="forbid", frozen=True)

  checklist_evidence_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
  expected_tool_calls: int = Field(default=0, ge=0)
  risk_weight: float = Field(default=0.0, ge=0.0, le=1.0)
  retrieval_hit_rate: float = Field(default=0.0, ge=0.0, le=1.0)
  similarity: float = Field(default=0.0, ge=0.0, le=1.0)
  freshness: float = Field(default=0.0, ge=0.0, le=1.0)
  unresolved_questions: int = Field(default=0, ge=0)
  dialogue_depth: int = Field(default=0, ge=0)


class Floors(_Fields):
  """Per-layer floors as a share of the window (seed 003 defaults)."""

  model_config = ConfigDict(extra="forbid", frozen=True)

  system: float = Field(default=0.06, ge=0.0, lt=1.0)
  task: float = Field(default=0.06, ge=0.0, lt=1.0)
  tools: float = Field(default=0.04, ge=0.0, lt=1.0)
  slack_min: float = Field(default=0.10, ge=0.0, lt=1.0)

  @model_validator(mode="after")
  def _below_window(self) -> "Floors":
    total = math.fsum((self.system, self.task, self.tools, self.slack_min))
    if total >= 1.0 - 1e-9:
      raise ValueError(
          f"floors sum to {total:.0%} of the window; they must leave a remainder"
          " (system + task + tools + slack_min < 100%)"
      )
    return self


class PackPolicy(_Fields):
  """The compiler's policy. Immutable; its hash is recorded in every manifest."""

  model_config = ConfigDict(extra="forbid", frozen=True)

  profile: TaskProfile = TaskProfile.GENERAL
  floors: Floors = Field(default_factory=Floors)
  signals: Signals = Field(default_factory=Signals)
  weight_overrides: Optional[tuple[float, float, float]] = None
  """Explicit (evidence, memory, conversation) weights; skips signal math."""
  overflow: OverflowPolicy = OverflowPolicy.LADDER
  tool_scoping: ToolScoping = ToolScoping.OFF
  quantum: int = Field(default=64, ge=1, le=QUANTUM_MAX)
  """Water-filling quantum in tokens (seed 001 §6.4.4). At most 4,096: a share below one
  quantum goes unallocated, and a huge quantum left the conversation no budget at all.
  Stored policies of earlier versions may hold more (see ``from_stored``)."""
  memory_top_k: int = Field(default=8, ge=0)
  recall_top_k: int = Field(default=8, ge=0)
  """Older turns (outside the tail) offered to MEMORY as recall candidates."""
  recent_turns: int = Field(default=4, ge=0)
  """Conversation groups the select stage treats as essential."""
  trim_low_water: float = Field(default=0.6, gt=0.0, le=1.0)
  """After a forced trim the tail is cut to this share of its budget, so the
  next trims are rare and the cached prefix survives most calls."""
  compress_min_tokens: int = Field(default=48, ge=1)
  """Items shorter than this are dropped rather than compressed."""
  calibration_margin: float = Field(default=0.05, ge=0.0, lt=0.5)
  """Extra safety on top of the learned tokenizer correction ratio."""

  @model_validator(mode="after")
  def _weights_valid(self) -> "PackPolicy":
    if self.weight_overrides is not None:
      if any(not math.isfinite(w) or w < 0 for w in self.weight_overrides):
        raise ValueError("weight_overrides must be finite and non-negative")
      if sum(self.weight_overrides) <= 0:
        raise ValueError("weight_overrides must not all be zero")
    return self

  def remainder_weights(self) -> dict[str, float]:
    """Seed 003's wE/wM/wC: profile base plus signal terms, normalised."""
    if self.weight_overrides is not None:
      e, m, c = self.weight_overrides
    else:
      e, m, c = PROFILE_WEIGHTS[self.profile]
      s = self.signals
      e += 0.3 * s.checklist_evidence_ratio + 0.05 * min(s.expected_tool_calls, 6) + 0.2 * s.risk_weight
      m += 0.15 * s.retrieval_hit_rate + 0.15 * s.similarity + 0.1 * s.freshness
      c += 0.05 * min(s.unresolved_questions, 6) + 0.02 * min(s.dialogue_depth, 15)
    total = e + m + c
    if math.isinf(total):  # finite overrides near float max: their sum overflows and every weight became 0
      top = max(e, m, c)
      e, m, c = e / top, m / top, c / top
      total = e + m + c
    return {"evidence": e / total, "memory": m / total, "conversation": c / total}

  def policy_hash(self) -> str:
    return digest(self.model_dump(mode="json"))

  @classmethod
  def from_stored(cls, data: Any, *, given: Collection[str] = ()) -> "PackPolicy":
    """A policy as a manifest stored it, for replay: a quantum above ``QUANTUM_MAX`` is kept.

    Earlier versions accepted any quantum >= 1 and the allocator still takes one, so the
    stored value rebuilds what that version computed (same hash); refusing it made a whole
    corpus unreplayable. Every other field, and a quantum named in ``given`` (an override
    given now), is validated as for a new policy.
    """
    q = data.get("quantum") if isinstance(data, dict) else None
    if "quantum" in given or type(q) is not int or q <= QUANTUM_MAX:
      return cls.model_validate(data)
    return cls.model_validate({**data, "quantum": QUANTUM_MAX}).model_copy(update={"quantum": q})

  @classmethod
  def preset(cls, name: Literal["quality_first", "cost_first"], **overrides) -> "PackPolicy":
    """Named presets from seed 003's task list; overrides win."""
    try:
      base = PRESETS[name]
    except KeyError:
      raise ValueError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}") from None
    merged = dict(base)
    for key, value in overrides.items():  # floors={"system": 0.09} changes that floor only
      merged[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return cls.model_validate(merged)


PRESETS: dict[str, dict] = {
    # Spend the window: generous floors at the top of the seed's ranges,
    # more recent turns and memory, rare trims.
    "quality_first": {
        "floors": {"system": 0.08, "task": 0.10, "tools": 0.06, "slack_min": 0.15},
        "memory_top_k": 12,
        "recent_turns": 6,
        "trim_low_water": 0.7,
    },
    # Keep prompts small: floors at the bottom of the ranges, fewer hits and
    # turns, deeper trims so caching amortises over more calls.
    "cost_first": {
        "floors": {"system": 0.06, "task": 0.06, "tools": 0.04, "slack_min": 0.10},
        "memory_top_k": 4,
        "recent_turns": 2,
        "trim_low_water": 0.5,
    },
}
