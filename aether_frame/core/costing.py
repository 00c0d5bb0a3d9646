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
import sys
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from .media_probe import B64_URLSAFE, b64_slice, iso_boxes, media_duration, pdf_pages
from .memo import BoundedMemo

__all__ = [
    "TokenCounter",
    "EstimatingCounter",
    "MESSAGE_OVERHEAD",
    "IMAGE_TILE_TOKENS",
    "IMAGE_SMALL_MAX_PX",
    "IMAGE_TILE_PX",
    "IMAGE_UNKNOWN_TOKENS",
    "IMAGE_MAX_PX",
    "IMAGE_MAX_TOKENS",
    "AUDIO_TOKENS_PER_SECOND",
    "VIDEO_TOKENS_PER_SECOND",
    "AUDIO_UNKNOWN_SECONDS",
    "VIDEO_UNKNOWN_SECONDS",
    "AUDIO_MAX_SECONDS",
    "VIDEO_MAX_SECONDS",
    "VIDEO_MAX_FPS",
    "PDF_TOKENS_PER_PAGE",
    "PDF_UNKNOWN_PAGES",
    "PDF_MAX_PAGES",
    "UNKNOWN_MEDIA_TOKENS",
    "MediaRules",
    "GEMINI_2_MEDIA",
    "GEMINI_3_MEDIA",
    "MediaCounter",
    "media_rules_for_model",
    "media_rules_named",
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
# Both sides <= 384 px: one 258-token unit. Otherwise the image is scaled down
# to fit 3072x3072 (aspect ratio kept; "larger images are scaled down and
# padded to fit a maximum resolution of 3072 x 3072", Gemini input-file docs)
# and cut into 768x768 tiles, 258 tokens each: at most 16 tiles.
IMAGE_TILE_TOKENS = 258
IMAGE_SMALL_MAX_PX = 384
IMAGE_TILE_PX = 768
IMAGE_MAX_PX = 3072
IMAGE_MAX_TOKENS = (IMAGE_MAX_PX // IMAGE_TILE_PX) ** 2 * IMAGE_TILE_TOKENS  # 4,128
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
# Bounds for durations a part claims: at least one second (a clip is never
# free, like a PDF costs at least a page); at most what the model takes.
# Non-finite ones are unusable and cost the unknown-duration guess.
AUDIO_MAX_SECONDS = 34_200  # 9.5 h: Gemini's documented maximum of audio per prompt
VIDEO_MAX_SECONDS = 21_600  # 6 h: the longest video Gemini documents (low resolution, 2M window)
VIDEO_MAX_FPS = 24.0  # VideoMetadata.fps: "The valid range is (0.0, 24.0]"

# --- Documents / anything else -------------------------------------------------
PDF_TOKENS_PER_PAGE = 258  # Gemini rasterises each page as one image unit
PDF_UNKNOWN_PAGES = 10  # page count is not known without reading the whole file
PDF_MAX_PAGES = 1000  # "Gemini supports a maximum of 1,000 document pages"; 0 pages costs 1
# Media of an unknown modality, and text/* or JSON file_data (no payload to
# count, size unknown): cost it like one image of unknown size. For text this
# is a guess (~5 KB of prose), not a bound: inline text to have it counted.
UNKNOWN_MEDIA_TOKENS = IMAGE_UNKNOWN_TOKENS


@dataclass(frozen=True)
class MediaRules:
  """How a model family charges images, PDF pages and video frames (text is the counter's job).

  Gemini 3 spends a fixed budget per image, page or frame, set by the
  ``media_resolution`` of the part or else of the request (HIGH, 1,120 tokens,
  for an image by default; MEDIUM, 560, for a PDF page; 70 per video frame,
  280 at HIGH), where Gemini 2.x charged 258 per 768 px tile: a small image
  costs 4x more on Gemini 3, so costing it by the 2.x rule under-counts.
  ``levels`` empty: the 2.x rule. Video costs the larger of the two rules (the
  2.x 263 tokens a second is above Gemini 3's default, not above its HIGH);
  audio keeps its 32 tokens a second on both.
  """

  name: str
  levels: Mapping[str, int] = field(default_factory=dict)
  """``media_resolution`` level -> tokens per image or page; empty for the 2.x rule."""
  image_default: str = ""
  pdf_default: str = ""
  video_levels: Mapping[str, int] = field(default_factory=dict)
  """``media_resolution`` level -> tokens per video frame."""
  video_default: str = ""
  request_level: str = ""
  """The request's own ``media_resolution`` (``GenerateContentConfig``): the default
  for every part that sets none, as the API applies it."""

  def for_request(self, level: Any) -> "MediaRules":
    """These rules under a request-wide ``media_resolution`` (unknown levels: unchanged)."""
    level = getattr(level, "value", level)
    if not self.levels or not isinstance(level, str) or level not in self.levels or level == self.request_level:
      return self
    return dataclasses.replace(self, name=f"{self.name.split('@')[0]}@{level}", request_level=level)


GEMINI_2_MEDIA = MediaRules("gemini-2")
GEMINI_3_MEDIA = MediaRules(
    "gemini-3",
    levels={
        "MEDIA_RESOLUTION_LOW": 280,
        "MEDIA_RESOLUTION_MEDIUM": 560,
        "MEDIA_RESOLUTION_HIGH": 1120,
        "MEDIA_RESOLUTION_ULTRA_HIGH": 2240,
    },
    image_default="MEDIA_RESOLUTION_HIGH",
    pdf_default="MEDIA_RESOLUTION_MEDIUM",
    video_levels={
        "MEDIA_RESOLUTION_LOW": 70,
        "MEDIA_RESOLUTION_MEDIUM": 70,
        "MEDIA_RESOLUTION_HIGH": 280,
        "MEDIA_RESOLUTION_ULTRA_HIGH": 280,
    },
    video_default="MEDIA_RESOLUTION_MEDIUM",
)


def media_rules_named(name: str) -> MediaRules:
  """The rules a manifest's ``tokenizer.media`` names (``gemini-3@MEDIA_RESOLUTION_HIGH``)."""
  family, _, level = name.partition("@")
  base = {r.name: r for r in (GEMINI_2_MEDIA, GEMINI_3_MEDIA)}.get(family)
  if base is None or (level and level not in base.levels):
    raise ValueError(f"unknown media rules {name!r} in manifest")
  return base.for_request(level) if level else base


_GEMINI_3_MODEL_RE = re.compile(r"gemini-(?:3(?:[.-]|$)|(?:flash|flash-lite|pro)-latest$)")


def media_rules_for_model(model: str | None) -> MediaRules:
  """Gemini 3.x (and the ``-latest`` aliases, which follow the newest family): Gemini 3
  rules; every other model: the 2.x rule the costing had before model awareness."""
  name = (model or "").rsplit("/", 1)[-1].lower()
  return GEMINI_3_MEDIA if _GEMINI_3_MODEL_RE.match(name) else GEMINI_2_MEDIA


def media_rules_of(counter: Any) -> MediaRules:
  return getattr(counter, "media_rules", None) or GEMINI_2_MEDIA


def _level_tokens(part: Mapping[str, Any], rules: MediaRules, default: str, table: Mapping[str, int] | None = None) -> int:
  """Tokens of one image, page or frame under level-based rules: the part's own
  ``media_resolution`` (``num_tokens`` when given, else its level), else the
  request's level, else ``default``."""
  table = rules.levels if table is None else table
  res = part.get("media_resolution")
  if isinstance(res, Mapping):
    n = _finite(res.get("num_tokens"))
    if n is not None and n >= 1:
      return math.ceil(n)
    level = res.get("level")
    if isinstance(level, str) and level in table:
      return table[level]
  return table.get(rules.request_level) or table[default]


class MediaCounter:
  """A ``TokenCounter`` that costs media by ``rules``: the same text counts
  (and cache) as ``base``; the manifest's tokenizer names the rules."""

  def __init__(self, base: Any, rules: MediaRules) -> None:
    self.base = base
    self.media_rules = rules
    self.name = base.name
    self.exact = base.exact
    self.version = base.version

  def count(self, text: str) -> int:
    return self.base.count(text)

  def count_many(self, texts: Sequence[str]) -> list[int]:
    return self.base.count_many(texts)

  def describe(self) -> dict[str, Any]:
    return {**self.base.describe(), "media": self.media_rules.name}

  def __getattr__(self, name: str) -> Any:  # clear_cache, encoding_name, ...
    if name.startswith("__") or name == "base":  # copy/pickle probe a bare instance: no recursion
      raise AttributeError(name)
    return getattr(self.base, name)

  def __repr__(self) -> str:
    return f"MediaCounter({self.base!r}, {self.media_rules.name!r})"


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
    "pages",
})


