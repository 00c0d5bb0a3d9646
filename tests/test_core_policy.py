"""PackPolicy validation: configuration errors fail at construction, naming the field."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from aether_frame.core.canonical import digest
from aether_frame.core.policy import Floors, OverflowPolicy, PackPolicy, TaskProfile, ToolScoping


def _locs(err: ValidationError) -> list[tuple]:
  return [tuple(e["loc"]) for e in err.errors()]


def test_defaults_are_seed_003_values():
  p = PackPolicy()
  assert (p.floors.system, p.floors.task, p.floors.tools, p.floors.slack_min) == (0.06, 0.06, 0.04, 0.10)
  assert p.quantum == 64
  assert p.overflow is OverflowPolicy.LADDER and p.tool_scoping is ToolScoping.OFF
  assert sum(p.remainder_weights().values()) == pytest.approx(1.0)


@pytest.mark.parametrize("floors", [
    {"system": 0.5, "task": 0.3, "tools": 0.1, "slack_min": 0.1},
    {"system": 0.25, "task": 0.25, "tools": 0.25, "slack_min": 0.25},
    {"system": 0.6, "task": 0.3, "tools": 0.2, "slack_min": 0.1},
    # Decimal 100% whose float sum rounds to 0.9999999999999999:
    {"system": 0.7, "task": 0.1, "tools": 0.1, "slack_min": 0.1},
])
def test_floors_summing_to_100_percent_or_more_are_rejected_naming_floors(floors):
  with pytest.raises(ValidationError) as err:
    PackPolicy(floors=floors)
  assert ("floors",) in _locs(err.value)
  assert "floors sum to" in str(err.value)


def test_floors_just_below_100_percent_are_accepted():
  f = Floors(system=0.3, task=0.3, tools=0.2, slack_min=0.19)
  assert f.slack_min == 0.19


@pytest.mark.parametrize("field", ["system", "task", "tools", "slack_min"])
def test_negative_floor_is_rejected_naming_the_field(field):
  with pytest.raises(ValidationError) as err:
    PackPolicy(floors={field: -0.01})
  assert ("floors", field) in _locs(err.value)


@pytest.mark.parametrize("kw, loc", [
    ({"quantum": 0}, ("quantum",)),
    ({"quantum": 100_000}, ("quantum",)),  # would leave the conversation no budget at all
    ({"memory_top_k": -1}, ("memory_top_k",)),
    ({"recent_turns": -3}, ("recent_turns",)),
    ({"trim_low_water": 0.0}, ("trim_low_water",)),
    ({"calibration_margin": -0.1}, ("calibration_margin",)),
    ({"signals": {"expected_tool_calls": -1}}, ("signals", "expected_tool_calls")),
    ({"signals": {"risk_weight": 1.5}}, ("signals", "risk_weight")),
    ({"floors": {"system": 1.0}}, ("floors", "system")),
])
def test_out_of_range_values_are_rejected_naming_the_field(kw, loc):
  with pytest.raises(ValidationError) as err:
    PackPolicy(**kw)
  assert loc in _locs(err.value)


def test_a_stored_policy_keeps_a_quantum_an_earlier_version_accepted():
  """Versions before the 4,096 limit stored larger quanta: replay loads them as stored (same
  hash, so the rebuild is that version's allocation), while a quantum given now is held to it."""
  stored = PackPolicy().model_copy(update={"quantum": 8192}).model_dump(mode="json")
  p = PackPolicy.from_stored(stored)
  assert p.quantum == 8192 and p.model_dump(mode="json") == stored
  assert p.policy_hash() == digest(stored)
  assert PackPolicy.from_stored({**stored, "quantum": 32}) == PackPolicy(quantum=32)
  with pytest.raises(ValidationError) as err:
    PackPolicy(quantum=8192)
  assert _locs(err.value) == [("quantum",)]
  with pytest.raises(ValidationError) as err:
    PackPolicy.from_stored(stored, given=("quantum",))  # an override: today's rules
  assert _locs(err.value) == [("quantum",)]
  for bad, loc in (({"quantum": 0}, ("quantum",)), ({"quantum": -8192}, ("quantum",)),
                   ({"memory_top_k": -1}, ("memory_top_k",))):  # never valid: refused as always
    with pytest.raises(ValidationError) as err:
      PackPolicy.from_stored({**stored, **bad})
    assert loc in _locs(err.value), bad


def test_negative_weight_override_is_rejected():
  with pytest.raises(ValidationError) as err:
    PackPolicy(weight_overrides=(0.5, -0.1, 0.6))
  assert "weight_overrides" in str(err.value)


def test_all_zero_weight_override_is_rejected():
  with pytest.raises(ValidationError, match="weight_overrides"):
    PackPolicy(weight_overrides=(0, 0, 0))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_weight_override_is_rejected(bad):
  """NaN/inf weights would turn every budget into NaN; they must fail at construction."""
  with pytest.raises(ValidationError) as err:
    PackPolicy(weight_overrides=(bad, 1.0, 1.0))
  assert "weight_overrides" in str(err.value)


def test_unknown_profile_is_rejected_naming_profile():
  with pytest.raises(ValidationError) as err:
    PackPolicy(profile="exploratory")
  assert ("profile",) in _locs(err.value)


@pytest.mark.parametrize("field, value", [("overflow", "truncate"), ("tool_scoping", "soft")])
def test_unknown_enum_values_are_rejected(field, value):
  with pytest.raises(ValidationError) as err:
    PackPolicy(**{field: value})
  assert (field,) in _locs(err.value)


def test_unknown_field_is_rejected():
  with pytest.raises(ValidationError) as err:
    PackPolicy(quantom=32)
  assert ("quantom",) in _locs(err.value)


def test_unknown_preset_is_rejected():
  with pytest.raises(ValueError, match="unknown preset 'fast'"):
    PackPolicy.preset("fast")


def test_presets_validate_and_differ():
  q, c = PackPolicy.preset("quality_first"), PackPolicy.preset("cost_first")
  assert q.memory_top_k > c.memory_top_k and q.recent_turns > c.recent_turns
  assert PackPolicy.preset("cost_first", memory_top_k=2).memory_top_k == 2
  with pytest.raises(ValidationError, match="floors"):
    PackPolicy.preset("quality_first", floors={"system": 0.5, "task": 0.5})


def test_policy_is_immutable_and_hash_tracks_every_field():
  p = PackPolicy()
  with pytest.raises(ValidationError, match="quantum"):
    p.quantum = 32  # type: ignore[misc]
  assert p.policy_hash() == PackPolicy().policy_hash()
  assert p.policy_hash() != PackPolicy(quantum=32).policy_hash()
  assert p.policy_hash() != PackPolicy(profile=TaskProfile.RESEARCH).policy_hash()
  assert p.policy_hash().startswith("sha256:")


def test_signals_shift_the_weights_toward_their_layer():
  base = PackPolicy().remainder_weights()
  ev = PackPolicy(signals={"checklist_evidence_ratio": 1.0}).remainder_weights()
  mem = PackPolicy(signals={"retrieval_hit_rate": 1.0}).remainder_weights()
  conv = PackPolicy(signals={"unresolved_questions": 6}).remainder_weights()
  assert ev["evidence"] > base["evidence"]
  assert mem["memory"] > base["memory"]
  assert conv["conversation"] > base["conversation"]
  for w in (ev, mem, conv):
    assert sum(w.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, loc, meant", [
    ({"recent_turn": 2}, ("recent_turn",), "recent_turns"),
    ({"floors": {"sytem": 0.05}}, ("floors", "sytem"), "system"),
    ({"signals": {"risk_weigth": 0.5}}, ("signals", "risk_weigth"), "risk_weight"),
])
def test_a_misspelled_field_is_refused_where_it_is_and_named_as_meant(kwargs, loc, meant):
  """`--policy-override '{"recent_turn": 2}'` said only 'Extra inputs are not permitted'."""
  with pytest.raises(ValidationError) as info:
    PackPolicy(**kwargs)
  (err,) = info.value.errors()
  assert err["type"] == "extra_forbidden" and err["loc"] == loc
  assert f"did you mean '{meant}'?" in err["msg"]
  with pytest.raises(ValidationError, match="Extra inputs are not permitted\n|Extra inputs are not permitted \\["):
    PackPolicy(zzz=1)  # nothing close: pydantic's own message
