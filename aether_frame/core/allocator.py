"""Window-proportional budget allocation (seed 003; seed 001 Algorithm 6.2).

Fixed tiers (system, task, tools) get exactly what they need: they are never
truncated, and any floor they leave unused flows to the elastic pool. The
output reserve comes off the top. The elastic remainder is water-filled over
evidence, memory and conversation by weight: a layer that needs less than its
share is capped at its demand and the surplus flows to the others. Shares are
handed out in whole quanta (64 tokens by default) so budgets move in steps,
not by a token per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .errors import AetherFrameError
from .items import ELASTIC_LAYERS, FIXED_LAYERS, Layer
from .policy import PackPolicy


class ContextBudgetExhausted(AetherFrameError):
  """The fixed tiers plus the output reserve do not fit the window (Fail-Loud).

  ``needs`` maps each layer (and ``reserve``) to the tokens it requires.
  """

  def __init__(self, message: str, *, needs: Mapping[str, int], usable: int, window: int):
    self.needs = dict(needs)
    self.usable = usable
    self.window = window
    detail = ", ".join(f"{k}={v}" for k, v in self.needs.items())
    super().__init__(f"{message} (window={window}, usable={usable}; needs: {detail})")


@dataclass
class Allocation:
  window: int
  reserve: int
  usable: int
  """Tokens (in our tokenizer's units) available to the request itself."""
  floors: dict[str, int]
  weights: dict[str, float]
  budgets: dict[str, int]
  requested: dict[str, int]
  pool: int
  unallocated: int = 0
  notes: list[str] = field(default_factory=list)
  received: dict[str, int] = field(default_factory=dict)
  """Tokens other layers left unused that a payload layer's budget took on top of its share:
  the budgets then add up to more than ``usable``, the shares (budget - received) do not."""


def reserve_for(policy: PackPolicy, window: int, max_output_tokens: int | None) -> int:
  """The output reserve: the request's ``max_output_tokens`` if set, else slack_min."""
  if max_output_tokens is not None:
    if max_output_tokens < 0:
      raise ValueError(f"max_output_tokens must be >= 0, got {max_output_tokens}")
    return max_output_tokens
  return math.ceil(policy.floors.slack_min * window)


def water_fill(pool: int, demands: Mapping[str, int], weights: Mapping[str, float], quantum: int) -> dict[str, int]:
  """Weighted proportional split capped by demand; surplus flows on; whole quanta.

  Closed form of the quantum-by-quantum loop: repeatedly give every uncapped
  layer its weighted share of what is left, cap those whose demand is below
  it, and redistribute. Uncapped layers get whole quanta by the D'Hondt rule
  (ties in layer order). Zero-weight layers only receive what the weighted
  layers cannot use.
  """
  alloc = {k: 0 for k in demands}
  remaining = max(pool, 0)
  weighted = [k for k in demands if demands[k] > 0 and weights.get(k, 0.0) > 0]
  remaining = _fill(alloc, weighted, remaining, demands, weights, quantum)
  zero = [k for k in demands if demands[k] > alloc[k] and weights.get(k, 0.0) <= 0]
  # Not ``remaining >= quantum``: a demand below one quantum is capped (met
  # exactly) like a weighted one, so it must not be left out when it fits.
  if zero and remaining > 0:
    _fill(alloc, zero, remaining, demands, {k: 1.0 for k in zero}, quantum)
  return alloc


def _fill(alloc, open_layers, remaining, demands, weights, quantum) -> int:
  order = list(demands)
  open_layers = list(open_layers)
  while open_layers:
    total_w = sum(weights[k] for k in open_layers)
    if sum(demands[k] for k in open_layers) <= remaining:
      # All of it fits: cap every layer. The float shares below can put an exact
      # fit a hair under its demand (63 * 0.35 / 0.35 < 63) and cut it to whole quanta.
      capped = list(open_layers)
    else:
      capped = [k for k in open_layers if demands[k] <= remaining * weights[k] / total_w]
    if not capped:
      break
    for k in capped:
      alloc[k] = demands[k]
      remaining -= demands[k]
      open_layers.remove(k)
  if open_layers and remaining > 0:
    # Whole quanta by the D'Hondt rule: each next quantum goes to the layer with
    # the highest weight / (quanta it holds + 1). Unlike largest remainders, a
    # larger pool never takes a quantum away from a layer (no Alabama paradox),
    # so a longer request or a bigger window cannot shrink the conversation
    # budget and cut the cached tail. Every layer first gets its lower quota.
    total_w = sum(weights[k] for k in open_layers)
    seats = remaining // quantum
    held = {k: min(demands[k] // quantum, int(seats * weights[k] / total_w)) for k in open_layers}
    for k in open_layers:
      alloc[k] = held[k] * quantum
    left = remaining - sum(alloc[k] for k in open_layers)
    while left >= quantum:
      wanting = [k for k in open_layers if alloc[k] < demands[k]]
      if not wanting:
        break
      k = max(wanting, key=lambda k: (weights[k] / (held[k] + 1), -order.index(k)))
      give = min(quantum, demands[k] - alloc[k])
      alloc[k] += give
      held[k] += 1
      left -= give
    remaining = left
  return remaining


def allocate(
    policy: PackPolicy,
    *,
    window: int,
    reserve: int,
    fixed_needs: Mapping[Layer, int],
    pinned: Mapping[Layer, int],
    demands: Mapping[Layer, int],
    token_scale: float = 1.0,
) -> Allocation:
  """Budgets per layer; raises ``ContextBudgetExhausted`` when fixed + reserve overflow."""
  if window <= 0:
    raise ValueError(f"window must be positive, got {window}")
  usable = math.floor((window - reserve) / token_scale) if window > reserve else 0
  floors = {
      "system": math.floor(policy.floors.system * window),
      "task": math.floor(policy.floors.task * window),
      "tools": math.floor(policy.floors.tools * window),
      "slack": reserve,
  }
  fixed_total = sum(fixed_needs.get(layer, 0) for layer in FIXED_LAYERS)
  pinned_total = sum(pinned.get(layer, 0) for layer in ELASTIC_LAYERS)
  pool = usable - fixed_total - pinned_total
  if pool < 0 or window <= reserve:
    needs = {layer.value: fixed_needs.get(layer, 0) for layer in FIXED_LAYERS}
    for layer in ELASTIC_LAYERS:
      if pinned.get(layer, 0):
        needs[f"{layer.value}_pinned"] = pinned[layer]
    needs["reserve"] = reserve
    raise ContextBudgetExhausted(
        "fixed tiers plus the output reserve exceed the window", needs=needs, usable=usable, window=window
    )
  weights = policy.remainder_weights()
  elastic = water_fill(
      pool,
      {layer.value: max(demands.get(layer, 0), 0) for layer in ELASTIC_LAYERS},
      weights,
      policy.quantum,
  )
  budgets = {layer.value: fixed_needs.get(layer, 0) for layer in FIXED_LAYERS}
  for layer in ELASTIC_LAYERS:
    budgets[layer.value] = elastic[layer.value] + pinned.get(layer, 0)
  requested = {layer.value: fixed_needs.get(layer, 0) for layer in FIXED_LAYERS}
  for layer in ELASTIC_LAYERS:
    requested[layer.value] = demands.get(layer, 0) + pinned.get(layer, 0)
  return Allocation(
      window=window,
      reserve=reserve,
      usable=usable,
      floors=floors,
      weights=weights,
      budgets=budgets,
      requested=requested,
      pool=pool,
      unallocated=pool - sum(elastic.values()),
  )
