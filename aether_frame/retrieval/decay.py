"""Relevance decay models (seed 001 §6.8.2): how much an item's age discounts it.

Each returns a factor in [0, 1] for an age (in the config's unit, days by
default), so freshness is ``r(t) / r(t0)``:
- exponential: ``exp(-gamma * age)``;
- step with reactivation: 1 if referenced within the last ``k`` units, else ``delta``;
- sigmoid: ``1 / (1 + exp(kappa * (age - tau)))``, ``tau`` being the half-life.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from .weights import DecayModel

SECONDS_PER_UNIT = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}


def exponential(age: float, gamma: float) -> float:
  return math.exp(-gamma * max(0.0, age))


def step(age_since_reference: float, k: float, delta: float) -> float:
  return 1.0 if age_since_reference <= k else delta


def sigmoid(age: float, kappa: float, tau: float) -> float:
  x = kappa * (max(0.0, age) - tau)
  if x > 700:  # exp overflow: relevance is zero to double precision
    return 0.0
  return 1.0 / (1.0 + math.exp(x))


def freshness(
    model: DecayModel,
    *,
    timestamp: Optional[float],
    now: Optional[float],
    last_access: Optional[float] = None,
) -> float:
  """Decay factor for an item created at ``timestamp`` (and last used at ``last_access``).

  Unknown times give a neutral 0.5: an item without a date is neither fresh nor stale.
  Future timestamps count as age 0.
  """
  if timestamp is None or now is None:
    return 0.5
  unit = SECONDS_PER_UNIT[model.unit]
  age = max(0.0, (now - timestamp) / unit)
  if model.kind == "exponential":
    return exponential(age, model.gamma)
  if model.kind == "sigmoid":
    return sigmoid(age, model.kappa, model.tau)
  ref = last_access if last_access is not None else timestamp
  return step(max(0.0, (now - ref) / unit), model.k, model.delta)


def freshness_of(model: DecayModel, now: Optional[float]) -> Callable[[Optional[float], Optional[float]], float]:
  """``freshness`` for one ``now``, as a function of (timestamp, last_access).

  A ranking call scores every item against the same ``now``: resolving the
  model once keeps the per-item cost to the arithmetic, with the same result.
  """
  if now is None or model.kind != "exponential":
    return lambda timestamp, last_access=None: freshness(model, timestamp=timestamp, now=now, last_access=last_access)
  unit, gamma, exp = SECONDS_PER_UNIT[model.unit], model.gamma, math.exp

  def fresh(timestamp: Optional[float], last_access: Optional[float] = None) -> float:
    if timestamp is None:
      return 0.5
    age = max(0.0, (now - timestamp) / unit)
    return exp(-gamma * max(0.0, age))

  return fresh
