"""Calibrator: EWMA math by hand, clamping, scale policy, persistence."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aether_frame.calibration import MAX_RATIO, MIN_RATIO, Calibrator


def test_unseen_model_is_neutral():
  cal = Calibrator()
  assert cal.ratio("gemini-2.5-flash") == 1.0
  assert cal.scale("gemini-2.5-flash", 0.1) == pytest.approx(1.1)
  assert cal.snapshot("gemini-2.5-flash") == {"ratio": 1.0, "samples": 0, "last_estimate": None, "last_actual": None}


def test_ewma_hand_computed():
  cal = Calibrator(alpha=0.3, alpha_up=0.3)  # symmetric: the textbook EWMA
  # first sample sets the ratio: 1200/1000 = 1.2
  assert cal.observe("m", 1000, 1200) == pytest.approx(1.2)
  # 0.3 * (1500/1000=1.5) + 0.7 * 1.2 = 0.45 + 0.84 = 1.29
  assert cal.observe("m", 1000, 1500) == pytest.approx(1.29)
  # 0.3 * (900/1000=0.9) + 0.7 * 1.29 = 0.27 + 0.903 = 1.173
  assert cal.observe("m", 1000, 900) == pytest.approx(1.173)
  assert cal.ratio("m") == pytest.approx(1.173)
  assert cal.snapshot("m") == {"ratio": pytest.approx(1.173), "samples": 3, "last_estimate": 1000, "last_actual": 900}
  # models are independent; "models/" prefix is normalised
  assert cal.ratio("other") == 1.0
  assert cal.ratio("models/m") == pytest.approx(1.173)


def test_a_larger_count_is_taken_at_once_a_smaller_one_slowly():
  """By default a sample above the ratio replaces it (the next pack must fit what the model
  counted), and one below blends in with alpha (room comes back over a few calls)."""
  cal = Calibrator(alpha=0.3)
  assert cal.observe("m", 1000, 1200) == pytest.approx(1.2)
  assert cal.observe("m", 1000, 2000) == pytest.approx(2.0)  # symmetric EWMA: 1.44, and the next pack overshoots
  assert cal.observe("m", 1000, 1000) == pytest.approx(0.3 * 1.0 + 0.7 * 2.0)
  assert cal.observe("m", 1000, 1800) == pytest.approx(1.8)
  with pytest.raises(ValueError, match="alpha_up"):
    Calibrator(alpha_up=0)
  # Settings saved before alpha_up existed restore the symmetric rule they ran with.
  old = Calibrator.from_dict({"version": 1, "alpha": 0.1, "models": {"m": {"ratio": 1.0, "samples": 3}}})
  assert old.alpha_up == 0.1 and old.observe("m", 1000, 2000) == pytest.approx(1.1)


def test_samples_and_ratio_are_clamped():
  cal = Calibrator(alpha=0.3)
  assert cal.observe("m", 100, 10_000) == MAX_RATIO == 3.0  # sample 100 -> clamped to 3.0
  # 0.3 * clamp(0.01 -> 0.5) + 0.7 * 3.0 = 0.15 + 2.1 = 2.25
  assert cal.observe("m", 10_000, 100) == pytest.approx(2.25)
  low = Calibrator()
  assert low.observe("m", 1000, 1) == MIN_RATIO == 0.5


@pytest.mark.parametrize("estimate,actual", [(0, 10), (10, 0), (-5, 10), (None, 10), (10, None),
                                             ("abc", 10), (float("nan"), 10), (10, float("inf")), (True, 10)])
def test_invalid_samples_ignored_with_debug_log(caplog, estimate, actual):
  cal = Calibrator()
  cal.observe("m", 1000, 2000)
  with caplog.at_level(logging.DEBUG, logger="aether_frame.calibration"):
    assert cal.observe("m", estimate, actual) == pytest.approx(2.0)
  assert cal.snapshot("m")["samples"] == 1
  assert any("ignoring sample" in r.getMessage() for r in caplog.records)


def test_scale_never_shrinks_by_default():
  cal = Calibrator()
  for _ in range(10):
    cal.observe("m", 1000, 800)  # our tokenizer over-counts
  assert cal.ratio("m") == pytest.approx(0.8)
  assert cal.scale("m") == 1.0
  assert cal.scale("m", 0.1) == pytest.approx(1.1)
  cal.observe("up", 1000, 1300)
  assert cal.scale("up", 0.1) == pytest.approx(1.3 * 1.1)
  assert cal.scale("up", -0.5) == pytest.approx(1.3)  # negative margins are ignored


def test_scale_may_shrink_only_when_opted_in_and_after_enough_samples():
  cal = Calibrator(shrink_floor=0.85, min_samples_to_shrink=3)
  cal.observe("m", 1000, 700)
  cal.observe("m", 1000, 700)
  assert cal.scale("m") == 1.0  # two samples: not trusted yet
  cal.observe("m", 1000, 700)
  assert cal.ratio("m") == pytest.approx(0.7)
  assert cal.scale("m") == pytest.approx(0.85)  # bounded by the floor
  assert cal.scale("m", 0.1) == pytest.approx(0.85 * 1.1)
  cal2 = Calibrator(shrink_floor=0.5, min_samples_to_shrink=0)
  cal2.observe("m", 1000, 900)
  assert cal2.scale("m") == pytest.approx(0.9)


def test_invalid_settings():
  with pytest.raises(ValueError, match="alpha"):
    Calibrator(alpha=0)
  with pytest.raises(ValueError, match="alpha"):
    Calibrator(alpha=1.5)
  with pytest.raises(ValueError, match="shrink_floor"):
    Calibrator(shrink_floor=0.2)
  with pytest.raises(ValueError, match="min_ratio"):
    Calibrator(min_ratio=1.2)


def test_persistence_round_trip_is_json_safe():
  cal = Calibrator(alpha=0.5, alpha_up=0.5, shrink_floor=0.9)
  cal.observe("gemini-2.5-flash", 1000, 1100)
  cal.observe("gemini-2.5-flash", 1000, 1300)
  cal.observe("models/gemini-2.5-pro", 500, 450)
  state = json.loads(json.dumps(cal.to_dict()))
  back = Calibrator.from_dict(state)
  assert back.to_dict() == cal.to_dict()
  assert back.alpha == 0.5 and back.alpha_up == 0.5 and back.shrink_floor == 0.9
  assert back.ratio("gemini-2.5-flash") == pytest.approx(1.2)
  assert back.snapshot("gemini-2.5-pro") == cal.snapshot("gemini-2.5-pro")
  # learning continues from the restored state: 0.5 * 1.0 + 0.5 * 1.2 = 1.1
  assert back.observe("gemini-2.5-flash", 1000, 1000) == pytest.approx(1.1)


def test_from_dict_tolerates_garbage():
  assert Calibrator.from_dict(None).models() == []
  assert Calibrator.from_dict({"models": "nope"}).models() == []
  cal = Calibrator.from_dict({
      "alpha": 7,  # invalid -> defaults
      "models": {
          "a": {"ratio": 99, "samples": 2},  # clamped
          "b": {"ratio": -1, "samples": 3},  # dropped
          "c": {"ratio": 1.5, "samples": 0},  # dropped
          "d": "x",  # dropped
      },
  })
  assert cal.alpha == 0.3
  assert cal.models() == ["a"]
  assert cal.ratio("a") == 3.0
  assert cal.snapshot("a")["last_estimate"] is None


@given(st.lists(st.tuples(st.integers(-10, 10**7), st.integers(-10, 10**7)), max_size=50),
       st.floats(0.01, 1.0))
def test_ratio_always_within_bounds(pairs, alpha):
  cal = Calibrator(alpha=alpha)
  for est, act in pairs:
    r = cal.observe("m", est, act)
    assert MIN_RATIO <= r <= MAX_RATIO
  assert cal.scale("m", 0.2) >= 1.2 - 1e-12
  assert cal.snapshot("m")["samples"] == sum(1 for e, a in pairs if e > 0 and a > 0)
