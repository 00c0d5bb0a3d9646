"""Calibration state the plugin reads back from a session: unreadable, out of bounds, or stale.

Session state is writable by anyone (tools, other workers, hand edits); none
of it may disable the plugin or push budgets outside the configured bounds.
"""

from __future__ import annotations

import logging
import math

import pytest

from aether_frame import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY, LAST_FAULT_KEY
from aether_frame.calibration import MAX_RATIO, MIN_RATIO, Calibrator
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import APP, USER, agent, make_runner, manifests, new_session, payload_of, say

MODEL = "offline-model"
INF = float("inf")

CORRUPTED = {
    "not a mapping": "garbage",
    "a list": [1, 2],
    "infinite min_samples_to_shrink": {"min_samples_to_shrink": INF, "models": {MODEL: {"ratio": 1.2, "samples": 2}}},
    "infinite samples": {"models": {MODEL: {"ratio": 1.2, "samples": INF}}},
    "huge max_ratio": {"max_ratio": 1e308, "models": {MODEL: {"ratio": 1e308, "samples": 5}}},
    "infinite max_ratio": {"max_ratio": INF, "models": {MODEL: {"ratio": 1e308, "samples": 5}}},
    "tiny min_ratio": {"min_ratio": 1e-300, "shrink_floor": 1e-300, "models": {MODEL: {"ratio": 1e-300, "samples": 5}}},
}


async def _state(runner, sid):
  return (await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=sid)).state


@pytest.mark.parametrize("state", list(CORRUPTED.values()), ids=list(CORRUPTED))
async def test_corrupted_calibration_state_is_repaired_and_packs_are_applied(state, caplog):
  caplog.set_level(logging.INFO, logger="aether_frame.adk.plugin")
  model = OfflineLlm(model=MODEL, default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner, state={CALIBRATION_KEY: state})
  for i in range(3):
    await say(runner, s.id, f"turn {i}: hello there")
  assert plugin.faults == 0
  st = await _state(runner, s.id)
  assert LAST_FAULT_KEY not in st
  assert all(payload_of(r).startswith("CONTEXT PACK v1") for r in model.received)
  # Within the plugin's own bounds, whatever the state claimed.
  docs = await manifests(runner, s.id)
  assert len(docs) == 3
  for m in docs:
    assert 1.05 <= m["token_scale"] <= MAX_RATIO * 1.05
    assert m["usable"] > 0
  cal = st[CALIBRATION_KEY]
  assert MIN_RATIO <= cal["models"][MODEL]["ratio"] <= MAX_RATIO
  assert Calibrator.from_dict(cal).max_ratio == MAX_RATIO
  warnings = [r for r in caplog.records if r.name == "aether_frame.adk.plugin" and "calibration" in r.getMessage()]
  assert len(warnings) == 1


async def test_a_compiled_call_without_usage_then_a_fail_open_call_leave_the_ratio_alone():
  calls = {"n": 0}

  def third_call_faults():
    calls["n"] += 1
    if calls["n"] == 3:
      raise RuntimeError("injected fault")

  model = OfflineLlm(model=MODEL, default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192, _fault_injector=third_call_faults)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  await say(runner, s.id, "turn 0 " + "word " * 600)  # compiled, usage reported
  learned = (await _state(runner, s.id))[CALIBRATION_KEY]
  model.report_usage = False
  await say(runner, s.id, "turn 1 short")  # compiled, no usage: its estimate must not linger
  model.report_usage = True
  await say(runner, s.id, "turn 2 short")  # fault: sent unmodified, never estimated
  assert plugin.faults == 1 and payload_of(model.received[-1]) == "turn 2 short"
  assert (await _state(runner, s.id))[CALIBRATION_KEY] == learned
  assert plugin.calibrator.samples(MODEL) == 1
  await say(runner, s.id, "turn 3 short")  # compiled again: learning resumes
  assert (await _state(runner, s.id))[CALIBRATION_KEY]["models"][MODEL]["samples"] == 2


# ------------------------------------------------------------ Calibrator unit
@pytest.mark.parametrize("state", list(CORRUPTED.values()), ids=list(CORRUPTED))
def test_from_dict_never_raises_and_settings_come_from_the_template(state):
  template = Calibrator(alpha=0.5, shrink_floor=0.9, min_samples_to_shrink=2)
  cal = Calibrator.from_dict(state, settings=template)
  assert (cal.alpha, cal.min_ratio, cal.max_ratio, cal.shrink_floor, cal.min_samples_to_shrink) == (0.5, MIN_RATIO, MAX_RATIO, 0.9, 2)
  assert 0.9 <= cal.scale(MODEL) <= MAX_RATIO
  for m in cal.models():
    assert MIN_RATIO <= cal.ratio(m) <= MAX_RATIO
  # Without a template the state's own settings are read, but only ones a
  # Calibrator could have been built with.
  bare = Calibrator.from_dict(state)
  assert math.isfinite(bare.max_ratio) and bare.min_samples_to_shrink < 10**6
  assert math.isfinite(bare.scale(MODEL))


def test_samples_are_persisted_without_settings_and_old_state_still_reads():
  cal = Calibrator()
  cal.observe("m", 1000, 1200)
  assert cal.to_dict(settings=False) == {"version": 1, "models": {"m": cal.snapshot("m")}}
  old = cal.to_dict()  # an older plugin's state, settings included
  old["max_ratio"] = 50.0
  old["models"]["m"]["ratio"] = 40.0
  back = Calibrator.from_dict(old, settings=Calibrator())
  assert back.max_ratio == MAX_RATIO and back.ratio("m") == MAX_RATIO and back.samples("m") == 1