def canonical_json(value: Any) -> str:
  """Key-order independent JSON, so equal calls cost equal tokens."""
  return json.dumps(
      value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
  )


# ---------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------


def _finite(value: Any) -> float | None:
  """A number (int, float or numeric string) as a finite float; None if unusable.

  Ints too large for a float become +-float max, so they clamp like any other
  huge value; NaN and infinities are unusable (no meaning to clamp).
  """
  if isinstance(value, bool) or not isinstance(value, (int, float, str)):
    return None
  try:
    f = float(value)
  except OverflowError:  # int beyond float range
    return sys.float_info.max if value > 0 else -sys.float_info.max
  except ValueError:
    return None
  return f if math.isfinite(f) else None


def _pixels(value: Any) -> float | None:
  px = _finite(value)
  return px if px is not None and px > 0 else None


def _tiles(px: float) -> int:
  # The tolerance absorbs float error of the downscale (3072.0000000004 px is 4 tiles).
  return min(IMAGE_MAX_PX // IMAGE_TILE_PX, max(1, math.ceil(px / IMAGE_TILE_PX - 1e-9)))


def image_tokens(width: Any, height: Any) -> int:
  """Gemini image cost: 258 if both sides <= 384 px, else 258 per 768x768 tile
  after scaling down to fit 3072x3072 (so at most ``IMAGE_MAX_TOKENS``).
  Missing, non-positive or non-finite sides cost ``IMAGE_UNKNOWN_TOKENS``."""
  w, h = _pixels(width), _pixels(height)
  if w is None or h is None:
    return IMAGE_UNKNOWN_TOKENS
  if w <= IMAGE_SMALL_MAX_PX and h <= IMAGE_SMALL_MAX_PX:
    return IMAGE_TILE_TOKENS
  scale = min(1.0, IMAGE_MAX_PX / max(w, h))
  return _tiles(w * scale) * _tiles(h * scale) * IMAGE_TILE_TOKENS


class _Base64Window:
  """Random access into base64 text, decoding only the 4-char groups needed.

  Lets us read image headers (and walk JPEG segments) without decoding a
  multi-megabyte payload.
  """

  __slots__ = ("_s",)

  def __init__(self, s: str) -> None:
    self._s = s

  def read(self, offset: int, n: int) -> bytes:
    return b64_slice(self._s, offset, n, validate=False)


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
  if head[4:8] == b"ftyp":
    return _heif_dims(w)
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


_HEIF_MAX_BOXES = 64
_HEIF_MAX_PROPERTIES = 1024
_HEIF_IPMA_MAX_BYTES = 1 << 16
_HEIF_TOP_END = 1 << 62  # a window does not know its size: top-level boxes end where reads do


def _heif_dims(w: Any) -> tuple[int, int] | None:
  """HEIC/HEIF/AVIF: the primary item's ``ispe`` (meta > iprp > ipco), else the largest.

  An iPhone photo is a grid of 512x512 tiles, each with its own small ispe;
  the grid item that ``pitm`` names carries the full size, which Gemini sees.
  """
  meta = next(((b, e) for kind, b, e in iso_boxes(w, 0, _HEIF_TOP_END, _HEIF_MAX_BOXES) if kind == b"meta"), None)
  if meta is None:
    return None
  primary = None
  sizes: dict[int, tuple[int, int]] = {}  # 1-based property index -> (width, height)
  links: dict[int, list[int]] = {}  # item -> its property indices
  for kind, b, e in iso_boxes(w, meta[0] + 4, meta[1], _HEIF_MAX_BOXES):  # meta is a full box
    if kind == b"pitm":
      h = w.read(b, 8)
      primary = int.from_bytes(h[4:6] if h[:1] == b"\x00" else h[4:8], "big") if len(h) >= 6 else None
    elif kind == b"iprp":
      for k2, b2, e2 in iso_boxes(w, b, e, _HEIF_MAX_BOXES):
        if k2 == b"ipco":
          for i, (k3, b3, _) in enumerate(iso_boxes(w, b2, e2, _HEIF_MAX_PROPERTIES), 1):
            h = w.read(b3, 12) if k3 == b"ispe" else b""
            if len(h) == 12:
              sizes[i] = int.from_bytes(h[4:8], "big"), int.from_bytes(h[8:12], "big")
        elif k2 == b"ipma":
          links.update(_heif_ipma(w.read(b2, min(e2 - b2, _HEIF_IPMA_MAX_BYTES))))
  mine = [sizes[i] for i in links.get(primary, ()) if i in sizes] if primary is not None else []
  found = mine or list(sizes.values())
  return max(found, key=lambda s: s[0] * s[1]) if found else None


def _heif_ipma(h: bytes) -> dict[int, list[int]]:
  """item ID -> property indices, from an ipma body (a cut body gives the entries it holds)."""
  links: dict[int, list[int]] = {}
  if len(h) < 8:
    return links
  id_len = 2 if h[0] == 0 else 4
  wide = h[3] & 1  # 15-bit property indices
  pos = 8
  for _ in range(min(int.from_bytes(h[4:8], "big"), _HEIF_MAX_PROPERTIES)):
    if pos + id_len + 1 > len(h):
      break
    item = int.from_bytes(h[pos : pos + id_len], "big")
    n = h[pos + id_len]
    pos += id_len + 1
    step = 2 if wide else 1
    raw = h[pos : pos + n * step]
    pos += n * step
    links[item] = [int.from_bytes(raw[j : j + step], "big") & (0x7FFF if wide else 0x7F)
                   for j in range(0, len(raw) - step + 1, step)]
  return links


def image_dimensions(data: str | bytes | None) -> tuple[int, int] | None:
  """(width, height) from PNG/GIF/WebP/JPEG/HEIF/AVIF header bytes of base64 or raw data."""
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
  """Parses protobuf-JSON durations ("1.5s") and plain numbers; None if unusable.

  Always finite: a duration string too long for a float ("999...9s", valid
  for genai) becomes +-float max and is clamped by the caller.
  """
  if isinstance(value, str):
    m = _DURATION_RE.match(value)
    if not m:
      return None
    f = float(m.group(1))
    return f if math.isfinite(f) else math.copysign(sys.float_info.max, f)
  return _finite(value)


def _duration(part: Mapping[str, Any], blob: Mapping[str, Any]) -> float | None:
  for holder in (part, blob):
    d = _seconds(holder.get("duration_seconds"))
    if d is not None and d >= 0:
      return d
  vm = part.get("video_metadata")
  if isinstance(vm, Mapping):
    end = _seconds(vm.get("end_offset"))
    if end is not None:
      # A clip cannot start before the video does: a negative start adds nothing.
      start = max(0.0, _seconds(vm.get("start_offset")) or 0.0)
      if end >= start:
        return end - start
  return None


def _fps(part: Mapping[str, Any]) -> float:
  """Sampled frames per second, in [1, 24]: lower rates are not discounted."""
  vm = part.get("video_metadata")
  if isinstance(vm, Mapping):
    fps = _finite(vm.get("fps"))
    if fps is not None and fps > 1.0:
      return min(fps, VIDEO_MAX_FPS)
  return 1.0


# ---------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------


_PDF_PAGES = BoundedMemo(64)
"""Page counts by payload (length and hash: no reference to megabytes kept). One user
turn's PDF is costed by the compile, the payload frame and the guard, on every call."""


def _pdf_pages(data: Any) -> float | None:
  if not isinstance(data, (str, bytes)):
    return pdf_pages(data, PDF_MAX_PAGES)
  # hash(), salted per process, only keys this in-process memo (never output), and a str or
  # bytes object caches it: the same payload costed again is O(1), not a pass over megabytes.
  return _PDF_PAGES.get((type(data), len(data), hash(data)), lambda: (pdf_pages(data, PDF_MAX_PAGES),))[0]


_YOUTUBE = re.compile(r"^(?:https?://)?(?:[a-z0-9-]+\.)*(?:youtube\.com|youtu\.be)(?:[/?#:]|$)", re.IGNORECASE)
_EXTENSION_MIME = {
    "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
    "heic": "image/heic", "heif": "image/heif", "avif": "image/avif", "pdf": "application/pdf",
    "mp3": "audio/mpeg", "wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg", "m4a": "audio/mp4",
    "aac": "audio/aac", "mp4": "video/mp4", "mov": "video/quicktime", "webm": "video/webm", "mkv": "video/x-matroska",
    "avi": "video/x-msvideo", "mpeg": "video/mpeg", "mpg": "video/mpeg",
}


def _mime_of(part: Mapping[str, Any], key: str, blob: Mapping[str, Any]) -> str:
  """The part's mime type; without one, what the part shows it is.

  Gemini takes a YouTube URL as ``file_data`` with no mime type, and a clip
  states its range in ``video_metadata``: costed as an unknown blob, five
  minutes of video were charged 1,290 tokens instead of ~79,000. A fixed
  table, not ``mimetypes``, which reads the machine's own files.
  """
  mime = str(blob.get("mime_type") or "").lower()
  if mime:
    return mime
  if part.get("video_metadata") is not None:
    return "video/*"
  uri = blob.get("file_uri") if key == "file_data" else None
  if isinstance(uri, str) and uri:
    if _YOUTUBE.match(uri.strip()):
      return "video/*"
    path = uri.split("?", 1)[0].split("#", 1)[0].rsplit("/", 1)[-1]
    if "." in path:
      return _EXTENSION_MIME.get(path.rsplit(".", 1)[1].lower(), "")
  return ""


def _media_tokens(part: Mapping[str, Any], key: str, texts: list[str], rules: MediaRules = GEMINI_2_MEDIA) -> int:
  """Fixed cost of inline_data/file_data; text/* inline payloads go to ``texts``."""
  blob = part.get(key)
  if not isinstance(blob, Mapping):
    texts.append(canonical_json(blob))
    return 0
  mime = _mime_of(part, key, blob)
  data = blob.get("data") if key == "inline_data" else None
  if mime.startswith("image/"):
    if rules.levels:
      return _level_tokens(part, rules, rules.image_default)
    width = part.get("width", blob.get("width"))
    height = part.get("height", blob.get("height"))
    if (_pixels(width) is None or _pixels(height) is None) and data:
      dims = image_dimensions(data)
      if dims:
        width, height = dims
    return image_tokens(width, height)
  if mime.startswith("audio/"):
    d = _duration(part, blob)
    if d is None and data:  # the header states it: better than the one-minute guess
      d = media_duration(data, mime)
    seconds = AUDIO_UNKNOWN_SECONDS if d is None else min(max(d, 1.0), AUDIO_MAX_SECONDS)
    return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)
  if mime.startswith("video/"):
    d = _duration(part, blob)
    if d is None and data:
      d = media_duration(data, mime)
    seconds = VIDEO_UNKNOWN_SECONDS if d is None else min(max(d, 1.0), VIDEO_MAX_SECONDS)
    # fps > 1 samples more frames; scale conservatively (fps < 1 is not discounted).
    tokens = math.ceil(seconds * VIDEO_TOKENS_PER_SECOND * _fps(part))
    if rules.video_levels:  # Gemini 3: per frame by resolution, plus the audio track
      frame = _level_tokens(part, rules, rules.video_default, rules.video_levels)
      tokens = max(tokens, math.ceil(seconds * (frame * _fps(part) + AUDIO_TOKENS_PER_SECOND)))
    return tokens
  if mime == "application/pdf":
    # Read like width/height: 500.0 or "500" pages used to cost the 10-page guess.
    pages = _finite(blob.get("pages", part.get("pages")))
    if (pages is None or pages < 0) and data:
      # genai's Part/Blob has no ``pages`` field: for real parts, the bytes say.
      pages = _pdf_pages(data)
    if pages is None or pages < 0:
      pages = PDF_UNKNOWN_PAGES
    per_page = _level_tokens(part, rules, rules.pdf_default) if rules.levels else PDF_TOKENS_PER_PAGE
    return min(max(math.ceil(pages), 1), PDF_MAX_PAGES) * per_page
  if data and (mime.startswith("text/") or mime in ("application/json", "application/xml")):
    # Gemini reads text payloads as text: count the decoded characters.
    try:
      raw = data if isinstance(data, (bytes, bytearray)) else base64.b64decode(
          str(data).translate(B64_URLSAFE) + "=" * (-len(str(data)) % 4)
      )
      texts.append(bytes(raw).decode("utf-8", errors="replace"))
      return 0
    except (binascii.Error, ValueError):
      pass
  return max(UNKNOWN_MEDIA_TOKENS, _level_tokens(part, rules, rules.image_default)) if rules.levels else UNKNOWN_MEDIA_TOKENS


