"""Pure costing rules: how many tokens a Part, a Content or a tool list costs.

Everything here works on the JSON dicts of ``google.genai`` objects
(``obj.model_dump(mode="json", exclude_none=True)``) so the core never imports
ADK/genai and a manifest can be re-costed offline. Token counting of text is
delegated to a ``TokenCounter`` (loaded by ``aether_frame.tokenizers``); media
is costed with Gemini's published per-modality rules.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

__all__ = [
    "TokenCounter",
    "EstimatingCounter",
    "MESSAGE_OVERHEAD",
    "IMAGE_TILE_TOKENS",
    "IMAGE_SMALL_MAX_PX",
    "IMAGE_TILE_PX",
    "IMAGE_UNKNOWN_TOKENS",
    "AUDIO_TOKENS_PER_SECOND",
    "VIDEO_TOKENS_PER_SECOND",
    "AUDIO_UNKNOWN_SECONDS",
    "VIDEO_UNKNOWN_SECONDS",
    "PDF_TOKENS_PER_PAGE",
    "PDF_UNKNOWN_PAGES",
    "UNKNOWN_MEDIA_TOKENS",
    "canonical_json",
    "image_tokens",
    "image_dimensions",
    "part_texts_and_fixed",
    "count_part",
    "count_parts",
    "count_content",
    "count_tool_declarations",
]


@runtime_checkable
class TokenCounter(Protocol):
  """What the compiler needs from a tokenizer; ``describe()`` goes in the manifest."""

  name: str
  exact: bool
  version: str

  def count(self, text: str) -> int:
    ...

  def count_many(self, texts: Sequence[str]) -> list[int]:
    ...

  def describe(self) -> dict[str, Any]:
    ...


# Per-message framing (role marker + turn delimiters). Chat tokenizers spend
# 3-4 tokens per turn on this (OpenAI's cookbook uses 3 + 1 for the role; Gemini's
# "<start_of_turn>role\n ... <end_of_turn>\n" is 4-5 pieces). We take 4 and let
# the Calibrator absorb the remainder.
MESSAGE_OVERHEAD = 4

# --- Images (Gemini 2.x rule) ------------------------------------------------
# Both sides <= 384 px: one 258-token unit. Otherwise the image is cut into
# 768x768 tiles, 258 tokens each.
IMAGE_TILE_TOKENS = 258
IMAGE_SMALL_MAX_PX = 384
IMAGE_TILE_PX = 768
# Dimensions unknown (file_data, unparseable header): 5 tiles. Covers the common
# camera/screenshot sizes after Gemini's downscaling (<= 1536x768 -> 2 tiles,
# 1536x1536 -> 4) with headroom, and is above Gemini 3's default 1120/image.
IMAGE_UNKNOWN_TOKENS = 5 * IMAGE_TILE_TOKENS  # 1290

# --- Audio / video -----------------------------------------------------------
AUDIO_TOKENS_PER_SECOND = 32
VIDEO_TOKENS_PER_SECOND = 263  # 258/frame at 1 fps + 32/s audio, as documented by Google
# Duration unknown: budget one minute. Any bigger guess would evict everything
# else from typical windows; the Calibrator corrects the ratio from real usage
# and callers who know the duration should put it in ``duration_seconds``.
AUDIO_UNKNOWN_SECONDS = 60  # -> 1,920 tokens
VIDEO_UNKNOWN_SECONDS = 60  # -> 15,780 tokens

# --- Documents / anything else -------------------------------------------------
PDF_TOKENS_PER_PAGE = 258  # Gemini rasterises each page as one image unit
PDF_UNKNOWN_PAGES = 10  # page count is not known without reading the whole file
# Media of an unknown modality: cost it like one image of unknown size.
UNKNOWN_MEDIA_TOKENS = IMAGE_UNKNOWN_TOKENS

# Part keys that are metadata, not model input (or consumed by the media rules).
_META_KEYS = frozenset({
    "thought",
    "thought_signature",
    "video_metadata",
    "media_resolution",
    "part_metadata",
    "duration_seconds",
    "width",
    "height",
})


def canonical_json(value: Any) -> str:
  """Key-order independent JSON, so equal calls cost equal tokens."""
  return json.dumps(
      value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
  )


# ---------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------


def image_tokens(width: int | None, height: int | None) -> int:
  """Gemini image cost: 258 if both sides <= 384 px, else 258 per 768x768 tile."""
  if not width or not height or width <= 0 or height <= 0:
    return IMAGE_UNKNOWN_TOKENS
  if width <= IMAGE_SMALL_MAX_PX and height <= IMAGE_SMALL_MAX_PX:
    return IMAGE_TILE_TOKENS
  tiles = math.ceil(width / IMAGE_TILE_PX) * math.ceil(height / IMAGE_TILE_PX)
  return tiles * IMAGE_TILE_TOKENS


_B64_URLSAFE = str.maketrans("-_", "+/")


class _Base64Window:
  """Random access into base64 text, decoding only the 4-char groups needed.

  Lets us read image headers (and walk JPEG segments) without decoding a
  multi-megabyte payload.
  """

  __slots__ = ("_s",)

  def __init__(self, s: str) -> None:
    self._s = s

  def read(self, offset: int, n: int) -> bytes:
    if offset < 0 or n <= 0:
      return b""
    start_group = offset // 3
    end_group = -(-(offset + n) // 3)
    chunk = self._s[start_group * 4 : end_group * 4]
    if not chunk:
      return b""
    chunk = chunk.translate(_B64_URLSAFE)
    chunk += "=" * (-len(chunk) % 4)
    try:
      raw = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
      return b""
    skip = offset - start_group * 3
    return raw[skip : skip + n]


class _BytesWindow:
  __slots__ = ("_b",)

  def __init__(self, b: bytes) -> None:
    self._b = b

  def read(self, offset: int, n: int) -> bytes:
    return self._b[offset : offset + n]


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_MAX_SEGMENTS = 256


def _dims_from_window(w: Any) -> tuple[int, int] | None:
  head = w.read(0, 32)
  if len(head) < 10:
    return None
  if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
  if head[:6] in (b"GIF87a", b"GIF89a"):
    return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
  if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
    kind = head[12:16]
    if kind == b"VP8X":
      return (
          int.from_bytes(head[24:27], "little") + 1,
          int.from_bytes(head[27:30], "little") + 1,
      )
    if kind == b"VP8L" and head[20] == 0x2F:
      bits = int.from_bytes(head[21:25], "little")
      return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 ":
      return (
          int.from_bytes(head[26:28], "little") & 0x3FFF,
          int.from_bytes(head[28:30], "little") & 0x3FFF,
      )
    return None
  if head[:2] == b"\xff\xd8":
    return _jpeg_dims(w)
  return None


def _jpeg_dims(w: Any) -> tuple[int, int] | None:
  """Walks JPEG segment headers (2-4 bytes each) until a SOFn marker."""
  pos = 2
  for _ in range(_JPEG_MAX_SEGMENTS):
    hdr = w.read(pos, 4)
    if len(hdr) < 2 or hdr[0] != 0xFF:
      return None
    marker = hdr[1]
    if marker == 0xFF:  # fill byte
      pos += 1
      continue
    if marker in (0x01,) or 0xD0 <= marker <= 0xD8:  # standalone markers
      pos += 2
      continue
    if marker in (0xD9, 0xDA):  # EOI / start of scan before any SOF
      return None
    if len(hdr) < 4:
      return None
    seg_len = int.from_bytes(hdr[2:4], "big")
    if marker in _JPEG_SOF:
      sof = w.read(pos + 5, 4)
      if len(sof) < 4:
        return None
      return int.from_bytes(sof[2:4], "big"), int.from_bytes(sof[0:2], "big")
    if seg_len < 2:
      return None
    pos += 2 + seg_len
  return None


def image_dimensions(data: str | bytes | None) -> tuple[int, int] | None:
  """(width, height) from PNG/GIF/WebP/JPEG header bytes of base64 or raw data."""
  if not data:
    return None
  try:
    window = _BytesWindow(data) if isinstance(data, (bytes, bytearray)) else _Base64Window(data)
    return _dims_from_window(window)
  except Exception:  # malformed headers fall back to the unknown-size constant
    return None


# ---------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------

_DURATION_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*s?\s*$")


def _seconds(value: Any) -> float | None:
  """Parses protobuf-JSON durations ("1.5s") and plain numbers."""
  if value is None or isinstance(value, bool):
    return None
  if isinstance(value, (int, float)):
    return float(value)
  if isinstance(value, str):
    m = _DURATION_RE.match(value)
    if m:
      return float(m.group(1))
  return None


def _duration(part: Mapping[str, Any], blob: Mapping[str, Any]) -> float | None:
  for holder in (part, blob):
    d = _seconds(holder.get("duration_seconds"))
    if d is not None and d >= 0:
      return d
  vm = part.get("video_metadata")
  if isinstance(vm, Mapping):
    end = _seconds(vm.get("end_offset"))
    if end is not None:
      start = _seconds(vm.get("start_offset")) or 0.0
      if end >= start:
        return end - start
  return None


def _fps(part: Mapping[str, Any]) -> float:
  vm = part.get("video_metadata")
  if isinstance(vm, Mapping):
    fps = _seconds(vm.get("fps"))
    if fps and fps > 1.0:
      return fps
  return 1.0


# ---------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------


def _media_tokens(part: Mapping[str, Any], key: str, texts: list[str]) -> int:
  """Fixed cost of inline_data/file_data; text/* inline payloads go to ``texts``."""
  blob = part.get(key)
  if not isinstance(blob, Mapping):
    texts.append(canonical_json(blob))
    return 0
  mime = str(blob.get("mime_type") or "").lower()
  data = blob.get("data") if key == "inline_data" else None
  if mime.startswith("image/"):
    width = part.get("width", blob.get("width"))
    height = part.get("height", blob.get("height"))
    if not (width and height) and data:
      dims = image_dimensions(data)
      if dims:
        width, height = dims
    try:
      return image_tokens(int(width) if width else None, int(height) if height else None)
    except (TypeError, ValueError):
      return IMAGE_UNKNOWN_TOKENS
  if mime.startswith("audio/"):
    d = _duration(part, blob)
    return math.ceil((AUDIO_UNKNOWN_SECONDS if d is None else d) * AUDIO_TOKENS_PER_SECOND)
  if mime.startswith("video/"):
    d = _duration(part, blob)
    # fps > 1 samples more frames; scale conservatively (fps < 1 is not discounted).
    per_second = VIDEO_TOKENS_PER_SECOND * _fps(part)
    return math.ceil((VIDEO_UNKNOWN_SECONDS if d is None else d) * per_second)
  if mime == "application/pdf":
    pages = blob.get("pages", part.get("pages"))
    if not isinstance(pages, int) or isinstance(pages, bool) or pages < 0:
      pages = PDF_UNKNOWN_PAGES
    return pages * PDF_TOKENS_PER_PAGE
  if data and (mime.startswith("text/") or mime in ("application/json", "application/xml")):
    # Gemini reads text payloads as text: count the decoded characters.
    try:
      raw = data if isinstance(data, (bytes, bytearray)) else base64.b64decode(
          str(data).translate(_B64_URLSAFE) + "=" * (-len(str(data)) % 4)
      )
      texts.append(bytes(raw).decode("utf-8", errors="replace"))
      return 0
    except (binascii.Error, ValueError):
      pass
  return UNKNOWN_MEDIA_TOKENS


def part_texts_and_fixed(part: Mapping[str, Any]) -> tuple[list[str], int]:
  """Splits a Part dict into texts to tokenize and a fixed (media) token cost.

  Exposed so callers can batch many parts into one ``count_many`` call.
  """
  texts: list[str] = []
  fixed = 0
  unknown: dict[str, Any] = {}
  for key, value in part.items():
    if key in _META_KEYS or value is None:
      continue
    if key == "text":
      texts.append(value if isinstance(value, str) else str(value))
    elif key in ("function_call", "function_response"):
      texts.append(canonical_json(value))
    elif key == "executable_code":
      code = value.get("code") if isinstance(value, Mapping) else value
      texts.append(code if isinstance(code, str) else canonical_json(value))
    elif key == "code_execution_result":
      out = value.get("output") if isinstance(value, Mapping) else value
      texts.append(out if isinstance(out, str) else canonical_json(value))
    elif key in ("inline_data", "file_data"):
      fixed += _media_tokens(part, key, texts)
    else:
      unknown[key] = value
  if unknown:
    texts.append(canonical_json(unknown))
  return texts, fixed


def count_part(part: Mapping[str, Any], counter: TokenCounter) -> int:
  """Tokens of one Part dict (see module docstring for the per-field rules)."""
  texts, fixed = part_texts_and_fixed(part)
  if not texts:
    return fixed
  return fixed + sum(counter.count_many(texts))


def count_parts(parts: Iterable[Mapping[str, Any]] | None, counter: TokenCounter) -> int:
  """Tokens of a list of Part dicts, with one ``count_many`` call for all texts."""
  return count_parts_many([parts], counter)[0]


def count_parts_many(
    part_lists: Sequence[Iterable[Mapping[str, Any]] | None], counter: TokenCounter
) -> list[int]:
  """Tokens of many Part lists with a single ``count_many`` call.

  A cold history of thousands of events is costed in one pass over the
  counter's cache instead of one call per event.
  """
  texts: list[str] = []
  spans: list[tuple[int, int, int]] = []
  for parts in part_lists:
    start, fixed = len(texts), 0
    for part in parts or ():
      t, f = part_texts_and_fixed(part)
      texts.extend(t)
      fixed += f
    spans.append((start, len(texts), fixed))
  counts = counter.count_many(texts) if texts else []
  return [fixed + sum(counts[a:b]) for a, b, fixed in spans]


def count_content(content: Mapping[str, Any], counter: TokenCounter) -> int:
  """Tokens of one Content dict: MESSAGE_OVERHEAD + its parts."""
  return MESSAGE_OVERHEAD + count_parts(content.get("parts") or (), counter)


def count_tool_declarations(decls: Sequence[Mapping[str, Any]] | None, counter: TokenCounter) -> int:
  """Tokens of FunctionDeclaration dicts, each costed as its canonical JSON schema."""
  if not decls:
    return 0
  return sum(counter.count_many([canonical_json(d) for d in decls]))


# ---------------------------------------------------------------------------
# Fallback counter
# ---------------------------------------------------------------------------


# Approximate BPE pre-tokenisation pieces: digit groups of <= 3, single CJK
# characters (kana, Han, Hangul: usually a token each), other letter runs,
# single punctuation/symbol chars, and whitespace split the way tiktoken's
# patterns split it (newline runs, runs before a space, single spaces). Nearly
# every piece is at least one token, so this catches what bytes/3 misses:
# numbers and punctuation-dense text such as JSON arrays (", 0" is 3 tokens in
# 3 bytes), and CJK mixed with them ("0\n0\n的的的的" is 8 tokens in 16 bytes).
# ~25 us per 300 chars; only used when no encoding loads.
_CJK = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff65-\uff9f\U00020000-\U0002ffff"
)  # Hangul Jamo, kana, Han (BMP and the supplementary planes), Hangul syllables, half-width kana
_PIECES_RE = re.compile(rf"\d{{1,3}}|[{_CJK}]|[^\W\d_{_CJK}]+|[^\w\s]|\s*[\r\n]+|\s+(?!\S)|\s")


class EstimatingCounter:
  """Conservative counter used when no tokenizer encoding can be loaded.

  ceil(utf8_bytes / 3 * safety_factor). BPE vocabularies average ~4 bytes per
  token on English prose and code and ~3 bytes (one char) per token on CJK, so
  bytes/3 plus 25% over-estimates realistic text and budgets err on the side of
  fitting the window. bytes/3 alone under-counts digit/punctuation-dense text
  (measured: 12% of 300-char chunks of stdlib code, JSON and docs, by up to
  2.4x on numeric arrays), so the result is floored at ceil(pieces *
  safety_factor), see ``_PIECES_RE``. Remaining misses are rare symbols
  (braille, math) and rare Hangul split into byte tokens, plus, for
  cl100k_base only, common Han characters that it splits into 2-3 byte tokens.
  It is an estimate, not a bound: ``exact=False`` marks manifests costed so.
  """

  exact = False

  def __init__(self, safety_factor: float = 1.25, fallback_for: str | None = None,
               reason: str | None = None) -> None:
    if not safety_factor > 0:
      raise ValueError("safety_factor must be > 0")
    self.safety_factor = float(safety_factor)
    self.fallback_for = fallback_for
    self.reason = reason
    self.name = "estimate:utf8_bytes/3"
    self.version = "3"

  def count(self, text: str) -> int:
    if not text:
      return 0
    n = len(text.encode("utf-8", errors="surrogatepass"))
    by_bytes = math.ceil(n / 3 * self.safety_factor)
    by_pieces = math.ceil(len(_PIECES_RE.findall(text)) * self.safety_factor)
    return max(by_bytes, by_pieces)
  def count_many(self, texts: Sequence[str]) -> list[int]:
    return [self.count(t) for t in texts]

  def describe(self) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": self.name,
        "exact": False,
        "version": self.version,
        "safety_factor": self.safety_factor,
    }
    if self.fallback_for:
      d["fallback_for"] = self.fallback_for
    if self.reason:
      d["reason"] = self.reason
    return d

  def __repr__(self) -> str:
    return f"EstimatingCounter(safety_factor={self.safety_factor})"
