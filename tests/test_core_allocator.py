"""Allocator math: floors, reserve, water-filling with caps, surplus flow and quanta."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aether_frame.core.allocator import ContextBudgetExhausted, allocate, reserve_for, water_fill
from aether_frame.core.compiler import CallInputs, CompileInput, compile_pack
from aether_frame.core.items import Item, Layer
from aether_frame.core.policy import PackPolicy
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()
W = {"evidence": 0.35, "memory": 0.25, "conversation": 0.40}
BIG = 10**6


def _alloc(policy=None, *, window=10_000, reserve=1_000, fixed=(100, 200, 0), pinned=None, demands=(BIG, BIG, BIG), scale=1.0):
  return allocate(
      policy or PackPolicy(), window=window, reserve=reserve,
      fixed_needs=dict(zip((Layer.SYSTEM, Layer.TASK, Layer.TOOLS), fixed)),
      pinned=pinned or {}, demands=dict(zip((Layer.EVIDENCE, Layer.MEMORY, Layer.CONVERSATION), demands)),
      token_scale=scale,
  )


# ---------------------------------------------------------------- water_fill
def test_water_fill_splits_by_weight_in_whole_quanta():
  # 15 quanta; lower quotas 5/3/6 -> 320/192/384. The 15th goes by D'Hondt to
  # memory (.25/4 beats .35/6 and .40/7), leaving 40 < 64 unallocated.
  got = water_fill(1000, {"evidence": BIG, "memory": BIG, "conversation": BIG}, W, 64)
  assert got == {"evidence": 320, "memory": 256, "conversation": 384}


def test_water_fill_caps_a_small_layer_and_its_surplus_flows_to_the_others():
  # evidence needs only 100 of its 350 share; the other 900 (14 quanta) split .25:.40
  # (lower quotas 5 / 8 -> 320 / 512), and the 14th goes to conversation (.40/9 > .25/6).
  got = water_fill(1000, {"evidence": 100, "memory": BIG, "conversation": BIG}, W, 64)
  assert got == {"evidence": 100, "memory": 320, "conversation": 576}


def test_water_fill_caps_cascade():
  # memory (300) is under its share only after evidence's surplus arrives.
  got = water_fill(1000, {"evidence": 100, "memory": 300, "conversation": BIG}, W, 64)
  assert got == {"evidence": 100, "memory": 300, "conversation": 576}


def test_water_fill_everything_fits():
  assert water_fill(1000, {"evidence": 10, "memory": 0, "conversation": 30}, W, 64) == {"evidence": 10, "memory": 0, "conversation": 30}


def test_water_fill_zero_pool_and_negative_pool():
  assert water_fill(0, {"evidence": 5, "memory": 5, "conversation": 5}, W, 64) == {"evidence": 0, "memory": 0, "conversation": 0}
  assert water_fill(-50, {"evidence": 5, "memory": 5, "conversation": 5}, W, 64) == {"evidence": 0, "memory": 0, "conversation": 0}


def test_water_fill_with_a_zero_weight_layer_does_not_crash():
  """weight_overrides may contain zeros; surplus left after the weighted layers cap must not divide by zero."""
  got = water_fill(1000, {"evidence": 100, "memory": 500, "conversation": 0}, {"evidence": 1.0, "memory": 0.0, "conversation": 0.0}, 64)
  # The weighted layer is met; the zero-weight one takes what it cannot use (its whole 500).
  assert got == {"evidence": 100, "memory": 500, "conversation": 0}


def test_compile_with_zero_weight_override_does_not_crash():
  """Same defect through the compiler: PackPolicy(weight_overrides=(1, 0, 0)) is valid config."""
  items = [
      Item(id="system:i", layer=Layer.SYSTEM, text="You are terse."),
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Summarise."),
      Item(id="e1", layer=Layer.EVIDENCE, text="Short evidence.", provenance={"source": "artifact://e1"}),
      Item(id="m1", layer=Layer.MEMORY, text="Long memory text. " * 200),
  ]
  pack = compile_pack(CompileInput(policy=PackPolicy(weight_overrides=(1, 0, 0)), call=CallInputs(items=items, window=8192)), COUNTER)
  assert "artifact://e1" in pack.payload
  assert pack.manifest["layers"]["memory"]["budget"] <= pack.manifest["layers"]["memory"]["requested"]


_weights = st.tuples(*[st.just(0.0) | st.floats(0.01, 1.0)] * 3).filter(lambda t: sum(t) > 0).map(lambda t: dict(zip(W, t)))
_demands = st.tuples(*[st.integers(0, 5000)] * 3).map(lambda t: dict(zip(W, t)))


@given(pool=st.integers(-100, 12_000), demands=_demands, weights=_weights, quantum=st.sampled_from([1, 7, 64, 128]))
def test_water_fill_invariants(pool, demands, weights, quantum):
  got = water_fill(pool, demands, weights, quantum)
  assert set(got) == set(demands)
  for k, v in got.items():
    assert 0 <= v <= demands[k]
    # Budgets move in whole quanta unless capped at the layer's demand.
    assert v == demands[k] or v % quantum == 0, (k, v)
  left = max(pool, 0) - sum(got.values())
  assert left >= 0
  # Surplus flows on: either every demand is met or less than a quantum is left.
  assert all(got[k] == demands[k] for k in demands) or left < quantum


@given(pool=st.integers(0, 30_000), more=st.integers(1, 2_000), demands=_demands, weights=_weights,
       quantum=st.sampled_from([1, 7, 64, 128]))
def test_water_fill_a_larger_pool_never_shrinks_a_weighted_layer(pool, more, demands, weights, quantum):
  """No Alabama paradox: with largest-remainder rounding, pool 10,561 gave memory 2,752
  and pool 10,600 gave it 2,688. A longer request or a larger window must not shrink the
  conversation budget (that cuts the cached tail). Zero-weight layers are exempt: they
  get only the crumbs below a quantum that the weighted layers cannot take."""
  small = water_fill(pool, demands, weights, quantum)
  large = water_fill(pool + more, demands, weights, quantum)
  for k in demands:
    if weights[k] > 0:
      assert large[k] >= small[k], (k, small, large)


def test_water_fill_no_alabama_paradox_on_a_known_case():
  demands = {"evidence": 0, "memory": 16321, "conversation": 14260}
  weights = {"evidence": 0.0, "memory": 0.33, "conversation": 0.95}
  small, large = water_fill(10_561, demands, weights, 64), water_fill(10_600, demands, weights, 64)
  assert large["memory"] >= small["memory"] and large["conversation"] >= small["conversation"]


@given(pool=st.integers(1000, 12_000), weights=st.tuples(*[st.floats(0.01, 1.0)] * 3).map(lambda t: dict(zip(W, t))))
def test_water_fill_heavier_weight_never_gets_less_when_both_are_unbounded(pool, weights):
  got = water_fill(pool, {k: BIG for k in W}, weights, 64)
  for a in W:
    for b in W:
      if weights[a] > weights[b]:
        assert got[a] >= got[b] - 64


# ------------------------------------------------------------------ allocate
def test_fixed_tiers_get_exactly_their_need_and_unused_floor_flows_to_the_pool():
  a = _alloc(window=10_000, reserve=1_000, fixed=(100, 200, 0))
  assert a.floors == {"system": 600, "task": 600, "tools": 400, "slack": 1_000}
  assert (a.budgets["system"], a.budgets["task"], a.budgets["tools"]) == (100, 200, 0)
  assert a.usable == 9_000
  assert a.pool == 9_000 - 300  # the unused 1,300 of fixed floors are elastic now
  elastic = a.budgets["evidence"] + a.budgets["memory"] + a.budgets["conversation"]
  assert elastic + a.unallocated == a.pool
  assert 0 <= a.unallocated < 64
  for layer in ("evidence", "memory", "conversation"):
    assert a.budgets[layer] % 64 == 0


def test_fixed_need_above_its_floor_is_still_granted():
  a = _alloc(window=10_000, reserve=1_000, fixed=(2_000, 100, 0))
  assert a.budgets["system"] == 2_000 > a.floors["system"]
  assert a.pool == 9_000 - 2_100


def test_pinned_elastic_tokens_come_off_the_pool_and_onto_the_layer():
  a = _alloc(window=10_000, reserve=1_000, fixed=(100, 200, 0), pinned={Layer.CONVERSATION: 500}, demands=(0, 0, 100))
  assert a.pool == 9_000 - 300 - 500
  assert a.budgets["conversation"] == 600
  assert a.requested["conversation"] == 600


def test_token_scale_shrinks_the_usable_window():
  a = _alloc(window=10_000, reserve=1_000, scale=1.25)
  assert a.usable == math.floor(9_000 / 1.25) == 7_200


def test_remainder_weights_shape_the_split():
  research = _alloc(PackPolicy(profile="research"))
  general = _alloc(PackPolicy())
  assert research.budgets["evidence"] > general.budgets["evidence"]
  assert research.budgets["conversation"] < general.budgets["conversation"]
  assert research.weights["evidence"] == pytest.approx(0.60 / 0.95)


def test_exhausted_names_every_layer_need_and_the_reserve():
  with pytest.raises(ContextBudgetExhausted) as err:
    _alloc(window=1_000, reserve=200, fixed=(500, 300, 100), pinned={Layer.CONVERSATION: 40})
  e = err.value
  assert e.needs == {"system": 500, "task": 300, "tools": 100, "conversation_pinned": 40, "reserve": 200}
  assert (e.window, e.usable) == (1_000, 800)
  for fragment in ("system=500", "task=300", "tools=100", "conversation_pinned=40", "reserve=200", "window=1000"):
    assert fragment in str(e)


def test_exhausted_when_the_reserve_alone_fills_the_window():
  with pytest.raises(ContextBudgetExhausted) as err:
    _alloc(window=1_000, reserve=1_000, fixed=(0, 0, 0))
  assert err.value.needs["reserve"] == 1_000


def test_non_positive_window_is_a_value_error():
  with pytest.raises(ValueError, match="window"):
    _alloc(window=0)


def test_reserve_is_max_output_tokens_or_slack_floor():
  p = PackPolicy()
  assert reserve_for(p, 10_001, None) == math.ceil(0.10 * 10_001)
  assert reserve_for(p, 10_000, 777) == 777
  assert reserve_for(p, 10_000, 0) == 0
  with pytest.raises(ValueError, match="max_output_tokens"):
    reserve_for(p, 10_000, -1)


# ------------------------------------------------- through the compiler
def _items(evidence: int, memory: int) -> list[Item]:
  out = [
      Item(id="system:i", layer=Layer.SYSTEM, text="You are a careful analyst."),
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Compare the vendors."),
  ]
  out += [Item(id=f"e{i}", layer=Layer.EVIDENCE, text=f"Evidence {i}: " + "vendor pricing detail. " * 20,
               provenance={"source": f"artifact://e{i}"}, score=1 - i / 100) for i in range(evidence)]
  out += [Item(id=f"m{i}", layer=Layer.MEMORY, text=f"Memory {i}: " + "user preference note. " * 15, score=1 - i / 100)
          for i in range(memory)]
  return out


def test_compiled_layer_budgets_are_quanta_or_demand():
  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
                  parts=[{"text": f"turn {i} " + "words " * 60}]) for i in range(40)]
  pack = compile_pack(CompileInput(policy=PackPolicy(memory_top_k=20), history=history,
                                   call=CallInputs(items=_items(12, 12), window=6000)), COUNTER)
  layers = pack.manifest["layers"]
  for name in ("evidence", "memory", "conversation"):
    lay = layers[name]
    assert lay["budget"] <= lay["requested"]
    assert lay["budget"] == lay["requested"] or lay["budget"] % 64 == 0, (name, lay)
  assert layers["slack"]["budget"] == 600
  shares = sum(layers[n]["budget"] - layers[n]["received"] for n in ("system", "task", "tools", "evidence", "memory", "conversation"))
  assert shares + pack.manifest["totals"]["unallocated"] == pack.manifest["usable"]
  assert pack.manifest["totals"]["tokens"] <= pack.manifest["usable"]


def test_compile_exhausted_names_the_layer_that_overflows():
  items = _items(0, 0) + [Item(id="system:big", layer=Layer.SYSTEM, text="Rule. " * 3000)]
  with pytest.raises(ContextBudgetExhausted) as err:
    compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=2048)), COUNTER)
  assert err.value.needs["system"] > 2048
  assert {"system", "task", "tools", "reserve"} <= set(err.value.needs)


def test_minimal_request_is_not_refused_when_it_fits():
  """A request with no elastic candidates fits whenever its real size + reserve fits.

  The fixed-tier estimate must not charge fences and BUDGET pointers that a
  pack with no evidence, memory or history never renders.
  """
  items = _items(0, 0)
  roomy = compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=100_000, max_output_tokens=0)), COUNTER)
  window = roomy.tokens + 40  # slack for the per-pack fence hash
  pack = compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=window, max_output_tokens=0)), COUNTER)
  assert pack.tokens <= window
