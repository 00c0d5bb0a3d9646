"""Candidate items: the unit the compiler selects, compresses, drops and renders.

An item is one piece of context that may or may not reach the model: a task
line, an evidence summary, a memory hit, or one conversation turn group. The
compiler never inspects ADK objects; structured content is carried as the
JSON form of ``google.genai.types.Part`` dicts.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Layer(str, Enum):
  """The pack's layers, in their fixed, cache-friendly order."""

  SYSTEM = "system"
  TASK = "task"
  TOOLS = "tools"
  EVIDENCE = "evidence"
  MEMORY = "memory"
  CONVERSATION = "conversation"


LAYER_ORDER: tuple[Layer, ...] = tuple(Layer)
FIXED_LAYERS: tuple[Layer, ...] = (Layer.SYSTEM, Layer.TASK, Layer.TOOLS)
ELASTIC_LAYERS: tuple[Layer, ...] = (Layer.EVIDENCE, Layer.MEMORY, Layer.CONVERSATION)
UNTRUSTED_LAYERS: tuple[Layer, ...] = (Layer.EVIDENCE, Layer.MEMORY)


class Trust(str, Enum):
  """Who vouches for an item; tool and user content is fenced as data."""

  SYSTEM = "system"
  DEVELOPER = "developer"
  USER = "user"
  TOOL = "tool"


MIN_TIMESTAMP = -62_135_596_800.0
"""0001-01-01T00:00:00Z: timestamps are rendered as calendar dates."""
MAX_TOKENS = 2**40
"""A bound on windows and output limits (a trillion tokens): past float's range the allocator's
arithmetic failed with a bare OverflowError; pydantic now names the field."""
MAX_TIMESTAMP = 253_402_300_799.0
"""9999-12-31T23:59:59Z."""


PLACEMENT = "placement"
"""``meta`` key of an in-flight item that the request carries before the payload
rather than after it (ADK's instruction contents): ``PLACED_FIRST`` ahead of the
conversation, ``PLACED_BEFORE_REQUEST`` between the kept conversation and the
payload. Such items are part of the cached prompt prefix."""
FINISHED_STEP = "finished_step"
"""Kind of an in-flight item the compiler may trim: a complete earlier step of the
current invocation (a long tool loop, a ``LoopAgent`` run). Every other in-flight
item is always sent."""
PLACED_FIRST = "first"
PLACED_BEFORE_REQUEST = "before_request"


class Provenance(BaseModel):
  """Where an item came from, so a dropped item can be found again."""

  model_config = ConfigDict(frozen=True, extra="forbid")

  source: Optional[str] = None
  """A URI (``artifact://…``, ``memory://…``) or an ADK event id."""
  timestamp: Optional[float] = Field(default=None, ge=MIN_TIMESTAMP, le=MAX_TIMESTAMP, allow_inf_nan=False)
  """Seconds since the epoch, when known."""
  author: Optional[str] = None


class Item(BaseModel):
  """One candidate for the pack.

  ``text`` holds the renderable text; ``parts`` holds structured content
  (genai ``Part`` JSON dicts) for conversation turns. ``tokens`` is filled in
  by the compiler with the real tokenizer when left ``None``.
  """

  model_config = ConfigDict(extra="forbid")

  id: str = Field(min_length=1)
  layer: Layer
  text: str = ""
  parts: Optional[list[dict[str, Any]]] = None
  role: Optional[Literal["user", "model"]] = None
  """For conversation items: the genai role. Another name ("assistant", "tool") is refused:
  the tail's cut must know which turns are the user's, as providers require one first."""
  tokens: Optional[int] = Field(default=None, ge=0)
  priority: int = Field(default=0, ge=-2**53, le=2**53)  # (a 5,000-digit int failed deep in the digest)
  """Higher first; ties are broken by score, then by input order."""
  score: float = 0.0
  provenance: Provenance = Field(default_factory=Provenance)
  trust: Trust = Trust.TOOL
  pinned: bool = False
  """A pinned item is never compressed or dropped (pending calls, confirmations)."""
  kind: str = ""
  """A layer-specific role, e.g. ``goal``, ``step``, ``acceptance``, ``constraint``,
  ``tool``, ``checklist_evidence``, ``working``, ``summary``."""
  meta: dict[str, Any] = Field(default_factory=dict)
  """Small JSON-able extras recorded in the manifest (score components, etc.)."""

  @field_validator("score")
  @classmethod
  def _finite_score(cls, value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
      raise ValueError("score must be a finite number")
    return value

  def pointer(self) -> str:
    """What a dropped item leaves behind so it can be rehydrated."""
    return self.provenance.source or self.id
