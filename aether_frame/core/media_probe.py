"""Media durations (and PDF page counts) read from the bytes, for costing inline media.

Gemini charges audio at 32 tokens/second and video at 263 tokens/second, so a
blob's duration decides its cost. For ``inline_data`` the bytes are at hand
and nearly every container states its duration (or the numbers it follows
from) in a header: reading it replaces the flat 60-second guess, so a
10-minute WAV is no longer under-counted 10x (and able to overflow the model
window) and a 3-second clip is no longer over-counted 20x.

What each format gives (see the readers below):

- exact: WAV/RF64 (data bytes / byte rate, whole frames for PCM; a streaming
  or cut data chunk counts the bytes present), raw PCM with ``rate`` in the
  MIME type, AIFF, FLAC (STREAMINFO), MP3 with a Xing/Info or VBRI frame
  count, Ogg Vorbis/Opus/FLAC (last granule), MP4/MOV (mvhd, or mehd or the
  last fragment's end when fragmented), Matroska/WebM with Info Duration,
  AVI (stream headers);
- estimated: MP3 without a frame count (bytes * 8 / first bitrate), ADTS AAC
  (256 frames walked, then extrapolated by bytes), live WebM without a
  Duration (start of the last block: short by one frame);
- unknown (None): FLAC or raw PCM that does not say, MPEG-PS/TS, FLV, ASF.

Pure and defensive, like the image-header reader in ``costing``: stdlib only,
no I/O, and for durations only headers are read (plus, for Ogg and live WebM,
one page or cluster near the end), so a 50 MB payload costs microseconds.
Malformed, truncated or hostile input gives None (the caller's guess), never
an error.

PDFs are the exception. They are charged per page, a genai ``Blob`` has no
field for the count, and no header states it: ``pdf_pages`` scans the whole
payload for the page tree (at regex speed, ~15 ms for 20 MB of bytes, ~100 ms
as base64 text) and inflates object streams within a fixed budget. ``costing``
memoises its answer per payload.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
import struct
import zlib
from typing import Any, Iterator

__all__ = ["media_duration", "pdf_pages"]


def media_duration(data: Any, mime: Any) -> float | None:
  """Seconds of audio/video in ``data`` per its container header, else None.

  ``data`` is bytes, bytearray or memoryview (or base64 text, as in genai's
  JSON dumps, decoded only around the headers). ``mime`` picks raw PCM
  (which has no header) and the MP3/ADTS readers (which have no magic);
  every other container is recognised by its magic bytes. The result is a
  finite float >= 0, or None when the duration is not knowable from the
  bytes.
  """
  try:
    reader = _reader(data)
    if reader is None or reader.size <= 0:
      return None
    base, params = _parse_mime(mime)
    width = _PCM_WIDTHS.get(base)
    if width is not None:
      return _clean(_pcm(reader.size, width, params))
    if not base.startswith(("audio/", "video/")) and base != "application/ogg":
      return None
    return _clean(_sniffed(reader, base))
  except Exception:  # hostile input degrades to "unknown", never an error
    return None


def _clean(value: Any) -> float | None:
  if value is None:
    return None
  value = float(value)
  if not math.isfinite(value) or value < 0:
    return None
  return value


# ---------------------------------------------------------------------------
# Random access without copying the payload
# ---------------------------------------------------------------------------


# Every parser reads through one of these readers, and each reader allows at
# most this many reads: hostile nesting (boxes in boxes, clusters of empty
# elements) gives up with None instead of spinning. A real file needs a few
# dozen reads; a WebM cluster walk, one or two per block.
_MAX_READS = 1 << 15


class _Exhausted(Exception):
  """The read budget ran out: the layout is hostile or absurd."""


class _Bytes:
  """Reads small slices of bytes/bytearray/memoryview; never the whole."""

  __slots__ = ("_b", "size", "_reads")

  def __init__(self, b: Any) -> None:
    self._b = b
    self.size = len(b)
    self._reads = 0

  def read(self, offset: int, n: int) -> bytes:
    self._reads += 1
    if self._reads > _MAX_READS:
      raise _Exhausted
    if offset < 0 or n <= 0 or offset >= self.size:
      return b""
    return bytes(self._b[offset : offset + n])


B64_URLSAFE = str.maketrans("-_", "+/")
_B64_PROBE = 4096
_WHITESPACE = re.compile(r"\s")


class _Base64:
  """Reads slices of base64 text, decoding only the 4-char groups needed."""

  __slots__ = ("_s", "size", "_reads")

  def __init__(self, s: str, size: int) -> None:
    self._s = s
    self.size = size
    self._reads = 0

  def read(self, offset: int, n: int) -> bytes:
    self._reads += 1
    if self._reads > _MAX_READS:
      raise _Exhausted
    if offset >= self.size:
      return b""
    return b64_slice(self._s, offset, n, validate=True)


def b64_slice(s: str, offset: int, n: int, *, validate: bool) -> bytes:
  """Bytes ``offset .. offset + n`` of base64 (or URL-safe base64) text ``s``,
  decoding only the 4-character groups that hold them; b"" if they do not decode.

  Shared with the image-header reader in ``costing``: a header lies in the
  first kilobytes of a payload that may be megabytes of text.
  """
  if offset < 0 or n <= 0:
    return b""
  first = offset // 3
  last = -(-(offset + n) // 3)
  chunk = s[first * 4 : last * 4].translate(B64_URLSAFE)
  if not chunk:
    return b""
  chunk += "=" * (-len(chunk) % 4)
  try:
    raw = base64.b64decode(chunk, validate=validate)
  except (binascii.Error, ValueError):
    return b""
  skip = offset - first * 3
  return raw[skip : skip + n]


def _reader(data: Any) -> _Bytes | _Base64 | None:
  if isinstance(data, (bytes, bytearray)):
    return _Bytes(data)
  if isinstance(data, memoryview):
    return _Bytes(data.cast("B")) if data.c_contiguous else None
  if isinstance(data, str) and data.isascii():
    # Line-wrapped base64 (or a trailing newline) would shift offsets: treat
    # it as unknown. Wrapping shows within the first line, so the ends
    # suffice and a 60 MB string is not scanned.
    if _WHITESPACE.search(data, 0, _B64_PROBE) or _WHITESPACE.search(data, max(0, len(data) - _B64_PROBE)):
      return None
    pad = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    chars = len(data) - pad
    if chars % 4 == 1:
      return None
    return _Base64(data, chars * 3 // 4)
  return None


def _parse_mime(mime: Any) -> tuple[str, dict[str, str]]:
  if not isinstance(mime, str):
    return "", {}
  base, _, rest = mime[:1024].partition(";")
  params = {}
  for item in rest.split(";")[:16]:
    key, eq, value = item.partition("=")
    if eq:
      params[key.strip().lower()] = value.strip().strip('"').lower()
  return base.strip().lower(), params


def _u(b: bytes, order: str = "big") -> int:
  return int.from_bytes(b, order)


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------

_MP3_MIMES = frozenset({
    "audio/mpeg", "audio/mp3", "audio/mpeg3", "audio/x-mp3", "audio/x-mpeg",
    "audio/mpa", "audio/mpga",
})
_AAC_MIMES = frozenset({"audio/aac", "audio/x-aac", "audio/aacp", "audio/x-hx-aac-adts"})
# First box types that mark an ISO BMFF (MP4/M4A/MOV/3GP) file.
_MP4_FIRST = frozenset({b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"styp"})


def _sniffed(r: Any, base: str) -> float | None:
  """Picks the parser by magic bytes: labels are often wrong, magic is not."""
  head = r.read(0, 16)
  if len(head) < 4:
    return None
  magic = head[:4]
  if magic in (b"RIFF", b"RIFX", b"RF64", b"BW64"):
    kind = head[8:12]
    if kind == b"WAVE":
      return _wav(r, magic)
    if kind == b"AVI ":
      return _avi(r)
    return None
  if magic == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
    return _aiff(r)
  if magic == b"fLaC":
    return _flac(r, 0)
  if magic == b"OggS":
    return _ogg(r)
  if magic == b"\x1a\x45\xdf\xa3":
    return _matroska(r)
  if head[4:8] in _MP4_FIRST:
    return _mp4(r)
  start = 0
  if head[:3] == b"ID3":
    start = _skip_id3(r)
    if r.read(start, 4) == b"fLaC":
      return _flac(r, start)
  elif base not in _MP3_MIMES and base not in _AAC_MIMES:
    return None
  if base in _AAC_MIMES:
    return _adts(r, start)
  result = _mp3(r, start)
  return result if result is not None else _adts(r, start)


# ---------------------------------------------------------------------------
# Raw PCM (Gemini Live's audio/pcm;rate=16000): the MIME type is the header
# ---------------------------------------------------------------------------

_PCM_WIDTHS = {"audio/pcm": 2, "audio/l16": 2, "audio/l8": 1, "audio/l24": 3}


def _pcm(size: int, width: int, params: dict[str, str]) -> float | None:
  """Whole frames / rate; without a ``rate`` the duration is unknowable."""
  rate = params.get("rate", "")
  channels = params.get("channels", "1")
  if not (rate.isdigit() and channels.isdigit() and len(rate) <= 10 and len(channels) <= 4):
    return None
  rate_i, channels_i = int(rate), int(channels)
  if rate_i <= 0 or channels_i <= 0:
    return None
  return (size // (width * channels_i)) / rate_i


# ---------------------------------------------------------------------------
# RIFF: WAV (and RF64/BW64/RIFX) and AVI
# ---------------------------------------------------------------------------

_RIFF_MAX_CHUNKS = 1024
_WAV_FRAMED = frozenset({1, 3, 6, 7})  # PCM, IEEE float, A-law, mu-law
_WAV_EXTENSIBLE = 0xFFFE
_U32_MAX = 0xFFFFFFFF


def _wav(r: Any, magic: bytes) -> float | None:
  """data chunk bytes / byte rate; a streaming or cut data chunk counts the bytes present."""
  order = "big" if magic == b"RIFX" else "little"
  pos = 12
  fmt = None
  fact = None
  ds64_data = None
  data_len = None
  for _ in range(_RIFF_MAX_CHUNKS):
    hdr = r.read(pos, 8)
    if len(hdr) < 8:
      break
    cid, size, body = hdr[:4], _u(hdr[4:8], order), pos + 8
    if cid == b"ds64":  # RF64: the real 64-bit sizes
      b = r.read(body, 16)
      if len(b) == 16:
        ds64_data = _u(b[8:16], "little")
    elif cid == b"fmt ":
      fmt = r.read(body, min(size, 40))
    elif cid == b"fact":
      b = r.read(body, 4)
      if len(b) == 4:
        fact = _u(b, order)
    elif cid == b"data":
      if size == _U32_MAX and ds64_data is not None:
        size = ds64_data
      avail = r.size - body
      data_len = avail if size == _U32_MAX or size > avail else size
      if fmt is not None:
        break
      size = data_len
    pos = body + size + (size & 1)  # chunks are word-aligned
  if fmt is None or data_len is None or len(fmt) < 16:
    return None
  tag = _u(fmt[0:2], order)
  rate = _u(fmt[4:8], order)
  byte_rate = _u(fmt[8:12], order)
  align = _u(fmt[12:14], order)
  if tag == _WAV_EXTENSIBLE and len(fmt) >= 26:
    tag = _u(fmt[24:26], order)  # first two bytes of the SubFormat GUID
  if rate <= 0:
    return None
  if tag in _WAV_FRAMED and align > 0 and byte_rate == align * rate:
    return (data_len // align) / rate  # whole sample frames: exact
  if tag not in _WAV_FRAMED and fact:
    return fact / rate  # compressed: the fact chunk counts samples
  if byte_rate > 0:
    return data_len / byte_rate
  return None


def _riff_chunks(r: Any, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
  """(id, body start, body size) of the little-endian RIFF chunks in [start, end)."""
  pos = start
  for _ in range(_RIFF_MAX_CHUNKS):
    hdr = r.read(pos, 8)
    if len(hdr) < 8 or pos + 8 > end:
      return
    size = _u(hdr[4:8], "little")
    yield hdr[:4], pos + 8, size
    pos += 8 + size + (size & 1)


def _avi(r: Any) -> float | None:
  """Longest video stream header (start + length) * scale / rate, else avih frames."""
  streams: list[tuple[bytes, float]] = []
  avih = None
  dmlh_frames = None
  for cid, body, size in _riff_chunks(r, 12, r.size):
    if cid != b"LIST" or r.read(body, 4) != b"hdrl":
      continue
    hdrl_end = min(body + size, r.size)
    for hid, hbody, hsize in _riff_chunks(r, body + 4, hdrl_end):
      if hid == b"avih":
        avih = r.read(hbody, 20)
      elif hid == b"LIST":
        kind = r.read(hbody, 4)
        for sid, sbody, _ in _riff_chunks(r, hbody + 4, min(hbody + hsize, hdrl_end)):
          if kind == b"strl" and sid == b"strh":
            strh = r.read(sbody, 36)
            if len(strh) == 36:
              scale, rate = _u(strh[20:24], "little"), _u(strh[24:28], "little")
              start, length = _u(strh[28:32], "little"), _u(strh[32:36], "little")
              if scale > 0 and rate > 0:
                streams.append((strh[:4], (start + length) * scale / rate))
          elif kind == b"odml" and sid == b"dmlh":
            b = r.read(sbody, 4)
            if len(b) == 4:
              dmlh_frames = _u(b, "little")
    break
  video = [d for kind, d in streams if kind == b"vids"]
  if video or streams:
    return max(video or [d for _, d in streams])
  if avih is not None and len(avih) == 20:
    us_per_frame = _u(avih[0:4], "little")
    frames = dmlh_frames or _u(avih[16:20], "little")
    if us_per_frame > 0:
      return frames * us_per_frame / 1e6
  return None


# ---------------------------------------------------------------------------
# AIFF / AIFC
# ---------------------------------------------------------------------------


def _aiff(r: Any) -> float | None:
  """COMM sample frames / its 80-bit extended sample rate."""
  pos = 12
  for _ in range(_RIFF_MAX_CHUNKS):
    hdr = r.read(pos, 8)
    if len(hdr) < 8:
      return None
    size = _u(hdr[4:8])
    if hdr[:4] == b"COMM":
      comm = r.read(pos + 8, 18)
      if len(comm) < 18:
        return None
      frames = _u(comm[2:6])
      exponent = _u(comm[8:10]) & 0x7FFF
      mantissa = _u(comm[10:18])
      if exponent == 0x7FFF or mantissa == 0:
        return None
      rate = math.ldexp(mantissa, exponent - 16383 - 63)
      return frames / rate if rate > 0 else None
    pos += 8 + size + (size & 1)
  return None


# ---------------------------------------------------------------------------
# FLAC
# ---------------------------------------------------------------------------


def _flac(r: Any, start: int) -> float | None:
  """STREAMINFO total samples / sample rate (0 samples: length not recorded)."""
  b = r.read(start, 42)
  if len(b) < 42 or b[:4] != b"fLaC" or b[4] & 0x7F != 0 or _u(b[5:8]) < 34:
    return None
  return _streaminfo(b[8:42])


def _streaminfo(si: bytes) -> float | None:
  rate = _u(si[10:13]) >> 4
  total = _u(si[13:18]) & 0xFFFFFFFFF
  if rate == 0 or total == 0:
    return None
  return total / rate


# ---------------------------------------------------------------------------
# MPEG audio (MP3, MP2) and ADTS AAC
# ---------------------------------------------------------------------------

_SYNC_WINDOW = 1 << 18  # where the first frame must start after any ID3v2 tag
_SYNC_MAX_TRIES = 4096
_ID3_MAX_TAGS = 8

_MPEG_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MPEG_KBPS = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}


def _skip_id3(r: Any) -> int:
  """Offset after any ID3v2 tags (some writers stack several)."""
  pos = 0
  for _ in range(_ID3_MAX_TAGS):
    h = r.read(pos, 10)
    if len(h) < 10 or h[:3] != b"ID3" or any(c & 0x80 for c in h[6:10]):
      break
    size = (h[6] << 21) | (h[7] << 14) | (h[8] << 7) | h[9]
    pos += 10 + size + (10 if h[5] & 0x10 else 0)  # footer flag
  return pos


def _mpeg_header(h: bytes) -> tuple[int, int, int, int, int, int, bool] | None:
  """(frame bytes, samples/frame, rate, bit/s, version, layer, mono) of a frame header."""
  if len(h) < 4 or h[0] != 0xFF or h[1] & 0xE0 != 0xE0:
    return None
  version = (h[1] >> 3) & 3  # 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
  layer = 4 - ((h[1] >> 1) & 3)
  index = h[2] >> 4
  rate_index = (h[2] >> 2) & 3
  if version == 1 or layer == 4 or index in (0, 15) or rate_index == 3 or h[3] & 3 == 2:
    return None
  mpeg1 = version == 3
  bitrate = _MPEG_KBPS[(mpeg1, layer)][index] * 1000
  rate = _MPEG_RATES[version][rate_index]
  pad = (h[2] >> 1) & 1
  if layer == 1:
    spf, size = 384, (12 * bitrate // rate + pad) * 4
  else:
    spf = 1152 if mpeg1 or layer == 2 else 576
    size = spf // 8 * bitrate // rate + pad
  return size, spf, rate, bitrate, version, layer, h[3] >> 6 == 3


def _sync(r: Any, start: int, check: Any) -> tuple[int, Any] | None:
  """First offset whose header ``check`` accepts and that the next header confirms.

  Every 0xFF byte is a candidate; their number is capped, so a window of
  0xFF bytes costs a few milliseconds, not a scan of the payload.
  """
  window = r.read(start, _SYNC_WINDOW)
  i = -1
  for _ in range(_SYNC_MAX_TRIES):
    i = window.find(b"\xff", i + 1)
    if i < 0 or i + 4 > len(window):
      return None
    if window[i + 1] < 0xE0:  # not even a sync word
      continue
    h = check(window[i : i + 9])
    if h is not None:
      pos = start + i
      nxt = pos + h[0]
      if nxt + 4 > r.size:  # a lone frame at the end: nothing to confirm with
        return pos, h
      h2 = check(r.read(nxt, 9))
      if h2 is not None and h2[2] == h[2] and h2[4:6] == h[4:6]:
        return pos, h
  return None


def _tail_tags(r: Any) -> int:
  """Bytes of ID3v1 and APEv2 tags at the end, which hold no audio."""
  end = r.size
  if end >= 128 and r.read(end - 128, 3) == b"TAG":
    end -= 128
  footer = r.read(end - 32, 32) if end >= 32 else b""
  if footer[:8] == b"APETAGEX":
    size = _u(footer[12:16], "little") + (32 if _u(footer[20:24], "little") & 0x80000000 else 0)
    if size <= end:
      end -= size
  return r.size - end


def _mp3(r: Any, start: int) -> float | None:
  """Xing/Info or VBRI frame count (exact), else audio bytes * 8 / bitrate."""
  found = _sync(r, start, _mpeg_header)
  if found is None:
    return None
  pos, (_, spf, rate, bitrate, version, layer, mono) = found
  if layer == 3:
    offset = (21 if mono else 36) if version == 3 else (13 if mono else 21)
    x = r.read(pos + offset, 160)
    if x[:4] in (b"Xing", b"Info") and len(x) >= 8:
      flags = _u(x[4:8])
      p = 8
      frames = 0
      if flags & 1:
        frames = _u(x[p : p + 4]) if len(x) >= p + 4 else 0
        p += 4
      p += (4 if flags & 2 else 0) + (100 if flags & 4 else 0) + (4 if flags & 8 else 0)
      if frames:
        samples = frames * spf
        lame = x[p : p + 24]
        if len(lame) == 24 and lame.startswith((b"LAME", b"L3.99", b"Lavf", b"Lavc")):
          gap = _u(lame[21:24])  # 12-bit encoder delay, 12-bit end padding
          samples = max(0, samples - (gap >> 12) - (gap & 0xFFF))
        return samples / rate
    v = r.read(pos + 36, 18)
    if v[:4] == b"VBRI" and len(v) == 18 and _u(v[14:18]):
      return _u(v[14:18]) * spf / rate
  audio = r.size - _tail_tags(r) - pos
  return max(0, audio) * 8 / bitrate


_ADTS_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
_ADTS_WALK = 256


def _adts_header(h: bytes) -> tuple[int, int, int, int, int, int] | None:
  """(frame bytes, samples, rate, 0, layer 0, profile) of an ADTS header, shaped like _mpeg_header's."""
  if len(h) < 7 or h[0] != 0xFF or h[1] & 0xF6 != 0xF0:
    return None
  rate_index = (h[2] >> 2) & 0xF
  if rate_index >= len(_ADTS_RATES):
    return None
  size = ((h[3] & 3) << 11) | (h[4] << 3) | (h[5] >> 5)
  if size < (7 if h[1] & 1 else 9):
    return None
  return size, 1024 * ((h[6] & 3) + 1), _ADTS_RATES[rate_index], 0, 0, h[2] >> 6