def _function_response_tokens(value: Any, texts: list[str], rules: MediaRules = GEMINI_2_MEDIA) -> int:
  """Fixed cost of a function_response; its JSON (minus ``parts``) goes to ``texts``.

  A multimodal tool result carries media in ``parts`` (inline_data/file_data),
  which the model reads as media: they are costed by the media rules, like
  top-level parts. As JSON text, a base64 image would cost ~1 token per 1.3
  bytes (and take seconds to encode) and a file_data reference a few tokens.
  """
  sub_parts = value.get("parts") if isinstance(value, Mapping) else None
  if not sub_parts or not isinstance(sub_parts, (list, tuple)):
    texts.append(canonical_json(value))
    return 0
  texts.append(canonical_json({k: v for k, v in value.items() if k != "parts"}))
  fixed = 0
  for sub in sub_parts:
    if isinstance(sub, Mapping):
      t, f = part_texts_and_fixed(sub, rules)
      texts.extend(t)
      fixed += f
    else:
      texts.append(canonical_json(sub))
  return fixed


def part_texts_and_fixed(part: Mapping[str, Any], rules: MediaRules = GEMINI_2_MEDIA) -> tuple[list[str], int]:
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
    elif key == "function_call":
      texts.append(canonical_json(value))
    elif key == "function_response":
      fixed += _function_response_tokens(value, texts, rules)
    elif key == "executable_code":
      code = value.get("code") if isinstance(value, Mapping) else value
      texts.append(code if isinstance(code, str) else canonical_json(value))
    elif key == "code_execution_result":
      out = value.get("output") if isinstance(value, Mapping) else value
      texts.append(out if isinstance(out, str) else canonical_json(value))
    elif key in ("inline_data", "file_data"):
      fixed += _media_tokens(part, key, texts, rules)
    else:
      unknown[key] = value
  if unknown:
    texts.append(canonical_json(unknown))
  return texts, fixed


