"""Media costing follows the model family: Gemini 3 charges per image and page by media resolution.

A 64x64 PNG costs Gemini 2.x one 258-token unit and Gemini 3 (ADK 2.13's
default model family) 1,120 tokens at its default resolution: costed by the
2.x rule, every image in a Gemini 3 pack was under-counted about 4x.
"""

from __future__ import annotations


import pytest
from google.adk.agents import LlmAgent
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit.replay import counter_for
from aether_frame.core.costing import (
    EstimatingCounter,
    GEMINI_2_MEDIA,
    GEMINI_3_MEDIA,
    MediaCounter,
    count_part,
    media_rules_for_model,
)
from aether_frame.offline_model import OfflineLlm
from aether_frame.tokenizers import get_counter

from tests.adk_support import make_runner, manifests, new_session, png_bytes

COUNTER = get_counter()
GEMINI_3 = MediaCounter(COUNTER, GEMINI_3_MEDIA)




def _image(level: str | None = None, num_tokens: int | None = None) -> dict:
  part = types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png")
  if level or num_tokens:
    part.media_resolution = types.PartMediaResolution(level=level, num_tokens=num_tokens)
  return part.model_dump(mode="json", exclude_none=True)


def test_a_small_image_costs_by_the_models_family():
  assert count_part(_image(), COUNTER) == 258
  assert count_part(_image(), GEMINI_3) == 1120
  assert count_part(_image("MEDIA_RESOLUTION_LOW"), GEMINI_3) == 280
  assert count_part(_image("MEDIA_RESOLUTION_ULTRA_HIGH"), GEMINI_3) == 2240
  assert count_part(_image(num_tokens=777), GEMINI_3) == 777


def test_pdf_pages_cost_by_the_models_family():
  pdf = {"inline_data": {"mime_type": "application/pdf", "data": "JVBERi0="}, "pages": 3}
  assert count_part(pdf, COUNTER) == 3 * 258
  assert count_part(pdf, GEMINI_3) == 3 * 560  # MEDIUM is Gemini 3's default for documents
  high = {**pdf, "media_resolution": {"level": "MEDIA_RESOLUTION_HIGH"}}
  assert count_part(high, GEMINI_3) == 3 * 1120


def test_tool_results_with_images_follow_the_same_rules():
  image = _image()
  response = {"function_response": {"name": "snap", "response": {"ok": True}, "parts": [image]}}
  assert count_part(response, GEMINI_3) - count_part(response, COUNTER) == 1120 - 258


@pytest.mark.parametrize("model, rules", [
    ("gemini-3.5-flash", GEMINI_3_MEDIA), ("models/gemini-3.1-pro-preview", GEMINI_3_MEDIA),
    ("gemini-3-pro-image-preview", GEMINI_3_MEDIA), ("gemini-flash-latest", GEMINI_3_MEDIA),
    ("gemini-2.5-flash", GEMINI_2_MEDIA), ("gemini-30-hypothetical", GEMINI_2_MEDIA),
    ("gpt-4o", GEMINI_2_MEDIA), ("", GEMINI_2_MEDIA), (None, GEMINI_2_MEDIA),
])
def test_rules_by_model_name(model, rules):
  assert media_rules_for_model(model) is rules


def test_the_media_counter_counts_text_as_its_base_and_names_its_rules():
  text = "The quick brown fox jumps over the lazy dog."
  assert GEMINI_3.count(text) == COUNTER.count(text)
  assert GEMINI_3.count_many([text, "x"]) == COUNTER.count_many([text, "x"])
  assert GEMINI_3.describe() == {**COUNTER.describe(), "media": "gemini-3"}
  # Replay rebuilds the same counter from the manifest's tokenizer field.
  again = counter_for(GEMINI_3.describe())
  assert count_part(_image(), again) == 1120
  assert counter_for(COUNTER.describe()) is COUNTER
  with pytest.raises(ValueError, match="unknown media rules 'gemini-9'"):
    counter_for({**COUNTER.describe(), "media": "gemini-9"})


async def _estimate_with_image(model_name: str) -> dict:
  model = OfflineLlm(model=model_name, script=["I see a square."])
  agent = LlmAgent(name="viewer", model=model, instruction="You describe images.")
  runner = make_runner(agent, [ContextPackPlugin(window=32_768)])
  session = await new_session(runner)
  message = types.Content(role="user", parts=[
      types.Part(text="What is in this picture?"),
      types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png"),
  ])
  async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
    pass
  (doc,) = await manifests(runner, session.id)
  return doc


