"""``RetrievalWeights``: every knob of the hybrid ranker, validated, immutable, hashable.

Like ``PackPolicy`` it fails loudly at construction, and its digest can be
recorded in a manifest so a ranking can be replayed. Defaults were set on
LoCoMo dev conversations 26, 30 and 41 only (see ``docs/retrieval.md``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aether_frame.core.canonical import digest

MODES: tuple[str, ...] = ("general", "decision", "project", "people", "workflow", "conversation")
SIGNALS: tuple[str, ...] = (
    "similarity",
    "text",
    "freshness",
    "access",
    "salience",
    "continuity",
    "adjacency",
    "temporal",
    "author",
)


class DecayModel(BaseModel):
  """Which seed-001 §6.8.2 decay turns an item's age into freshness."""

  model_config = ConfigDict(extra="forbid", frozen=True)

  kind: Literal["exponential", "step", "sigmoid"] = "exponential"
  unit: Literal["seconds", "minutes", "hours", "days"] = "days"
  gamma: float = Field(default=0.05, ge=0.0)
  """Exponential rate per unit (seed: ~0.3 for tool output, ~0.05 for user corrections)."""
  k: float = Field(default=7.0, ge=0.0)
  """Step: units since the last reference that keep full relevance."""
  delta: float = Field(default=0.1, ge=0.0, le=1.0)
  """Step: the factor applied after ``k`` units without a reference."""
  kappa: float = Field(default=0.5, gt=0.0)
  tau: float = Field(default=14.0, ge=0.0)
  """Sigmoid: steepness and half-life (units)."""


class ModeProfile(BaseModel):
  """How one recall mode reshapes the base weights.

  ``multipliers`` scale the base signal weights; items whose ``meta["type"]``
  or ``kind`` is in ``boost_kinds`` get ``boost`` added to their salience.
  """

  model_config = ConfigDict(extra="forbid", frozen=True)

  similarity: float = Field(default=1.0, ge=0.0)
  text: float = Field(default=1.0, ge=0.0)
  freshness: float = Field(default=1.0, ge=0.0)
  access: float = Field(default=1.0, ge=0.0)
  salience: float = Field(default=1.0, ge=0.0)
  continuity: float = Field(default=1.0, ge=0.0)
  adjacency: float = Field(default=1.0, ge=0.0)
  temporal: float = Field(default=1.0, ge=0.0)
  author: float = Field(default=1.0, ge=0.0)
  boost_kinds: tuple[str, ...] = ()
  boost: float = Field(default=0.0, ge=0.0, le=1.0)


def _default_modes() -> "ModeProfiles":
  return ModeProfiles()


class ModeProfiles(BaseModel):
  """One profile per seed-002 recall mode."""

  model_config = ConfigDict(extra="forbid", frozen=True)

  general: ModeProfile = Field(default_factory=ModeProfile)
  decision: ModeProfile = Field(
      default_factory=lambda: ModeProfile(
          salience=2.0, boost_kinds=("decision", "lesson", "rule"), boost=0.6
      )
  )
  project: ModeProfile = Field(
      default_factory=lambda: ModeProfile(
          salience=1.5,
          freshness=1.5,
          boost_kinds=("goal", "workflow", "dependency", "project", "evidence", "working"),
          boost=0.4,
      )
  )
  people: ModeProfile = Field(
      default_factory=lambda: ModeProfile(
          salience=1.5, boost_kinds=("person", "ownership", "relationship"), boost=0.6
      )
  )
  workflow: ModeProfile = Field(
      default_factory=lambda: ModeProfile(
          salience=2.0, boost_kinds=("procedure", "rule", "howto", "workflow"), boost=0.6
      )
  )
  conversation: ModeProfile = Field(
      default_factory=lambda: ModeProfile(continuity=20.0, freshness=10.0, adjacency=1.5)
  )

  def get(self, mode: str) -> ModeProfile:
    return getattr(self, mode)