def count_part(part: Mapping[str, Any], counter: TokenCounter) -> int:
  """Tokens of one Part dict (see module docstring for the per-field rules)."""
  texts, fixed = part_texts_and_fixed(part, media_rules_of(counter))
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
  rules = media_rules_of(counter)
  for parts in part_lists:
    start, fixed = len(texts), 0
    for part in parts or ():
      t, f = part_texts_and_fixed(part, rules)
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

# Why the estimate below is an upper bound for o200k_base and cl100k_base.
#
# Both encodings first split text into pieces with a regex, then run BPE on the
# UTF-8 bytes of each piece, and BPE stops only when no two adjacent parts
# concatenate to a token. Hence (checked by dynamic programming in
# tests/test_costing_bounds.py) a piece costs at most 1 + the sum over the
# positions between its bytes of 2/3 where the two bytes form a token "xy"
# (and " xy" is one too) and 1 elsewhere; a leading space adds at most 1/3.
# So we charge every UTF-8 byte one token (any script, emoji, private use...)
# and refund 1/3 per adjacent pair of lowercase ASCII letters that is a token
# in both encodings, with and without a leading space, unless a piece boundary
# falls between them (o200k splits letter runs only at lower->Upper; both end
# a piece after a contraction such as "'ll", so "'llx" gets no refund). And:
# - a space before an ASCII letter costs 1/3, before ASCII punctuation 0
#   (" x" and " ." are tokens in both encodings, so BPE folds it in);
# - ASCII digits cost one token per group of three (each group is its own
#   piece, and all of 0-999 are single tokens), unless the run touches a
#   non-ASCII character (a numeral like "٣" would regroup them: per digit);
# - a run of n spaces / tabs / newlines costs 1 + n // 64 / 8 / 8 (verified
#   to n = 20,000 in both encodings); a run of spaces or tabs costs 1 more
#   when the regexes split its last character off (before a digit or a
#   non-ASCII character; for tabs before anything but whitespace). These run
#   costs and "a piece of mixed whitespace costs no more than its runs" are
#   the only measured (not derived) parts.
# The vocabulary facts are re-checked against the real encodings in the tests.
# Cost: ~2.9x the real count on English prose and code, ~3x on JSON; 2.5-5x on
# non-Latin scripts (one token per byte is what random text in them needs).