def _adts(r: Any, start: int) -> float | None:
  """ADTS has no length field: walk the first frames, extrapolate by bytes if more follow."""
  found = _sync(r, start, _adts_header)
  if found is None:
    return None
  pos, (_, _, rate, _, _, _) = found
  end = r.size - _tail_tags(r)
  first = pos
  samples = 0
  for _ in range(_ADTS_WALK):
    h = _adts_header(r.read(pos, 9))
    if h is None or h[2] != rate or pos + h[0] > end:
      break
    samples += h[1]
    pos += h[0]
  if pos <= first:
    return None
  if pos + 7 >= end:  # walked every frame: exact
    return samples / rate
  return samples / rate * (end - first) / (pos - first)


# ---------------------------------------------------------------------------
# Ogg: Vorbis, Opus, FLAC
# ---------------------------------------------------------------------------

_OGG_MAX_BOS = 16
_TAIL_MAX_CANDIDATES = 1024
_TAIL_WINDOWS = (1 << 16, 1 << 20, 1 << 23)
_OPUS_RATE = 48000


def _ogg_codec(packet: bytes) -> tuple[int, int] | None:
  """(granule rate, pre-skip) from a stream's identification packet."""
  if packet[:7] == b"\x01vorbis" and len(packet) >= 16:
    return _u(packet[12:16], "little"), 0
  if packet[:8] == b"OpusHead" and len(packet) >= 12:
    return _OPUS_RATE, _u(packet[10:12], "little")
  if packet[:5] == b"\x7fFLAC" and packet[9:13] == b"fLaC" and len(packet) >= 30:
    return _u(packet[27:30]) >> 4, 0
  return None


