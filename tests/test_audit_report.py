"""The session HTML report: self-contained, and really rendered by headless Chromium.

The screenshot test needs Debian's ``chromium`` (``apt-get install -y chromium``)
and skips, saying so, only where it is missing. The PNG is decoded here (no
imaging library) to check that the layer colours of the bars are on screen.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter

import pytest
from google.adk.artifacts import FileArtifactService

from aether_frame.audit.report import COLORS
from aether_frame.cli import main
from tests.fixtures.audit_session import APP, USER, run_session

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("report")
  root = tmp / "artifacts"
  # A small window so the session overflows: the report must show truncations.
  run = asyncio.run(run_session(FileArtifactService(str(root)), 14, window=2048))
  sess = root / "apps" / APP / "users" / USER / "sessions" / run.session_id
  out = tmp / "session.html"
  assert main(["report", str(sess), "-o", str(out)]) == 0
  return tmp, out, run


def test_report_is_self_contained_and_complete(report):
  _, out, run = report
  page = out.read_text(encoding="utf-8")
  n = len(run.documents)
  assert page.count('<div class="bar">') == n
  assert "<script" not in page and not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:|//)""", page)
  events = sum(len(d["truncation_events"]) for d in run.documents)
  assert events > 0 and f"{events} truncation events" in page
  assert page.count('class="break"') >= n // 2  # most calls break the cache somewhere after call 1
  assert page.count("replay: <span class=\"identical\">identical</span>") == n
  assert "first call of this agent (cold cache)" in page and re.search(r"breaks at byte [\d,]+ of [\d,]+ in <code>conversation ", page)


def _read_png(path) -> tuple[int, int, list[bytes], int]:
  data = path.read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
  pos, idat, ihdr = 8, [], None
  while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
      ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
      idat.append(body)
    pos += 12 + n
  w, h, depth, ctype = ihdr[:4]
  assert depth == 8 and ctype in (2, 6), f"unexpected PNG format {ihdr}"
  bpp = 3 if ctype == 2 else 4
  raw, stride = zlib.decompress(b"".join(idat)), w * bpp
  rows, prev = [], bytearray(stride)
  for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
      for i in range(bpp, stride):
        line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
      line = bytearray((a + b) & 255 for a, b in zip(line, prev))
    elif f == 3:
      for i in range(stride):
        line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif f == 4:
      for i in range(stride):
        a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line))
    prev = line
  return w, h, rows, bpp


def test_report_renders_in_headless_chromium(report):
  tmp, out, _ = report
  chromium = shutil.which("chromium") or shutil.which("chromium-browser")
  if chromium is None:
    pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); the report screenshot is not checked")
  png = tmp / "shot.png"
  proc = subprocess.run(
      [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", f"--screenshot={png}",
       "--window-size=1200,800", out.resolve().as_uri()],
      capture_output=True, text=True, timeout=120,
  )
  assert png.exists() and png.stat().st_size > 10_000, f"no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
  w, h, rows, bpp = _read_png(png)
  assert (w, h) == (1200, 800)
  pixels = Counter(r[i:i + 3] for r in rows for i in range(0, len(r), bpp))
  assert len(pixels) > 50, "the screenshot is blank"
  for layer in ("system", "conversation", "task", "evidence"):
    rgb = bytes.fromhex(COLORS[layer][1:])
    assert pixels[rgb] > 300, f"{layer} bars ({COLORS[layer]}) are not on screen"
  assert pixels[bytes.fromhex("e0115f")] > 50, "no cache-break markers on screen"