# Lowercase letter pairs that are NOT single tokens both bare and after a
# space, in both o200k_base and cl100k_base; every other pair earns the 1/3 refund.
_LOWER_PAIRS_NOT_TOKENS = frozenset("""
aq bq fj fz gj gk gq hj hq hz iu jf jg jh jk jn jv jw jx jy jz kf kq kx kz lq lz mz nq oj oq pz
qd qe qf qg qh qj qk ql qm qn qo qv qx qy qz rj tj tq uj uo uq vj vq vz wj wq wu wv wz xg xh xj
xk xq xu xv xw xz yb yd yf yh yj yk yl ym yq yu yv yw yx yz zc zf zg zj zl zp zq zr zt zv zy
""".split())

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_DROP_LOWER = str.maketrans("", "", _LOWER)
_DROP_DIGITS = str.maketrans("", "", "0123456789")
_LOWER_RUN_RE = re.compile("[a-z]+")
_PAIR_AFTER_CONTRACTION_RE = re.compile("'(?:[sdmt]|[lL]l|[vV]e|[rR]e)(?=[a-z])")
_UNCREDITED_PAIR_RE = re.compile("|".join(  # "q(?=[defg...])|...": a first letter, then a lookahead
    f"{a}(?=[{''.join(sorted(p[1] for p in _LOWER_PAIRS_NOT_TOKENS if p[0] == a))}])"
    for a in _LOWER if any(p[0] == a for p in _LOWER_PAIRS_NOT_TOKENS)))