def _ogg(r: Any) -> float | None:
  """(last granule position - pre-skip) / rate of the first audio stream."""
  pos = 0
  stream = None
  for _ in range(_OGG_MAX_BOS):
    h = r.read(pos, 27)
    if len(h) < 27 or h[:4] != b"OggS" or h[4] != 0 or not h[5] & 2:
      break  # past the beginning-of-stream pages
    segs = r.read(pos + 27, h[26])
    if len(segs) < h[26]:
      return None
    body = pos + 27 + h[26]
    first_packet = 0
    for lace in segs:  # a packet ends at the first lacing value below 255
      first_packet += lace
      if lace < 255:
        break
    codec = _ogg_codec(r.read(body, min(first_packet, 64)))
    if codec is not None and stream is None:
      stream = (h[14:18],) + codec
    pos = body + sum(segs)
  if stream is None or stream[1] <= 0:
    return None
  serial, rate, pre_skip = stream
  granule = _ogg_last_granule(r, serial)
  if granule is None:
    return None
  return max(0, granule - pre_skip) / rate


def _ogg_last_granule(r: Any, serial: bytes) -> int | None:
  """Granule of the stream's last complete page, searched backwards from the end."""
  for window in _TAIL_WINDOWS:
    start = max(0, r.size - window)
    buf = r.read(start, r.size - start)
    end = len(buf)
    for _ in range(_TAIL_MAX_CANDIDATES):
      i = buf.rfind(b"OggS", 0, end)
      if i < 0:
        break
      end = i
      h = buf[i : i + 27]
      if len(h) < 27 or h[4] != 0 or h[14:18] != serial:
        continue
      segs = buf[i + 27 : i + 27 + h[26]]
      granule = int.from_bytes(h[6:14], "little", signed=True)
      if len(segs) == h[26] and i + 27 + h[26] + sum(segs) <= len(buf) and granule != -1:
        return granule if granule >= 0 else None
    if start == 0:
      break
  return None