class RetrievalWeights(BaseModel):
  """Signal weights and ranking parameters of ``HybridRanker``.

  ``relevance`` is the mix of ``text`` (BM25) and ``similarity`` (vectors) in
  the ratio of their weights, so it lies in [0, 1] and counts with weight 1;
  ``base = relevance + sum(weight * signal)`` over the other signals (each in
  [0, 1]), and the final score is
  ``mmr_lambda * base - (1 - mmr_lambda) * redundancy``.
  """

  model_config = ConfigDict(extra="forbid", frozen=True)

  # Signal weights (seed 002's multi-signal reranker, plus adjacency and temporal).
  similarity: float = Field(default=0.5, ge=0.0)
  """Vector cosine (needs an embedder; its weight is ignored without one)."""
  text: float = Field(default=1.0, ge=0.0)
  """BM25, normalised by the call's best match."""
  freshness: float = Field(default=0.01, ge=0.0)
  access: float = Field(default=0.05, ge=0.0)
  salience: float = Field(default=0.05, ge=0.0)
  continuity: float = Field(default=0.01, ge=0.0)
  adjacency: float = Field(default=0.7, ge=0.0)
  """Neighbours of a strong hit often hold the rest of the answer."""
  temporal: float = Field(default=0.2, ge=0.0)
  """Items inside a date range named by the query."""
  time_cue: float = Field(default=0.1, ge=0.0)
  """For "when ..." questions without a range: items that state a time."""
  author: float = Field(default=0.3, ge=0.0)
  """Items written by a person the query names (people questions are mostly about what they said)."""

  fusion: Literal["weighted", "rrf"] = "weighted"
  rrf_k: int = Field(default=60, ge=1)

  bm25_k1: float = Field(default=1.2, ge=0.0)
  bm25_b: float = Field(default=0.75, ge=0.0, le=1.0)

  prf_weight: float = Field(default=0.3, ge=0.0)
  """Pseudo-relevance feedback: weight of expansion terms from the best lexical hits (0 = off)."""
  prf_docs: int = Field(default=3, ge=1)
  prf_terms: int = Field(default=5, ge=1)

  adjacency_window: int = Field(default=2, ge=0)
  adjacency_decay: float = Field(default=0.7, ge=0.0, le=1.0)
  """A neighbour ``d`` turns away passes on ``decay ** (d - 1)`` of its relevance."""
  adjacency_max_gap_s: float = Field(default=6 * 3600.0, ge=0.0)
  """Turns further apart in time than this are not neighbours (a session break)."""
  continuity_turns: float = Field(default=20.0, gt=0.0)
  """Continuity decays by e per this many turns back from the newest."""

  mmr_lambda: float = Field(default=0.5, ge=0.0, le=1.0)
  """Relevance vs. novelty; with the threshold below, only near-duplicates pay (an exact
  duplicate scores <= 0), so a low lambda costs related-but-distinct items nothing."""
  mmr_threshold: float = Field(default=0.6, ge=0.0, lt=1.0)
  """Term-set Jaccard below which two items are not redundant at all."""
  mmr_vector_threshold: float = Field(default=0.92, ge=0.0, lt=1.0)
  """Embedding cosine below which two items are not redundant (with an embedder)."""
  mmr_pool: int = Field(default=150, ge=1)
  """Only the best ``mmr_pool`` items are diversified (MMR is quadratic)."""

  temporal_margin_days: float = Field(default=3.0, ge=0.0)
  """Items this close outside a query's range get partial temporal credit."""

  decay: DecayModel = Field(default_factory=DecayModel)
  modes: ModeProfiles = Field(default_factory=_default_modes)

  @model_validator(mode="after")
  def _has_relevance(self) -> "RetrievalWeights":
    if self.text <= 0.0 and self.similarity <= 0.0:
      raise ValueError("at least one of text or similarity must have a positive weight")
    return self

  def for_mode(self, mode: str) -> dict[str, float]:
    """The effective signal weights under ``mode``."""
    profile = self.modes.get(mode)
    return {s: getattr(self, s) * getattr(profile, s) for s in SIGNALS}

  def fingerprint(self) -> str:
    return digest(self.model_dump(mode="json"))
