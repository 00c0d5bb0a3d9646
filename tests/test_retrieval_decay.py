"""Decay models of seed 001 §6.8.2, with hand-computed values."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from aether_frame.retrieval.decay import exponential, freshness, sigmoid, step
from aether_frame.retrieval.weights import DecayModel

DAY = 86400.0
NOW = 1_700_000_000.0


def test_exponential():
  assert exponential(0.0, 0.3) == 1.0
  assert exponential(10.0, 0.05) == pytest.approx(math.exp(-0.5))  # 0.60653066
  assert exponential(10.0, 0.05) == pytest.approx(0.60653066)
  assert exponential(1.0, 0.3) == pytest.approx(0.74081822)


def test_step_with_reactivation():
  assert step(3.0, k=7.0, delta=0.1) == 1.0
  assert step(7.0, k=7.0, delta=0.1) == 1.0
  assert step(7.5, k=7.0, delta=0.1) == 0.1


def test_sigmoid_half_life():
  assert sigmoid(14.0, kappa=0.5, tau=14.0) == 0.5
  assert sigmoid(16.0, kappa=0.5, tau=14.0) == pytest.approx(1 / (1 + math.e))  # 0.26894142
  assert sigmoid(0.0, kappa=0.5, tau=14.0) == pytest.approx(1 / (1 + math.exp(-7)))
  assert sigmoid(10_000.0, kappa=1.0, tau=0.0) == 0.0  # no overflow


def test_freshness_in_days():
  model = DecayModel(kind="exponential", gamma=0.05)
  assert freshness(model, timestamp=NOW - 10 * DAY, now=NOW) == pytest.approx(math.exp(-0.5))
  assert freshness(model, timestamp=NOW + DAY, now=NOW) == 1.0  # future counts as age 0
  assert freshness(model, timestamp=None, now=NOW) == 0.5
  assert freshness(model, timestamp=NOW, now=None) == 0.5


def test_freshness_units_and_models():
  hours = DecayModel(kind="exponential", gamma=0.1, unit="hours")
  assert freshness(hours, timestamp=NOW - 5 * 3600, now=NOW) == pytest.approx(math.exp(-0.5))
  sig = DecayModel(kind="sigmoid", kappa=0.5, tau=14.0)
  assert freshness(sig, timestamp=NOW - 14 * DAY, now=NOW) == pytest.approx(0.5)


def test_step_reactivates_on_recent_access():
  model = DecayModel(kind="step", k=7.0, delta=0.1)
  old = NOW - 30 * DAY
  assert freshness(model, timestamp=old, now=NOW) == 0.1
  assert freshness(model, timestamp=old, now=NOW, last_access=NOW - 2 * DAY) == 1.0


def test_decay_model_is_validated_and_frozen():
  with pytest.raises(ValidationError, match="gamma"):
    DecayModel(gamma=-1.0)
  with pytest.raises(ValidationError, match="kind"):
    DecayModel(kind="linear")
  with pytest.raises(ValidationError, match="delta"):
    DecayModel(delta=2.0)
  with pytest.raises(ValidationError, match="gamma"):
    DecayModel().gamma = 1.0  # type: ignore[misc]