# ---------------------------------------------------------------------------
# ISO BMFF: MP4, M4A, MOV, 3GP
# ---------------------------------------------------------------------------

_MP4_MAX_BOXES = 16384
_MP4_MAX_CHILDREN = 1024
_TRUN_MAX_BYTES = 1 << 20


def iso_boxes(r: Any, start: int, end: int, limit: int = _MP4_MAX_CHILDREN) -> Iterator[tuple[bytes, int, int]]:
  """(type, body start, box end) of the ISO BMFF boxes in [start, end); box ends are clipped
  to end. MP4/MOV here, HEIF/AVIF in ``costing`` (any reader with ``read(offset, n)``)."""
  pos = start
  for _ in range(limit):
    if pos + 8 > end:
      return
    h = r.read(pos, 16)
    if len(h) < 8:
      return
    size, kind, header = _u(h[0:4]), h[4:8], 8
    if size == 1:
      if len(h) < 16:
        return
      size, header = _u(h[8:16]), 16
    elif size == 0:  # runs to the end
      size = end - pos
    if size < header:
      return
    yield kind, pos + header, min(pos + size, end)
    pos += size


def _full_box_times(b: bytes) -> tuple[int, int] | None:
  """(timescale, duration) of an mvhd/mdhd body, version 0 or 1; unknown duration gives 0."""
  if b[:1] == b"\x01" and len(b) >= 32:
    scale, duration, unknown = _u(b[20:24]), _u(b[24:32]), (1 << 64) - 1
  elif b[:1] == b"\x00" and len(b) >= 20:
    scale, duration, unknown = _u(b[12:16]), _u(b[16:20]), _U32_MAX
  else:
    return None
  return scale, 0 if duration == unknown else duration