@pytest.mark.asyncio
async def test_the_plugin_costs_a_gemini_3_request_by_gemini_3_rules():
  old = await _estimate_with_image("gemini-2.5-flash")
  new = await _estimate_with_image("gemini-3.5-flash")
  assert "media" not in old["tokenizer"] and new["tokenizer"]["media"] == "gemini-3"
  # The same request, one image: the estimates differ by exactly the image's two prices.
  assert new["runtime"]["request_tokens_estimate"] - old["runtime"]["request_tokens_estimate"] == 1120 - 258
  assert new["layers"]["task"]["used"] - old["layers"]["task"]["used"] == 1120 - 258


def test_a_media_counter_survives_copy_and_pickle():
  import copy
  import pickle

  twin = copy.copy(GEMINI_3)
  assert twin.media_rules is GEMINI_3_MEDIA and count_part(_image(), twin) == 1120
  # (tiktoken's own encoder cannot be pickled; the estimating counter can)
  again = pickle.loads(pickle.dumps(MediaCounter(EstimatingCounter(), GEMINI_3_MEDIA)))
  assert again.describe()["media"] == "gemini-3" and count_part(_image(), again) == 1120


def test_request_level_resolution_is_the_default_for_parts_without_one():
  high = MediaCounter(COUNTER, GEMINI_3_MEDIA.for_request("MEDIA_RESOLUTION_LOW"))
  assert count_part(_image(), high) == 280
  assert count_part(_image("MEDIA_RESOLUTION_HIGH"), high) == 1120  # the part's own level wins
  assert high.describe()["media"] == "gemini-3@MEDIA_RESOLUTION_LOW"
  assert count_part(_image(), counter_for(high.describe())) == 280  # replay rebuilds it
  assert GEMINI_3_MEDIA.for_request("MEDIA_RESOLUTION_UNSPECIFIED") is GEMINI_3_MEDIA
  assert GEMINI_2_MEDIA.for_request("MEDIA_RESOLUTION_LOW") is GEMINI_2_MEDIA


async def test_an_inline_wav_is_costed_by_its_length_and_the_history_makes_room():
  """A 5-minute voice note is 9,600 tokens; it cost the one-minute guess (1,920), so the
  pack kept ~7,700 tokens of history too many and went over the window."""
  from tests.adk_support import Recorder, fits, independent_tokens, say, wav_bytes

  window = 16_384
  model = OfflineLlm(default="noted. " * 20)
  ag = LlmAgent(name="assistant", model=model, instruction="Be brief.")
  recorder = Recorder()
  runner = make_runner(ag, [recorder, ContextPackPlugin(window=window)])
  session = await new_session(runner)
  for t in range(40):
    await say(runner, session.id, f"turn {t}: " + "notes on the quarterly plan and its risks. " * 30)
  voice = types.Part(inline_data=types.Blob(mime_type="audio/wav", data=wav_bytes(300)))
  await say(runner, session.id, "Please transcribe this.", parts=[voice])
  sent, original = model.received[-1], recorder.requests[-1]
  assert independent_tokens(original) > window  # without the pack it overflows
  fits(sent, window, window // 10)
  doc = (await manifests(runner, session.id))[-1]
  assert doc["layers"]["task"]["used"] >= 9_600
  assert sent.contents[-1].parts[-1].inline_data.data == voice.inline_data.data  # the audio itself is sent


def test_media_without_a_mime_type_is_costed_by_what_the_part_shows():
  """Gemini takes a YouTube URL as file_data with no mime type; a clip states its range in
  video_metadata. Costed as an unknown blob, five minutes of video were 1,290 tokens."""
  url = "https://www.youtube.com/watch?v=abc123"
  typed = {"file_data": {"file_uri": url, "mime_type": "video/*"}}
  bare = {"file_data": {"file_uri": url}}
  assert count_part(bare, COUNTER) == count_part(typed, COUNTER) == 60 * 263  # the one-minute guess, as video
  assert count_part({"file_data": {"file_uri": "https://youtu.be/abc123"}}, COUNTER) == 60 * 263
  clip = {"file_data": {"file_uri": "gs://b/clip"}, "video_metadata": {"start_offset": "60s", "end_offset": "360s"}}
  assert count_part(clip, COUNTER) == 300 * 263
  # A file name's extension, from a fixed table (not the machine's mime files).
  assert count_part({"file_data": {"file_uri": "gs://b/scan.PDF"}}, COUNTER) == 10 * 258
  assert count_part({"file_data": {"file_uri": "gs://b/talk.mp3?x=1"}}, COUNTER) == 60 * 32
  # Nothing to go by: the unknown-blob cost, as before.
  assert count_part({"file_data": {"file_uri": "gs://b/blob"}}, COUNTER) == 1290
  assert count_part({"file_data": {"file_uri": "https://notyoutube.com/watch"}}, COUNTER) == 1290