_ANY_DIGIT_RE = re.compile("[0-9]")
_DIGIT_GROUP_RE = re.compile("[0-9]{1,3}")
_DIGITS_TOUCHING_NON_ASCII_RE = re.compile(r"(?<=[^\x00-\x7f])[0-9]+|(?<![0-9])[0-9]+(?=[^\x00-\x7f])")
"""Digit runs next to a non-ASCII character. The second branch starts only at a run's first digit:
tried at every digit, it read the run to its end each time (83 s for "é 111...1 x", 100 KB)."""
# Unicode White_Space, which is what \s means in tiktoken's (Rust) regexes.
_WS = " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PUNCT = r"!-/:-@\[-`{-~"
# A run of n spaces costs 1 + n // 64, unless it is one space folded into the
# next piece (" word": 1/3, see above; " (": 0); one more when its last space
# is split off before a digit or a non-ASCII character.
_SPACE_RUN_START_RE = re.compile(f"(?<! ) (?![A-Za-z{_PUNCT}])")
_SPACES_64 = " " * 64
_SPACE_CHUNK_RE = re.compile(_SPACES_64)
_SPACE_BEFORE_LETTER_RE = re.compile(" (?=[A-Za-z])")
_LAST_OF_SPACES_SPLIT_RE = re.compile(f"(?<= ) (?=[^{_WS}A-Za-z{_PUNCT}])")
# Runs of n tabs / newlines cost 1 + n // 8: (doubled char, continuation, chunk).
_TAB_NL_RUNS = tuple((c + c, re.compile(f"(?<={c}){c}"), re.compile(f"{c}{{8}}")) for c in ("\t", "\n"))
_LAST_OF_TABS_SPLIT_RE = re.compile(f"(?<=\t)\t(?=[^{_WS}])")  # a tab prefix is its own token


def _estimate_thirds(text: str) -> int:
  """The upper bound above, in thirds of a token (see the derivation)."""
  thirds = 3 * len(text.encode("utf-8", errors="surrogatepass"))
  lower = len(text) - len(text.translate(_DROP_LOWER))
  if lower > 1:
    pairs = lower - len(_LOWER_RUN_RE.findall(text))
    if pairs:
      thirds -= pairs - len(_UNCREDITED_PAIR_RE.findall(text))
      if "'" in text:
        thirds += len(_PAIR_AFTER_CONTRACTION_RE.findall(text))
  if _ANY_DIGIT_RE.search(text):
    saved = len(text) - len(text.translate(_DROP_DIGITS)) - len(_DIGIT_GROUP_RE.findall(text))
    if saved and not text.isascii():
      for run in _DIGITS_TOUCHING_NON_ASCII_RE.findall(text):
        saved -= len(run) - -(-len(run) // 3)
    thirds -= 3 * saved
  spaces = text.count(" ")
  if spaces:
    runs = len(_SPACE_RUN_START_RE.findall(text)) + len(_LAST_OF_SPACES_SPLIT_RE.findall(text))
    if _SPACES_64 in text:
      runs += len(_SPACE_CHUNK_RE.findall(text))
    thirds += 3 * (runs - spaces) + len(_SPACE_BEFORE_LETTER_RE.findall(text))
  for double, continuation_re, chunk_re in _TAB_NL_RUNS:
    if double in text:
      thirds -= 3 * (len(continuation_re.findall(text)) - len(chunk_re.findall(text)))
  if "\t\t" in text:
    thirds += 3 * len(_LAST_OF_TABS_SPLIT_RE.findall(text))
  return thirds


class EstimatingCounter:
  """Counter used when no tokenizer encoding can be loaded: an upper bound.

  For every string, ``count(text)`` is >= the o200k_base and the cl100k_base
  token count, so budgets computed with it still fit the window. This is
  derived from the two vocabularies (see above ``_LOWER_PAIRS_NOT_TOKENS``);
  only the cost of whitespace runs is measured rather than derived. It pays
  for that: ~2.9x the real count on English prose and code, more on other
  scripts. Linear time, a few regex scans (~1.5x the version-3 estimate).
  ``safety_factor`` multiplies the bound (1.0 = the bound; more is headroom
  for the model's own tokenizer, which the Calibrator measures).
  ``exact=False`` marks manifests costed so.
  """

  exact = False

  def __init__(self, safety_factor: float = 1.0, fallback_for: str | None = None,
               reason: str | None = None) -> None:
    if not safety_factor > 0 or not math.isfinite(safety_factor):
      # inf (or nan) passed here would only fail later, in count(): ceil of inf.
      raise ValueError(f"safety_factor must be a finite number > 0, got {safety_factor!r}")
    self.safety_factor = float(safety_factor)
    self.fallback_for = fallback_for
    self.reason = reason
    self.name = "estimate:bpe_upper_bound"
    self.version = "4"

  def count(self, text: str) -> int:
    if not isinstance(text, str):  # None would count 0, bytes fail obscurely
      raise TypeError(f"TokenCounter.count expects a str, got {type(text).__name__}")
    if not text:
      return 0
    thirds = _estimate_thirds(text)
    if self.safety_factor == 1.0:
      return -(-thirds // 3)
    return math.ceil(thirds * self.safety_factor / 3)

  def count_many(self, texts: Sequence[str]) -> list[int]:
    if isinstance(texts, str):  # would be counted per character
      raise TypeError("TokenCounter.count_many expects a sequence of str, got a str (use count)")
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