def _mp4(r: Any) -> float | None:
  """moov/mvhd duration / timescale; for fragmented files mehd, else the last fragment's end."""
  moov = None
  last_moof = None
  for kind, body, end in iso_boxes(r, 0, r.size, _MP4_MAX_BOXES):
    if kind == b"moov":
      moov = _moov(r, body, end)
      if moov[0] is not None:
        return moov[0]
    elif kind == b"moof":
      last_moof = (body, end)
  if moov is None or last_moof is None:
    return None
  return _fragment_end(r, last_moof[0], last_moof[1], moov[1], moov[2])


def _moov(r: Any, body: int, end: int) -> tuple[float | None, dict[int, int], dict[int, int]]:
  """(duration if recorded, timescale per track, default sample duration per track)."""
  scale = 0
  duration = 0
  fragments = 0
  track_scales: dict[int, int] = {}
  track_durations: list[float] = []
  defaults: dict[int, int] = {}
  for kind, b, e in iso_boxes(r, body, end):
    if kind == b"mvhd":
      times = _full_box_times(r.read(b, 32))
      if times:
        scale, duration = times
    elif kind == b"mvex":
      for k2, b2, _ in iso_boxes(r, b, e):
        if k2 == b"mehd":
          h = r.read(b2, 12)
          fragments = _u(h[4:12]) if h[:1] == b"\x01" else _u(h[4:8])
        elif k2 == b"trex":
          h = r.read(b2, 16)
          if len(h) == 16:
            defaults[_u(h[4:8])] = _u(h[12:16])
    elif kind == b"trak":
      track_id = None
      for k2, b2, e2 in iso_boxes(r, b, e):
        if k2 == b"tkhd":
          h = r.read(b2, 24)
          track_id = _u(h[20:24]) if h[:1] == b"\x01" else _u(h[12:16])
        elif k2 == b"mdia":
          for k3, b3, _ in iso_boxes(r, b2, e2):
            if k3 == b"mdhd":
              times = _full_box_times(r.read(b3, 32))
              if times and times[0] > 0:
                if track_id is not None:
                  track_scales[track_id] = times[0]
                if times[1]:
                  track_durations.append(times[1] / times[0])
  if scale > 0 and duration:
    return duration / scale, track_scales, defaults
  if scale > 0 and fragments:
    return fragments / scale, track_scales, defaults
  if track_durations:
    return max(track_durations), track_scales, defaults
  return None, track_scales, defaults


