"""Calibration when the model's tokenizer starts counting more than ours, through a real Runner.

The offline model reports its prompt count with cl100k_base, a provider's
tokenizer that is not ours (o200k_base): on Hindi it counts ~2.4x. Calibration
blended each new ratio in with weight 0.3, so after a switch from English to
Hindi the packs lagged behind the model's count, and call 12 of this chat went
342 tokens over the window. A higher count now takes effect at once.
"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest
from google.adk.events import Event
from google.genai import types

from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.calibration import Calibrator
from aether_frame.offline_model import OfflineLlm
from aether_frame.tokenizers import get_counter
from tests.adk_support import agent, make_runner, manifests, new_session, say

EN = "Please summarise the vendor comparison and list the remaining gaps in the pricing data. " * 3
HI = "यह एक परीक्षण वाक्य है जो टोकन गणना के लिए लिखा गया है। " * 8
CJK = "数据分析报告显示，第三季度的销售额同比增长了百分之十五，主要受益于新产品线的推出。"


def _provider_count(request) -> int:
  """What the offline model reports as ``prompt_token_count`` for ``request``."""
  return count_request(request.contents, request.config, get_counter("cl100k_base")) + 3


async def _chat(window: int, turns: list[str], history: int = 0, reply: str = "ok"):
  """A session on a fresh plugin: ``history`` CJK turns stored without a model call, then ``turns``."""
  ag, model = agent(model=OfflineLlm(default=reply))
  runner = make_runner(ag, [ContextPackPlugin(window=window)])
  s = await new_session(runner)
  for i in range(history):  # a migrated history: no model call has been calibrated on it
    role, author = ("user", "user") if i % 2 == 0 else ("model", ag.name)
    await runner.session_service.append_event(s, Event(
        invocation_id=f"old-{i}", author=author, content=types.Content(role=role, parts=[types.Part(text=f"{i}: " + CJK * 5)])))
  for text in turns:
    await say(runner, s.id, text)
  return model, runner, s


def test_after_a_language_switch_every_request_fits_the_models_own_count():
  window = 4_000
  reserve = math.ceil(0.10 * window)

  async def go():
    model, runner, s = await _chat(window, [f"{t}: {text}" for t, text in enumerate([EN] * 6 + [HI] * 8)])
    counts = [_provider_count(r) for r in model.received]
    assert max(counts[6:]) > 3 * counts[0]  # the Hindi turns do fill the window
    assert [c + reserve for c in counts if c + reserve > window] == []
    docs = await manifests(runner, s.id)
    scales = [d["token_scale"] for d in docs]
    assert scales[7] > 1.4  # one Hindi response in, the next pack is sized for it
  asyncio.run(go())


def test_a_call_the_model_counted_over_the_window_is_reported_and_the_next_fits(caplog):
  """The first call of a session has no samples: a CJK history the model counts ~1.5x our count
  overshoots on it. That is logged once (it cannot be caught before the model counts), and the
  next call is sized for the model's count."""
  window = 8_000
  reserve = math.ceil(0.10 * window)

  async def go():
    with caplog.at_level(logging.WARNING, logger="aether_frame"):
      model, _, _ = await _chat(window, ["请总结以上内容。" + CJK * 3, "继续。" + CJK * 3], history=40, reply="好的")
    first, second = (_provider_count(r) for r in model.received)
    assert first + reserve > window, "the first call fit: this test checks nothing"
    assert second + reserve <= window
    warned = [r.getMessage() for r in caplog.records if "over the window minus the output reserve" in r.getMessage()]
    assert len(warned) == 1 and f"counted {first} prompt tokens" in warned[0]
  asyncio.run(go())


def test_calibrator_settings_are_the_plugins_to_choose():
  slow = Calibrator(alpha=0.3, alpha_up=0.3, max_ratio=6.0)
  plugin = ContextPackPlugin(window=8_000, calibrator=slow)
  assert plugin.calibrator is slow
  with pytest.raises(TypeError, match="calibrator must be a Calibrator"):
    ContextPackPlugin(window=8_000, calibrator={"alpha": 0.3})
