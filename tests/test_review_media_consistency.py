"""Regression tests from review: the Gemini 3 media rules apply everywhere the request is sized.

Each test failed on the code before the fix:

- a ``FallbackModel`` pack is sized for the smallest window and the largest
  calibration scale of its models, but its media are costed by the primary's
  rules only: a Gemini 3 backup gets a pack whose images were charged 258
  tokens instead of 1,120;
- the request-level ``GenerateContentConfig.media_resolution`` (the documented
  global setting) is ignored: on Gemini 3 a PDF at HIGH costs 1,120 per page,
  the plugin charges the per-part default of 560.
"""

from __future__ import annotations


import pytest
from google.adk.agents import LlmAgent
from google.genai import types

from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.costing import GEMINI_3_MEDIA, MediaCounter
from aether_frame.offline_model import OfflineLlm

from tests.adk_support import fallback_model, make_runner, manifests, new_session, png_bytes


pytestmark = pytest.mark.asyncio




async def _run_once(agent, plugin, parts) -> dict:
  runner = make_runner(agent, [plugin])
  session = await new_session(runner)
  msg = types.Content(role="user", parts=parts)
  async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=msg):
    pass
  (doc,) = await manifests(runner, session.id)
  return doc


async def test_fallback_to_a_gemini_3_backup_costs_images_by_gemini_3_rules():
  primary = OfflineLlm(model="gemini-2.5-flash")
  backup = OfflineLlm(model="gemini-3.5-flash")
  model = fallback_model(primary, backup)
  agent = LlmAgent(name="viewer", model=model, instruction="You describe images.")
  plugin = ContextPackPlugin(window_overrides={"gemini-2.5-flash": 32_768, "gemini-3.5-flash": 32_768})
  images = [types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png") for _ in range(4)]
  doc = await _run_once(agent, plugin, [types.Part(text="What differs between these?"), *images])
  sent = primary.received[-1]
  # What the backup would be charged for this very request, had the primary failed.
  gemini_3 = count_request(sent.contents, sent.config, MediaCounter(plugin.counter, GEMINI_3_MEDIA))
  assert doc["runtime"]["request_tokens_estimate"] >= gemini_3, (
      "FallbackModel pack costed its images by the primary's 2.x rule "
      f"({doc['runtime']['request_tokens_estimate']} < {gemini_3} under the Gemini 3 backup's rules)")


async def test_request_level_media_resolution_high_is_charged_on_gemini_3():
  pdf = types.Part.from_bytes(data=b"%PDF-1.4 " + b"x" * 64, mime_type="application/pdf")

  async def estimate(config):
    llm = OfflineLlm(model="gemini-3.5-flash")
    agent = LlmAgent(name="reader", model=llm, instruction="You read documents.", generate_content_config=config)
    doc = await _run_once(agent, ContextPackPlugin(window=200_000), [types.Part(text="Summarise this."), pdf])
    return doc["runtime"]["request_tokens_estimate"]

  default = await estimate(None)
  high = await estimate(types.GenerateContentConfig(media_resolution=types.MediaResolution.MEDIA_RESOLUTION_HIGH))
  # An unknown page count is costed as 10 pages; HIGH is 1,120 per page, the default (MEDIUM) 560.
  assert high - default >= 10 * (1120 - 560), (default, high)