def _fragment_end(r: Any, body: int, end: int, scales: dict[int, int], defaults: dict[int, int]) -> float | None:
  """End time of a fragment: tfdt decode time + its trun sample durations, per track."""
  best = None
  for kind, b, e in iso_boxes(r, body, end):
    if kind != b"traf":
      continue
    track_id = None
    default = None
    start = None
    total = 0
    for k2, b2, e2 in iso_boxes(r, b, e):
      if k2 == b"tfhd":
        h = r.read(b2, 40)
        if len(h) < 8:
          break
        flags, track_id = _u(h[1:4]), _u(h[4:8])
        p = 8 + (8 if flags & 1 else 0) + (4 if flags & 2 else 0)
        if flags & 8 and len(h) >= p + 4:
          default = _u(h[p : p + 4])
      elif k2 == b"tfdt":
        h = r.read(b2, 12)
        start = _u(h[4:12]) if h[:1] == b"\x01" else _u(h[4:8])
      elif k2 == b"trun":
        total += _trun_duration(r.read(b2, min(e2 - b2, _TRUN_MAX_BYTES)),
                                default if default is not None else defaults.get(track_id, 0))
    scale = scales.get(track_id) if track_id is not None else None
    if start is not None and scale:
      t = (start + total) / scale
      best = t if best is None else max(best, t)
  return best


