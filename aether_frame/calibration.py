"""Learns how far our token estimates are from what the model actually bills.

Our counts come from a tiktoken encoding (or the byte estimate), not Gemini's
tokenizer, and omit server-side framing. After each model call the runner
feeds ``observe(model, estimate, actual)`` with ``usage_metadata.prompt_token_count``;
``scale()`` turns the learned ratio into a multiplier for the next budget.
State is a plain dict (``to_dict``/``from_dict``) so it can live in session state.
Anyone can write session state, so reading it back never raises, and a caller
with its own settings (the plugin) takes only the per-model samples from it.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Mapping

logger = logging.getLogger(__name__)

__all__ = ["Calibrator", "DEFAULT_ALPHA", "DEFAULT_ALPHA_UP", "MIN_RATIO", "MAX_RATIO", "describe_scale"]

DEFAULT_ALPHA = 0.3
DEFAULT_ALPHA_UP = 1.0
"""A sample above the ratio counts in full: a request the model counted larger than
we did is followed by one sized for that count, not by ~5 more that overshoot."""
# One bad sample (e.g. a cached-content hit, or a prompt we did not build) must
# not collapse or explode budgets: samples and the ratio stay in [0.5, 3.0].
MIN_RATIO = 0.5
MAX_RATIO = 3.0
_STATE_VERSION = 1
_SETTINGS = ("alpha", "alpha_up", "min_ratio", "max_ratio", "shrink_floor", "min_samples_to_shrink")


@dataclass
class _ModelState:
  ratio: float = 1.0
  samples: int = 0
  last_estimate: int | None = None
  last_actual: int | None = None


def _model_key(model: str) -> str:
  """Treats "models/gemini-x" and "gemini-x" as the same model."""
  model = str(model or "").strip()
  return model[len("models/"):] if model.startswith("models/") else model


def _positive_number(value: Any) -> float | None:
  if value is None or isinstance(value, bool):
    return None
  try:
    v = float(value)
  except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float (10**400)
    return None
  if not math.isfinite(v) or v <= 0:
    return None
  return v


def _count(value: Any) -> int:
  """A whole number of samples; 0 for anything else (inf, nan, text, bool)."""
  v = _positive_number(value)
  return int(v) if v is not None else 0


def _clamp(v: float, lo: float, hi: float) -> float:
  return lo if v < lo else hi if v > hi else v


class Calibrator:
  """Per-model EWMA of actual/estimate, clamped to [min_ratio, max_ratio].

  - The first valid sample sets the ratio. A later sample above the ratio
    blends in with weight ``alpha_up`` (1.0: the ratio rises to it at once, as
    an overshoot costs a failed call), one below it with ``alpha`` (0.3: the
    budget grows back over ~5 calls, as an undershoot costs only some room).
    ``Calibrator(alpha=a, alpha_up=a)`` is the symmetric EWMA of earlier versions
    (and what their saved settings restore as).
  - ``scale(model, margin)`` = max(ratio, floor) * (1 + margin). The default
    floor is 1.0, so estimates are never shrunk: if our tokenizer over-counts
    (ratio < 1) budgets stay as estimated. Set ``shrink_floor`` < 1 (bounded by
    ``min_ratio``) to let a consistently over-counting tokenizer grow budgets;
    that only applies after ``min_samples_to_shrink`` observations, so early
    noise cannot overfill a window.
  """

  def __init__(
      self,
      alpha: float = DEFAULT_ALPHA,
      *,
      alpha_up: float = DEFAULT_ALPHA_UP,
      min_ratio: float = MIN_RATIO,
      max_ratio: float = MAX_RATIO,
      shrink_floor: float = 1.0,
      min_samples_to_shrink: int = 3,
  ) -> None:
    if not 0.0 < alpha <= 1.0:
      raise ValueError("alpha must be in (0, 1]")
    if not 0.0 < alpha_up <= 1.0:
      raise ValueError("alpha_up must be in (0, 1]")
    if not 1e-3 <= min_ratio <= 1.0 <= max_ratio <= 1e3:
      # The scale (ratio times the margin) must stay within what a compile accepts.
      raise ValueError(f"need 0.001 <= min_ratio <= 1 <= max_ratio <= 1000, got {min_ratio}, {max_ratio}")
    if not min_ratio <= shrink_floor <= 1.0:
      raise ValueError("shrink_floor must be in [min_ratio, 1.0]")
    self.alpha = float(alpha)
    self.alpha_up = float(alpha_up)
    self.min_ratio = float(min_ratio)
    self.max_ratio = float(max_ratio)
    self.shrink_floor = float(shrink_floor)
    self.min_samples_to_shrink = max(0, int(min_samples_to_shrink))
    self._models: dict[str, _ModelState] = {}
    self._lock = threading.Lock()

  # -- learning -------------------------------------------------------------

  def observe(self, model: str, estimate: Any, actual: Any) -> float:
    """Records one (estimate, actual) pair; returns the model's ratio after it.

    Missing, non-numeric, non-finite or non-positive values are ignored (debug
    log): usage metadata is absent on errors and some streaming chunks.
    """
    key = _model_key(model)
    est = _positive_number(estimate)
    act = _positive_number(actual)
    if est is None or act is None:
      logger.debug("calibration: ignoring sample for %r (estimate=%r, actual=%r)", key, estimate, actual)
      return self.ratio(key)
    sample = _clamp(act / est, self.min_ratio, self.max_ratio)
    with self._lock:
      st = self._models.get(key)
      if st is None:
        st = self._models[key] = _ModelState()
      if st.samples == 0:
        st.ratio = sample
      else:
        a = self.alpha_up if sample > st.ratio else self.alpha
        st.ratio = _clamp(a * sample + (1.0 - a) * st.ratio, self.min_ratio, self.max_ratio)
      st.samples += 1
      st.last_estimate = int(round(est))
      st.last_actual = int(round(act))
      return st.ratio

  # -- reading --------------------------------------------------------------

  def ratio(self, model: str) -> float:
    st = self._models.get(_model_key(model))
    return st.ratio if st is not None and st.samples else 1.0

  def samples(self, model: str) -> int:
    st = self._models.get(_model_key(model))
    return st.samples if st is not None else 0

  def scale(self, model: str, margin: float = 0.0) -> float:
    """Multiplier for estimates: max(ratio, floor) * (1 + margin), margin >= 0.

    A non-finite margin raises: inf would make every budget infinite (or
    zero) and nan was silently taken as 0.
    """
    margin = float(margin)
    if not math.isfinite(margin):
      raise ValueError(f"calibration margin must be a finite number, got {margin!r}")
    margin = max(0.0, margin)
    st = self._models.get(_model_key(model))
    r = st.ratio if st is not None and st.samples else 1.0
    floor = 1.0
    if st is not None and st.samples >= self.min_samples_to_shrink:
      floor = self.shrink_floor
    return max(r, floor) * (1.0 + margin)

  def snapshot(self, model: str) -> dict[str, Any]:
    """The manifest's view of one model's calibration."""
    st = self._models.get(_model_key(model))
    if st is None:
      return {"ratio": 1.0, "samples": 0, "last_estimate": None, "last_actual": None}
    return {
        "ratio": st.ratio if st.samples else 1.0,
        "samples": st.samples,
        "last_estimate": st.last_estimate,
        "last_actual": st.last_actual,
    }

  def models(self) -> list[str]:
    return sorted(self._models)

  def reset(self, model: str | None = None) -> None:
    with self._lock:
      if model is None:
        self._models.clear()
      else:
        self._models.pop(_model_key(model), None)

  # -- persistence ------------------------------------------------------------

  def _settings(self) -> dict[str, Any]:
    """The constructor arguments: alpha, bounds and the shrink rule."""
    return {name: getattr(self, name) for name in _SETTINGS}

  def to_dict(self, *, settings: bool = True) -> dict[str, Any]:
    """JSON-safe state, suitable for ADK session state.

    ``settings=False`` leaves out the settings: a reader with its own (the
    plugin) ignores them, so only the per-model samples are worth storing.
    """
    with self._lock:
      models = {k: self.snapshot(k) for k in sorted(self._models)}
    return {"version": _STATE_VERSION, **(self._settings() if settings else {}), "models": models}

  @classmethod
  def from_dict(cls, data: Any, *, settings: "Calibrator | None" = None) -> "Calibrator":
    """Restores state; never raises on what it reads (bad entries are dropped).

    With ``settings``, its alpha, bounds and shrink rule are used and any in
    ``data`` are ignored: state anyone can write must not set the bounds
    (a huge ``max_ratio`` empties the budget). Restored ratios are clamped
    into the bounds in effect.
    """
    data = data if isinstance(data, Mapping) else {}
    if settings is not None:
      cal = cls(**settings._settings())
    else:
      kwargs = {name: data[name] for name in _SETTINGS if data.get(name) is not None}
      if "alpha" in kwargs and "alpha_up" not in kwargs:  # saved before alpha_up: alpha was both ways
        kwargs["alpha_up"] = kwargs["alpha"]
      try:
        cal = cls(**kwargs)
      except (TypeError, ValueError, OverflowError) as e:
        logger.debug("calibration: bad settings in persisted state (%s); using defaults", e)
        cal = cls()
    models = data.get("models") or {}
    if not isinstance(models, Mapping):
      return cal
    for model, snap in models.items():
      if not isinstance(snap, Mapping):
        continue
      ratio = _positive_number(snap.get("ratio"))
      samples = _count(snap.get("samples"))
      if ratio is None or samples <= 0:
        continue
      last_e = _positive_number(snap.get("last_estimate"))
      last_a = _positive_number(snap.get("last_actual"))
      cal._models[_model_key(model)] = _ModelState(
          ratio=_clamp(ratio, cal.min_ratio, cal.max_ratio),
          samples=samples,
          last_estimate=int(last_e) if last_e is not None else None,
          last_actual=int(last_a) if last_a is not None else None,
      )
    return cal

  def __repr__(self) -> str:
    return f"Calibrator(alpha={self.alpha}, models={self.models()})"


def describe_scale(token_scale: Any, snapshot: Any) -> str:
  """What a manifest's ``token_scale`` is made of, for the budget tables.

  The scale is the learned ratio (the provider's count over ours) times
  ``1 + calibration_margin``: the margin applies on every call, so a scale of
  1.05 with no sample yet is the margin alone, not a measured 5%.
  """
  scale = f"{token_scale:.3f}x" if isinstance(token_scale, (int, float)) else "?"
  snap = snapshot if isinstance(snapshot, Mapping) else {}
  ratio, samples = snap.get("ratio"), snap.get("samples")
  if not isinstance(samples, int) or not isinstance(ratio, (int, float)):
    return f"held back: our count scaled {scale} (learned ratio and safety margin)"
  if samples == 0:
    return f"held back: our count scaled {scale}, the safety margin alone (no provider count yet)"
  return (f"held back: our count scaled {scale}: the provider counts {ratio:.3f}x ours "
          f"({samples} sample{'s' if samples != 1 else ''}), plus the safety margin")
