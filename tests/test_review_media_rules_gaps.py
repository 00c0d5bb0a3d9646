"""Regression tests from review: claims of the media-rule and window docstrings the code did not keep.

- ``MediaRules`` says video keeps the 2.x rate on Gemini 3 because 263 tokens
  a second is above Gemini 3's 70 per frame; that holds only at the default
  resolution. A video part asking for MEDIA_RESOLUTION_HIGH costs 280 per
  frame (plus audio) on Gemini 3, and the part's own ``num_tokens`` is
  ignored for video altogether.
- ``windows.py`` says variants whose window differs (image, speech, live)
  "match no rule: better an error naming the model than a guess of 1M"; the
  prefix rule still gives speech/live variants of a registered family 1M.
"""

from __future__ import annotations

import pytest

from aether_frame.core.costing import GEMINI_3_MEDIA, MediaCounter, count_part
from aether_frame.core.windows import ModelWindows, UnknownModelWindow
from aether_frame.tokenizers import get_counter

GEMINI_3 = MediaCounter(get_counter(), GEMINI_3_MEDIA)


def _video(resolution: dict) -> dict:
  return {
      "file_data": {"mime_type": "video/mp4", "file_uri": "gs://bucket/clip.mp4"},
      "duration_seconds": 60,
      "media_resolution": resolution,
  }


def test_a_high_resolution_video_is_not_under_counted_on_gemini_3():
  # 60 s at 1 fps, 280 tokens per frame at HIGH: at least 16,800 before audio.
  assert count_part(_video({"level": "MEDIA_RESOLUTION_HIGH"}), GEMINI_3) >= 60 * 280


def test_a_video_parts_own_num_tokens_is_honoured_on_gemini_3():
  # Images and PDF pages honour num_tokens; a video part asking for 1,000 per frame is costed at 263 a second.
  assert count_part(_video({"num_tokens": 1000}), GEMINI_3) >= 60 * 1000


@pytest.mark.parametrize("name", [
    "gemini-2.5-flash-native-audio-preview-09-2025",  # Live API native-audio model (128K input)
    "gemini-3-flash-preview-tts",
    "gemini-3-pro-preview-tts",
])
def test_speech_and_live_variants_are_not_guessed_at_1m(name):
  try:
    window = ModelWindows().lookup(name)
  except UnknownModelWindow:
    return
  assert window < 1_048_576, f"{name} resolved to the family's 1M window by prefix"