def _trun_duration(h: bytes, default: int) -> int:
  if len(h) < 8:
    return 0
  flags, count = _u(h[1:4]), _u(h[4:8])
  p = 8 + (4 if flags & 1 else 0) + (4 if flags & 4 else 0)
  if not flags & 0x100:
    return count * default
  words = sum(1 for bit in (0x100, 0x200, 0x400, 0x800) if flags & bit)
  count = min(count, max(0, len(h) - p) // (4 * words))
  return sum(struct.unpack_from(f">{count * words}I", h, p)[::words])  # durations come first


# ---------------------------------------------------------------------------
# Matroska / WebM
# ---------------------------------------------------------------------------

_EBML = 0x1A45DFA3
_SEGMENT = 0x18538067
_SEEK_HEAD = 0x114D9B74
_SEEK = 0x4DBB
_SEEK_ID = 0x53AB
_SEEK_POSITION = 0x53AC
_INFO = 0x1549A966
_TIMECODE_SCALE = 0x2AD7B1
_DURATION = 0x4489
_CLUSTER = 0x1F43B675
_TIMECODE = 0xE7
_SIMPLE_BLOCK = 0xA3
_BLOCK_GROUP = 0xA0
_BLOCK = 0xA1
_BLOCK_DURATION = 0x9B
_LEVEL1 = frozenset({_EBML, _SEGMENT, _SEEK_HEAD, _INFO, _CLUSTER, 0x1654AE6B, 0x1C53BB6B,
                     0x1254C367, 0x1043A770, 0x1941A469})
_MKV_MAX_ELEMENTS = 1024
_MKV_MAX_BLOCKS = 16384
_CLUSTER_ID = _CLUSTER.to_bytes(4, "big")


def _element(r: Any, pos: int) -> tuple[int, int, int | None] | None:
  """(id, data start, size or None if unknown) of the EBML element at pos."""
  h = r.read(pos, 12)
  if not h or h[0] < 0x10:
    return None
  id_len = 9 - h[0].bit_length() if h[0] < 0x80 else 1
  if len(h) <= id_len or h[id_len] == 0:
    return None
  size_len = 9 - h[id_len].bit_length()
  if len(h) < id_len + size_len:
    return None
  mask = (1 << (7 * size_len)) - 1
  size = _u(h[id_len : id_len + size_len]) & mask
  return _u(h[:id_len]), pos + id_len + size_len, None if size == mask else size


def _children(r: Any, start: int, end: int, limit: int = _MKV_MAX_ELEMENTS) -> Iterator[tuple[int, int, int]]:
  """Known-size child elements in [start, end); stops at an unknown size."""
  pos = start
  for _ in range(limit):
    el = _element(r, pos)
    if el is None or el[2] is None or el[1] + el[2] > end:
      return
    yield el[0], el[1], el[2]
    pos = el[1] + el[2]


def _matroska(r: Any) -> float | None:
  """Segment Info Duration * TimecodeScale; live recordings without one: last block time."""
  el = _element(r, 0)
  if el is None or el[0] != _EBML or el[2] is None:
    return None
  pos = el[1] + el[2]
  for _ in range(16):
    el = _element(r, pos)
    if el is None:
      return None
    if el[0] == _SEGMENT:
      break
    if el[2] is None:
      return None
    pos = el[1] + el[2]
  else:
    return None
  segment = el[1]
  seg_end = r.size if el[2] is None else min(segment + el[2], r.size)
  info = None
  info_at = None
  pos = segment
  for _ in range(_MKV_MAX_ELEMENTS):
    el = _element(r, pos)
    if el is None or el[0] == _CLUSTER or el[2] is None:
      break
    if el[0] == _INFO:
      info = (el[1], el[1] + el[2])
      break
    if el[0] == _SEEK_HEAD:
      info_at = _seek_info(r, el[1], el[1] + el[2], segment)
    pos = el[1] + el[2]
  if info is None and info_at is not None:
    el = _element(r, info_at)
    if el is not None and el[0] == _INFO and el[2] is not None:
      info = (el[1], el[1] + el[2])
  scale = 1_000_000
  duration = None
  if info is not None:
    for eid, d, size in _children(r, info[0], info[1]):
      if eid == _TIMECODE_SCALE and 1 <= size <= 8:
        scale = _u(r.read(d, size))
      elif eid == _DURATION and size in (4, 8):
        duration = struct.unpack(">f" if size == 4 else ">d", r.read(d, size))[0]
  if scale <= 0:
    return None
  if duration is not None:
    return duration * scale / 1e9
  ticks = _last_block_time(r, segment, seg_end)
  return None if ticks is None else ticks * scale / 1e9


def _seek_info(r: Any, start: int, end: int, segment: int) -> int | None:
  for eid, d, size in _children(r, start, end):
    if eid != _SEEK:
      continue
    target = position = None
    for cid, cd, csize in _children(r, d, d + size, 8):
      if cid == _SEEK_ID and csize <= 4:
        target = _u(r.read(cd, csize))
      elif cid == _SEEK_POSITION and 1 <= csize <= 8:
        position = _u(r.read(cd, csize))
    if target == _INFO and position is not None:
      return segment + position
  return None


def _last_block_time(r: Any, segment: int, seg_end: int) -> int | None:
  """Start of the last block, in ticks: a Cluster near the end, searched backwards.

  Misses only the last frame's own length (20 ms for Opus).
  """
  for window in _TAIL_WINDOWS:
    start = max(segment, seg_end - window)
    buf = r.read(start, seg_end - start)
    end = len(buf)
    for _ in range(_TAIL_MAX_CANDIDATES):
      i = buf.rfind(_CLUSTER_ID, 0, end)
      if i < 0:
        break
      end = i
      t = _cluster_end(r, start + i, seg_end)
      if t is not None:
        return t
    if start <= segment:
      break
  return None


def _block_time(r: Any, d: int) -> int | None:
  """Relative timecode (signed 16-bit) after a Block's track-number vint."""
  h = r.read(d, 11)
  if not h or h[0] == 0:
    return None
  n = 9 - h[0].bit_length()
  return int.from_bytes(h[n : n + 2], "big", signed=True) if len(h) >= n + 2 else None


def _cluster_end(r: Any, pos: int, seg_end: int) -> int | None:
  el = _element(r, pos)
  if el is None or el[0] != _CLUSTER:
    return None
  end = seg_end if el[2] is None else min(el[1] + el[2], seg_end)
  tc = _element(r, el[1])  # the cluster's Timecode comes first
  if tc is None or tc[0] != _TIMECODE or tc[2] is None or not 1 <= tc[2] <= 8:
    return None
  base = _u(r.read(tc[1], tc[2]))
  best = None
  pos = tc[1] + tc[2]
  for _ in range(_MKV_MAX_BLOCKS):
    el = _element(r, pos)
    if el is None or el[2] is None or el[0] in _LEVEL1 or el[1] + el[2] > end:
      break
    eid, d, size = el
    t = None
    if eid == _SIMPLE_BLOCK:
      t = _block_time(r, d)
    elif eid == _BLOCK_GROUP:
      rel = length = None
      for cid, cd, csize in _children(r, d, d + size, 16):
        if cid == _BLOCK:
          rel = _block_time(r, cd)
        elif cid == _BLOCK_DURATION and 1 <= csize <= 8:
          length = _u(r.read(cd, csize))
      t = None if rel is None else rel + (length or 0)
    if t is not None:
      best = t if best is None else max(best, t)
    pos = d + size
  return None if best is None else max(0, base + best)


# ---------------------------------------------------------------------------
# PDF: page count
# ---------------------------------------------------------------------------

_PDF_MAGIC_WINDOW = 1024  # readers accept junk before "%PDF-"; Acrobat looks this far
_PDF_COUNT_MAX = 0xFFFFF  # pdfium trusts a /Count only below this (kPageMaxNum); so do we
_PDF_MAX_MARKERS = 1 << 16
_PDF_MAX_OBJSTMS = 1 << 14
_PDF_INFLATE_BUDGET = 1 << 25  # bytes inflated from all object streams: a deflate bomb stops here
_PDF_DICT_WINDOW = 4096  # how far an object stream's dictionary may reach around its /Type
_PDF_HEADER_TRIES = 64
_PDF_CHUNK = 1 << 16

# A name ends at whitespace or a delimiter: /Page is not /PageLabels.
_NAME_END = rb"(?![^\s()<>\[\]{}/%])"
# /Type /Page leaves, /Type /Pages nodes (or any dict with /Kids), and direct /Count integers.
_PDF_MARKERS = re.compile(
    rb"/Type\s*/(Pages?)" + _NAME_END + rb"|/(Kids)" + _NAME_END + rb"|/Count\s*(\d{1,19})(?!\d|\s+\d+\s+R\b)")
_PDF_OBJ_TAIL = re.compile(rb"(?<!\d)(\d{1,10})\s+\d{1,5}\s+\Z")
_PDF_OBJSTM = re.compile(rb"/Type\s*/ObjStm" + _NAME_END)
_PDF_STREAM = re.compile(rb"(?<!end)stream(?:\r\n|\n|\r)")
_PDF_FILTER = re.compile(rb"/Filter\s*(\[[^\]]{0,256}\]|/[^\s()<>\[\]{}/%]{1,64})")
_PDF_NAMES = re.compile(rb"/([^\s()<>\[\]{}/%]{1,64})")
_PDF_PREDICTOR = re.compile(rb"/Predictor\s*(\d+)")
_PDF_N = re.compile(rb"/N\s+(\d{1,6})(?!\d)")
_PDF_FIRST = re.compile(rb"/First\s+(\d{1,10})(?!\d)")
_PDF_INTS = re.compile(rb"\d{1,10}")
_ENDED = object()
_B64_URLSAFE_BYTES = bytes.maketrans(b"-_", b"+/")


def pdf_pages(data: Any, cap: int = _PDF_COUNT_MAX) -> int | None:
  """Pages of the PDF in ``data``, at most ``cap``; None if the bytes do not say.

  A PDF states its page count only deep inside (the page tree's root
  ``/Count``, reached through the trailer and xref), so unlike the media
  readers this scans the whole payload, at regex (C) speed: ``/Type /Pages``
  nodes and their ``/Count`` (the root's is the largest), and ``/Type /Page``
  leaves counted once per object number. PDF 1.5+ files keep those objects
  in FlateDecode object streams, which are inflated within one total budget
  (so a deflate bomb costs milliseconds). The larger of the two counts wins:
  an under-count can overflow the model window, an over-count only trims a
  little more. Stale revisions and unused pages can only add.
  """
  try:
    buf = _whole(data)
    if buf is None or buf.find(b"%PDF-", 0, _PDF_MAGIC_WINDOW) < 0:
      return None
    tally = _PdfTally(cap)
    tally.scan_file(buf)
    tally.scan_object_streams(buf)
    return tally.pages()
  except Exception:  # hostile input degrades to "unknown", never an error
    return None


def _whole(data: Any) -> bytes | bytearray | None:
  """The whole payload as bytes: base64 text is decoded (line breaks allowed)."""
  if isinstance(data, (bytes, bytearray)):
    return data
  if isinstance(data, memoryview):
    return bytes(data.cast("B")) if data.c_contiguous else None
  if isinstance(data, str) and data.isascii():
    text: str | bytes = data
    if "-" in data or "_" in data:  # URL-safe alphabet
      text = data.encode("ascii").translate(_B64_URLSAFE_BYTES)
    try:  # non-strict: line breaks are dropped and surplus padding ignored
      return binascii.a2b_base64(text + ("==" if isinstance(text, str) else b"=="))
    except (binascii.Error, ValueError):
      return None
  return None


class _PdfTally:
  """Page-tree evidence keyed by object number (or by place, for loose ones)."""

  def __init__(self, cap: int) -> None:
    self.cap = max(0, cap)
    self.nodes: set[Any] = set()
    self.counts: dict[Any, int] = {}
    self.leaves: set[Any] = set()
    self.markers = 0
    self.inflated = 0

  def add(self, owner: Any, m: "re.Match[bytes]") -> bool:
    """Records one marker; False once the marker budget is spent."""
    self.markers += 1
    if self.markers > _PDF_MAX_MARKERS or len(self.leaves) >= self.cap:
      return False
    kind, kids, count = m.group(1, 2, 3)
    if kind == b"Page":
      self.leaves.add(owner)
    elif kind or kids:
      self.nodes.add(owner)
    else:
      n = int(count)
      if 0 < n < _PDF_COUNT_MAX and n > self.counts.get(owner, 0):
        self.counts[owner] = n
    return True

  def pages(self) -> int | None:
    best = max([n for owner, n in self.counts.items() if owner in self.nodes] + [len(self.leaves)])
    return min(best, self.cap) if best > 0 else None

  def scan_file(self, buf: Any) -> None:
    """Markers in the file as stored, each owned by the "N G obj" header before it."""
    owner: Any = None
    prev = 0
    for m in _PDF_MARKERS.finditer(buf):
      found = _pdf_owner(buf, prev, m.start())
      if found is _ENDED or (found is None and owner is None):
        owner = ("loose", m.start())  # outside any object: counts on its own
      elif found is not None:
        owner = found
      prev = m.end()
      if not self.add(owner, m):
        return

  def scan_object_streams(self, buf: Any) -> None:
    """Markers in object streams (PDF 1.5+), owned per the stream's offset table."""
    for i, m in enumerate(_PDF_OBJSTM.finditer(buf)):
      if i >= _PDF_MAX_OBJSTMS or self.inflated >= _PDF_INFLATE_BUDGET:
        return
      start = buf.rfind(b"obj", max(0, m.start() - _PDF_DICT_WINDOW), m.start())
      s = _PDF_STREAM.search(buf, m.end(), m.end() + _PDF_DICT_WINDOW)
      if s is None:
        continue
      head = bytes(buf[max(start, m.start() - _PDF_DICT_WINDOW, 0) : s.start()])
      body = self._decoded(buf, head, s.end())
      if body is None:
        continue
      objects = _objstm_table(head, body)
      for pm in _PDF_MARKERS.finditer(body):
        k = bisect.bisect_right(objects, (pm.start(), _U32_MAX)) - 1
        owner = objects[k][1] if k >= 0 else ("stream", m.start(), pm.start())
        if not self.add(owner, pm):
          return

  def _decoded(self, buf: Any, head: bytes, at: int) -> bytes | None:
    """The stream's data if unfiltered or plain FlateDecode, within the inflate budget."""
    f = _PDF_FILTER.search(head)
    names = _PDF_NAMES.findall(f.group(1)) if f else []
    p = _PDF_PREDICTOR.search(head)
    if p and int(p.group(1)) > 1:
      return None
    budget = _PDF_INFLATE_BUDGET - self.inflated
    if not names:
      end = buf.find(b"endstream", at, at + budget)
      body = bytes(buf[at : end if end >= 0 else at + budget])
    elif names in ([b"FlateDecode"], [b"Fl"]):
      body = _inflate(buf, at, budget)
    else:
      return None
    self.inflated += max(1, len(body))
    return body


def _pdf_owner(buf: Any, lo: int, hi: int) -> Any:
  """Object number of the last "N G obj" header in buf[lo:hi]; _ENDED if an endobj
  comes after it; None if neither is there (still in the same object)."""
  j = hi
  for _ in range(_PDF_HEADER_TRIES):
    j = buf.rfind(b"obj", lo, j)
    if j < 0:
      return None
    if buf[max(0, j - 3) : j] == b"end":
      return _ENDED
    m = _PDF_OBJ_TAIL.search(buf, max(0, j - 40), j)
    if m is not None:
      return int(m.group(1))
  return ("loose", hi)  # hostile runs of "obj": give up attributing


def _objstm_table(head: bytes, body: bytes) -> list[tuple[int, Any]]:
  """(offset in body, object number) of the objects in an object stream, sorted."""
  n, first = _PDF_N.search(head), _PDF_FIRST.search(head)
  if n is None or first is None:
    return []
  first_i = int(first.group(1))
  ints = [int(x) for x in _PDF_INTS.findall(body, 0, min(first_i, len(body)))[: 2 * int(n.group(1))]]
  return sorted((first_i + ints[k + 1], ints[k]) for k in range(0, len(ints) - 1, 2))


def _inflate(buf: Any, at: int, budget: int) -> bytes:
  """Inflates the zlib stream at ``at``, up to ``budget`` bytes; a cut or corrupt
  stream gives what came out before the damage."""
  d = zlib.decompressobj()
  out: list[bytes] = []
  pending = b""
  pos = at
  try:
    while budget > 0 and not d.eof:
      if not pending:
        pending = bytes(buf[pos : pos + _PDF_CHUNK])
        pos += len(pending)
        if not pending:
          break
      piece = d.decompress(pending, budget)
      pending = d.unconsumed_tail
      out.append(piece)
      budget -= len(piece)
  except zlib.error:
    pass
  return b"".join(out)
