"""Review findings for token counting and calibration (real tiktoken, no mocks)."""

from __future__ import annotations

import math
import random
import struct
import zlib

import pytest

from google.genai import types  # noqa: E402

from aether_frame.calibration import Calibrator  # noqa: E402
from aether_frame.core.costing import (  # noqa: E402
    IMAGE_TILE_TOKENS,
    UNKNOWN_MEDIA_TOKENS,
    VIDEO_TOKENS_PER_SECOND,
    VIDEO_UNKNOWN_SECONDS,
    EstimatingCounter,
    canonical_json,
    count_part,
    count_parts,
)
from aether_frame.tokenizers import TiktokenCounter, get_counter  # noqa: E402


@pytest.fixture(scope="module")
def counter():
  c = get_counter("o200k_base")
  assert isinstance(c, TiktokenCounter), "the real o200k_base encoding must load from the cache dir"
  return c


def dump(part: types.Part) -> dict:
  return part.model_dump(mode="json", exclude_none=True)


def _png(width: int, height: int, payload: int) -> bytes:
  """A PNG header (signature + IHDR) followed by ``payload`` random bytes."""
  ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
  chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
  return b"\x89PNG\r\n\x1a\n" + chunk + random.Random(7).randbytes(payload)


# ---------------------------------------------------------------------------
# Multimodal function responses: media in FunctionResponse.parts
# ---------------------------------------------------------------------------


def test_function_response_inline_image_costs_as_an_image(counter):
  """A 200 KB screenshot returned by a tool is one 258-token image, not ~250k tokens of base64."""
  png = _png(100, 80, 200_000)
  fr = types.FunctionResponse(
      name="screenshot", response={"ok": True},
      parts=[types.FunctionResponsePart(inline_data=types.FunctionResponseBlob(mime_type="image/png", data=png))],
  )
  part = dump(types.Part(function_response=fr))
  json_only = canonical_json({"name": "screenshot", "response": {"ok": True}})
  assert count_part(part, counter) == counter.count(json_only) + IMAGE_TILE_TOKENS
  # Same as the image given as a top-level part next to the plain response.
  image = dump(types.Part(inline_data=types.Blob(mime_type="image/png", data=png)))
  plain = dump(types.Part(function_response=types.FunctionResponse(name="screenshot", response={"ok": True})))
  assert count_part(part, counter) == count_part(plain, counter) + count_part(image, counter)
  assert count_parts([part], counter) == count_part(part, counter)


def test_function_response_file_data_costs_as_media(counter):
  """A video referenced by a tool result is costed as a video, not as a short URI string."""
  fr = types.FunctionResponse(
      name="fetch", response={"status": "done"},
      parts=[types.FunctionResponsePart(
          file_data=types.FunctionResponseFileData(file_uri="gs://bucket/clip.mp4", mime_type="video/mp4"))],
  )
  part = dump(types.Part(function_response=fr))
  json_only = canonical_json({"name": "fetch", "response": {"status": "done"}})
  assert count_part(part, counter) == (
      counter.count(json_only) + VIDEO_UNKNOWN_SECONDS * VIDEO_TOKENS_PER_SECOND)
  # An image reference of unknown size costs the documented constant.
  fr_img = {"name": "f", "response": {}, "parts": [{"file_data": {"file_uri": "gs://b/x.png", "mime_type": "image/png"}}]}
  assert count_part({"function_response": fr_img}, counter) == (
      counter.count(canonical_json({"name": "f", "response": {}})) + UNKNOWN_MEDIA_TOKENS)


def test_function_response_without_media_parts_is_unchanged(counter):
  """Responses without parts (or with an empty list) are still their whole canonical JSON."""
  for fr in ({"name": "q", "response": {"a": 1}}, {"name": "q", "response": {"a": 1}, "parts": []}):
    assert count_part({"function_response": fr}, counter) == counter.count(canonical_json(fr))


# ---------------------------------------------------------------------------
# Bad input to counters gets a clear error
# ---------------------------------------------------------------------------


@pytest.fixture(params=["tiktoken", "estimate"])
def any_counter(request, counter):
  return counter if request.param == "tiktoken" else EstimatingCounter()


def test_count_many_rejects_a_bare_str(any_counter):
  """count_many("text") used to return one count per character, silently."""
  with pytest.raises(TypeError, match="sequence of str"):
    any_counter.count_many("hello world")


@pytest.mark.parametrize("bad", [None, b"abc", 5])
def test_counters_reject_non_str_texts(any_counter, bad):
  """EstimatingCounter.count(None) used to return 0; bytes raised AttributeError."""
  with pytest.raises(TypeError, match="str"):
    any_counter.count(bad)
  with pytest.raises(TypeError, match="str"):
    any_counter.count_many(["ok", bad])


def test_bytes_item_cannot_hit_a_long_texts_cache_key(counter):
  """Long texts are cached under a 16-byte digest; bytes equal to it must not return that count."""
  long_text = "zebra " * 100
  counter.count(long_text)
  key = counter._key(long_text)
  assert isinstance(key, bytes)
  with pytest.raises(TypeError, match="str"):
    counter.count_many([key])


@pytest.mark.parametrize("factor", [math.inf, math.nan, 0, -1.0])
def test_estimating_counter_rejects_non_finite_safety_factor(factor):
  """safety_factor=inf was accepted, then every count() raised OverflowError."""
  with pytest.raises(ValueError, match="safety_factor"):
    EstimatingCounter(safety_factor=factor)
  assert EstimatingCounter(safety_factor=2).count("hello") >= 2


# ---------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("margin", [math.inf, -math.inf, math.nan])
def test_scale_rejects_non_finite_margin(margin):
  """scale(margin=inf) returned inf and nan was silently read as 0."""
  cal = Calibrator()
  cal.observe("gemini-2.5-flash", 100, 120)
  with pytest.raises(ValueError, match="margin"):
    cal.scale("gemini-2.5-flash", margin)
  assert cal.scale("gemini-2.5-flash", -0.5) == pytest.approx(1.2)  # negatives still ignored


# ---------------------------------------------------------------------------
# Stated media sizes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("pages, expected", [(500.0, 500), ("500", 500), (2.5, 3), (3, 3), (-1, 10), ("many", 10)])
def test_pdf_page_count_is_read_like_other_numbers(counter, pages, expected):
  """A float or numeric-string page count (as width/height/duration accept) used to cost 10 pages."""
  part = {"inline_data": {"mime_type": "application/pdf", "data": "JVBERi0x"}, "pages": pages}
  assert count_part(part, counter) == expected * 258
