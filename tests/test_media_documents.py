"""Inline PDFs cost their real pages; HEIC/HEIF/AVIF photos cost their real size.

A genai ``Part``/``Blob`` has no ``pages`` field, so every inline PDF was
costed as the 10-page guess: a 40-page PDF was charged 2,580 tokens instead
of 10,320 and the request overflowed the model window. And only PNG, GIF,
WebP and JPEG headers were read, so a 4032x3024 iPhone HEIC photo was charged
the unknown-size 1,290 tokens instead of 3,096.

The PDFs are built by hand from the spec (ISO 32000: classic xref tables,
and PDF 1.5 object and xref streams); ``test_builders_make_real_pdfs`` had
pypdf open each one when this file was written, and skips where pypdf is not
installed. The real HEIC and AVIF headers are libheif 1.23 (x265) and
Pillow 13 (libavif) output for a 4032x3024 image, cut after the ``meta``
box; the grid layouts are built by hand.
"""

from __future__ import annotations

import base64
import math
import struct
import time
import zlib

import pytest
from google.genai import types
from hypothesis import given, settings, strategies as st

from aether_frame.core.costing import (
    GEMINI_3_MEDIA,
    MediaCounter,
    PDF_MAX_PAGES,
    PDF_UNKNOWN_PAGES,
    count_part,
    image_dimensions,
)
from aether_frame.core.media_probe import pdf_pages
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()
GEMINI_3 = MediaCounter(COUNTER, GEMINI_3_MEDIA)
PAGE = 258  # Gemini 2.x: one image unit per page
UNKNOWN = PDF_UNKNOWN_PAGES * PAGE


def _cost(data: object, mime: str = "application/pdf", counter=COUNTER) -> int:
  return count_part({"inline_data": {"mime_type": mime, "data": data}}, counter)


def _real_part_cost(data: bytes, mime: str = "application/pdf") -> int:
  """As the plugin sees a real genai Part: its JSON dump, data as base64 text."""
  part = types.Part.from_bytes(data=data, mime_type=mime)
  return count_part(part.model_dump(mode="json", exclude_none=True), COUNTER)


# ---------------------------------------------------------------------------
# PDF builders
# ---------------------------------------------------------------------------

_PAGE = b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << >> >>"


def _classic(objects: list[bytes], version: bytes = b"1.4", prefix: bytes = b"", first: int = 1,
             prev: int | None = None, size: int | None = None) -> bytes:
  """A PDF (or, with ``prefix``, an incremental update of one): objects numbered from ``first``,
  an xref table and a trailer whose /Root is object 1."""
  out = prefix or b"%PDF-" + version + b"\n%\xe2\xe3\xcf\xd3\n"
  offsets = []
  for i, body in enumerate(objects, first):
    offsets.append(len(out))
    out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
  xref = len(out)
  out += b"xref\n0 1\n0000000000 65535 f \n%d %d\n" % (first, len(objects))
  out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
  total = size if size is not None else first + len(objects)
  out += b"trailer\n<< /Size %d /Root 1 0 R" % total + (b" /Prev %d" % prev if prev is not None else b"") + b" >>\n"
  return out + b"startxref\n%d\n%%%%EOF\n" % xref


def _flat_tree(pages: int, count: int | bytes | None = None, extra: list[bytes] = ()) -> list[bytes]:
  """Catalog (1), the page tree root (2), then the pages (3..)."""
  kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
  count_b = count if isinstance(count, bytes) else b"%d" % (pages if count is None else count)
  return [b"<< /Type /Catalog /Pages 2 0 R >>",
          b"<< /Type /Pages /Kids [" + kids + b"] /Count " + count_b + b" >>",
          *[_PAGE % 2 for _ in range(pages)], *extra]


def pdf(pages: int, **kw) -> bytes:
  """An uncompressed PDF 1.4 with ``pages`` pages under one root."""
  return _classic(_flat_tree(pages, **kw))


def pdf_deep(pages: int, per_node: int = 10) -> bytes:
  """A balanced two-level page tree, as writers make for long documents."""
  nodes = math.ceil(pages / per_node)
  objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
             b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (3 + n) for n in range(nodes))
             + b"] /Count %d >>" % pages]
  first_page = 3 + nodes
  for n in range(nodes):
    mine = range(n * per_node, min(pages, (n + 1) * per_node))
    objects.append(b"<< /Type /Pages /Parent 2 0 R /Kids [" + b" ".join(b"%d 0 R" % (first_page + i) for i in mine)
                   + b"] /Count %d >>" % len(mine))
  objects += [_PAGE % (3 + i // per_node) for i in range(pages)]
  return _classic(objects)


def pdf_object_streams(pages: int, per_stream: int = 100, bomb: bytes | None = None) -> bytes:
  """PDF 1.5 as modern writers save it: every dictionary in FlateDecode object streams,
  located by a FlateDecode cross-reference stream (no xref table, no plain /Type /Page)."""
  bodies = _flat_tree(pages)  # objects 1..pages+2, all compressed
  n_plain = len(bodies)
  streams = [list(range(1, n_plain + 1))[i : i + per_stream] for i in range(0, n_plain, per_stream)]
  out = b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n"
  entries = {0: (0, 0, 65535)}
  num = n_plain + 1
  for members in streams:
    table, data = [], b""
    for index, obj in enumerate(members):
      table.append(b"%d %d" % (obj, len(data)))
      data += bodies[obj - 1] + b"\n"
      entries[obj] = (2, num, index)
    header = b" ".join(table) + b"\n"
    packed = zlib.compress(header + data)
    entries[num] = (1, len(out), 0)
    out += (b"%d 0 obj\n<< /Type /ObjStm /N %d /First %d /Length %d /Filter /FlateDecode >>\nstream\n"
            % (num, len(members), len(header), len(packed)) + packed + b"\nendstream\nendobj\n")
    num += 1
  if bomb is not None:
    entries[num] = (1, len(out), 0)
    out += (b"%d 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Length %d /Filter /FlateDecode >>\nstream\n"
            % (num, len(bomb)) + bomb + b"\nendstream\nendobj\n")
    num += 1
  entries[num] = (1, len(out), 0)
  rows = zlib.compress(b"".join(struct.pack(">BIH", *entries[i]) for i in range(num + 1)))
  xref = len(out)
  out += (b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d /Filter /FlateDecode >>\nstream\n"
          % (num, num + 1, len(rows)) + rows + b"\nendstream\nendobj\n")
  return out + b"startxref\n%d\n%%%%EOF\n" % xref


def _pages_by_pypdf(data: bytes) -> int:
  pypdf = pytest.importorskip("pypdf")
  import io
  return len(pypdf.PdfReader(io.BytesIO(data), strict=True).pages)


def test_builders_make_real_pdfs():
  assert _pages_by_pypdf(pdf(40)) == 40
  assert _pages_by_pypdf(pdf_deep(137)) == 137
  assert _pages_by_pypdf(pdf_object_streams(40)) == 40
  assert _pages_by_pypdf(pdf_object_streams(250, per_stream=64)) == 250
  assert _pages_by_pypdf(_revised(10)) == 10
  assert _pages_by_pypdf(_grown(10, 2)) == 12


# ---------------------------------------------------------------------------
# Page counts, as costed
# ---------------------------------------------------------------------------


def test_a_real_forty_page_part_costs_forty_pages():
  data = pdf(40)
  assert _cost(b"%PDF-1.4 no page tree") == UNKNOWN  # the old cost of every inline PDF
  assert _real_part_cost(data) == 40 * PAGE  # not 10 * 258: that overflowed the window
  assert _cost(data) == _cost(bytearray(data)) == _cost(memoryview(data)) == 40 * PAGE
  assert _cost(base64.b64encode(data).decode()) == _cost(base64.urlsafe_b64encode(data).decode()) == 40 * PAGE
  assert _cost(data, counter=GEMINI_3) == 40 * 560  # Gemini 3 prices a page by media resolution


@pytest.mark.parametrize("pages", [1, 2, 3, 10, 11, 40, 999, 1000])
def test_uncompressed_page_trees(pages):
  assert _cost(pdf(pages)) == pages * PAGE


@pytest.mark.parametrize("pages", [1, 37, 137, 1000])
def test_deep_page_trees_take_the_roots_count(pages):
  assert _cost(pdf_deep(pages)) == pages * PAGE


@pytest.mark.parametrize("pages,per_stream", [(1, 100), (40, 100), (40, 7), (250, 64), (1000, 200)])
def test_pdf15_object_streams_are_inflated(pages, per_stream):
  data = pdf_object_streams(pages, per_stream)
  assert b"/Type /Page" not in data and b"/Count" not in data  # only the compressed streams say
  assert _cost(data) == pages * PAGE
  assert _real_part_cost(data) == pages * PAGE


def test_more_than_the_documented_maximum_costs_the_maximum():
  assert _cost(pdf(1200)) == PDF_MAX_PAGES * PAGE
  assert _cost(pdf_object_streams(1500, 300)) == PDF_MAX_PAGES * PAGE
  assert pdf_pages(pdf(1200)) == 1200  # the cap is the caller's


def test_an_explicit_page_count_in_a_dict_part_still_wins():
  data = base64.b64encode(pdf(40)).decode()
  assert count_part({"inline_data": {"mime_type": "application/pdf", "data": data}, "pages": 3}, COUNTER) == 3 * PAGE
  assert count_part({"inline_data": {"mime_type": "application/pdf", "data": data, "pages": "5"}}, COUNTER) == 5 * PAGE
  # An unusable one is no count: the bytes say.
  assert count_part({"inline_data": {"mime_type": "application/pdf", "data": data}, "pages": -1}, COUNTER) == 40 * PAGE


def _revised(pages: int) -> bytes:
  """An incremental update that rewrites pages 3 and 4 (objects 5 and 6), as annotating does."""
  base = pdf(pages)
  annotated = (_PAGE % 2).replace(b"/Resources", b"/Annots [] /Resources")
  return _classic([annotated, annotated], prefix=base, first=5, prev=_startxref(base), size=pages + 3)


def _startxref(data: bytes) -> int:
  return int(data.rsplit(b"startxref\n", 1)[1].split()[0])


def _grown(pages: int, added: int) -> bytes:
  """An incremental update that appends ``added`` pages: a new root with a larger /Count."""
  base = pdf(pages)
  first_new = pages + 3
  kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(pages + added))
  root = b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % (pages + added)
  out = base
  prev = _startxref(base)
  # Object 2 (the root) is rewritten; the new pages follow as new objects.
  offsets = {}
  offsets[2] = len(out)
  out += b"2 0 obj\n" + root + b"\nendobj\n"
  for i in range(added):
    offsets[first_new + i] = len(out)
    out += b"%d 0 obj\n" % (first_new + i) + _PAGE % 2 + b"\nendobj\n"
  xref = len(out)
  out += b"xref\n0 1\n0000000000 65535 f \n2 1\n%010d 00000 n \n" % offsets[2]
  out += b"%d %d\n" % (first_new, added) + b"".join(b"%010d 00000 n \n" % offsets[first_new + i] for i in range(added))
  out += b"trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (first_new + added, prev, xref)
  return out


def test_incremental_updates_count_each_page_once():
  assert _cost(_revised(10)) == 10 * PAGE  # rewritten pages are the same objects
  assert _cost(_grown(10, 2)) == 12 * PAGE  # the new root's count, and the new leaves


def test_leaves_count_when_the_tree_does_not():
  no_type = pdf(4).replace(b"/Type /Pages ", b"")  # pdfium guesses a node from its /Kids
  assert _cost(no_type) == 4 * PAGE
  no_count = pdf(4).replace(b" /Count 4", b"")
  assert _cost(no_count) == 4 * PAGE


# ---------------------------------------------------------------------------
# Hostile and broken PDFs: the guess or a sane count, never an error
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("count,expected", [
    (b"99999999999999999999", 3),  # beyond any integer a reader takes: leaves count
    (b"2000000", 3),  # pdfium trusts /Count only below 0xFFFFF: so do we
    (b"-5", 3),
    (b"0", 3),
    (b"5 0 R", 3),  # an indirect count is not read
    (b"/Five", 3),
    (b"2000", PDF_MAX_PAGES),  # plausible: trusted, then capped
    (b"7", 7),  # more than the leaves found: over-counting is the safe side
])
def test_bogus_root_counts(count, expected):
  assert _cost(pdf(3, count=count)) == expected * PAGE


def test_counts_outside_the_page_tree_are_not_pages():
  outline = b"<< /Type /Outlines /First 9 0 R /Last 9 0 R /Count 50 >>"
  assert _cost(pdf(3, extra=[outline])) == 3 * PAGE
  names = b"<< /Type /PageLabels /Count 60 >>"  # /PageLabels is not /Page
  assert _cost(pdf(3, extra=[names])) == 3 * PAGE


def test_no_page_tree_is_the_guess():
  assert _cost(pdf(0)) == UNKNOWN  # /Count 0 and no leaves: the bytes do not say
  assert _cost(b"%PDF-1.7\n" + bytes(4096)) == UNKNOWN
  assert _cost(b"not a pdf /Type /Page /Type /Page") == UNKNOWN  # no %PDF- header
  assert _cost(b"\x00" * 2000 + pdf(3)) == UNKNOWN  # header too far in
  assert _cost(b"junk" * 100 + pdf(3)) == 3 * PAGE  # a little junk first is tolerated
  assert _cost("%%% not base64 %%%") == UNKNOWN
  assert pdf_pages(None) is None and pdf_pages(12) is None and pdf_pages("é") is None


def test_line_wrapped_base64_is_read():
  text = base64.encodebytes(pdf(12)).decode()  # MIME-style: a newline every 76 characters
  assert "\n" in text and _cost(text) == 12 * PAGE


def test_truncated_files_never_raise_and_never_exceed_the_document():
  for data in (pdf(40), pdf_object_streams(40, 7), pdf_deep(40)):
    cuts = sorted(set(range(0, len(data), max(1, len(data) // 400))) | {len(data) - 1})
    for cut in cuts:
      pages = pdf_pages(data[:cut])
      assert pages is None or 1 <= pages <= 40, cut


def test_a_cut_file_still_gives_the_root_count():
  data = pdf_object_streams(40, per_stream=2)  # the catalog and the root in the first stream
  second = data.index(b"endstream", data.index(b"endstream") + 1)
  assert pdf_pages(data[:second - 10]) == 40  # no leaf seen: the root's count alone
  whole = pdf_object_streams(40)
  stream = whole.index(b"stream\n") + len(b"stream\n")
  assert {pdf_pages(whole[: stream + cut]) for cut in range(0, 400, 10)} <= {None, 40}


def _bomb(gigabytes: int = 1) -> bytes:
  """A zlib stream of ``gigabytes`` GiB of zeros in about a megabyte (full flushes repeat exactly)."""
  c = zlib.compressobj(9)
  first = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
  block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
  return first + block * (1024 * gigabytes - 1) + c.flush()


def test_a_deflate_bomb_costs_milliseconds():
  bomb = _bomb()
  assert len(bomb) < 2 << 20
  one = pdf_object_streams(12, bomb=bomb)
  many = pdf(3, extra=[b"<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode >>\nstream\n" + bomb + b"\nendstream"] * 8)
  assert _cost(one) == 12 * PAGE
  assert _cost(many) == 3 * PAGE
  for data in (one, many):
    start = time.perf_counter()
    pdf_pages(data)
    assert time.perf_counter() - start < 1.0


def test_hostile_repetition_gives_up_quickly():
  spam = [b"%PDF-1.4\n" + b"/Type /Page " * 2_000_000,
          b"%PDF-1.4\n" + b"1 0 obj /Type /Page " * 1_000_000,
          b"%PDF-1.4\n" + b"obj" * 5_000_000 + b"/Type /Page",
          b"%PDF-1.4\n" + b"/Type /ObjStm stream\n" * 1_000_000,
          b"%PDF-1.4\n" + b"/Type /ObjStm /Filter /FlateDecode stream\n" + b"x\x9c" * 5_000_000]
  for data in spam:
    start = time.perf_counter()
    pages = pdf_pages(data)
    assert pages is None or 1 <= pages <= 0xFFFFF
    assert time.perf_counter() - start < 2.0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096), st.sampled_from([b"", b"/Type /Pages /Count 3 ", b"/Type /ObjStm /N 2 stream\n"]))
def test_random_bytes_after_the_header_are_sane(rest, marker):
  pages = pdf_pages(b"%PDF-1.7\n" + marker + rest)
  assert pages is None or (type(pages) is int and 1 <= pages < 0xFFFFF)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_pdfs_are_sane(flips):
  data = bytearray(pdf_object_streams(40, 7))
  for pos, value in flips:
    data[pos % len(data)] = value
  pages = pdf_pages(bytes(data))
  assert pages is None or (type(pages) is int and 1 <= pages < 0xFFFFF)


# ---------------------------------------------------------------------------
# Speed: the whole file is scanned, at C speed
# ---------------------------------------------------------------------------


def _big_pdf(pages: int, megabytes: int, compressed: bool) -> bytes:
  """``pages`` pages plus incompressible image streams making up ``megabytes`` MiB."""
  # Deterministic, incompressible-looking filler: a counter through a multiplicative hash, 1 MiB.
  chunk = b"".join(struct.pack(">Q", (i * 0x9E3779B97F4A7C15) & (2**64 - 1)) for i in range(1 << 17))
  images = [b"<< /Type /XObject /Subtype /Image /Width 1024 /Height 1024 /Length %d >>\nstream\n" % len(chunk)
            + chunk + b"\nendstream" for _ in range(megabytes)]
  if compressed:
    base = pdf_object_streams(pages)
    head, tail = base.rsplit(b"startxref", 1)  # images are appended as unreferenced objects: still bytes to scan
    loose = b"".join(b"%d 0 obj\n" % (90000 + i) + img + b"\nendobj\n" for i, img in enumerate(images))
    return head + loose + b"startxref" + tail
  return pdf(pages, extra=images)


@pytest.mark.parametrize("megabytes", [5, 20])
@pytest.mark.parametrize("compressed", [False, True])
def test_large_pdfs_are_read_whole(megabytes, compressed):
  data = _big_pdf(40, megabytes, compressed)
  text = base64.b64encode(data).decode()
  assert pdf_pages(data) == pdf_pages(text) == 40


def test_a_pdf_is_read_once_however_often_its_part_is_costed(monkeypatch):
  """The compile, the payload frame and the guard each cost the user turn's parts, on
  every call of a tool loop: the whole-file scan ran three times per call."""
  import aether_frame.core.costing as costing

  costing._PDF_PAGES.clear()
  reads = []
  real = costing.pdf_pages
  monkeypatch.setattr(costing, "pdf_pages", lambda data, cap: reads.append(1) or real(data, cap))
  part = {"inline_data": {"mime_type": "application/pdf", "data": base64.b64encode(_big_pdf(40, 1, False)).decode()}}
  for _ in range(5):
    assert count_part(dict(part), COUNTER) == 40 * 258
  assert len(reads) == 1


# ---------------------------------------------------------------------------
# HEIC / HEIF / AVIF
# ---------------------------------------------------------------------------

# Real encoder output for a 4032x3024 image, cut after the meta box (see the module docstring).
_HEIC_4032x3024 = (
    "AAAAHGZ0eXBoZWljAAAAAG1pZjFoZWljbWlhZgAAAVdtZXRhAAAAAAAAACFoZGxyAAAAAAAAAABwaWN0AAAAAAAAAAAAAAAAAAAAACJpbG9j"
    "AAAAAERAAAEAAQAAAAABewABAAAAAAAAC2AAAAAjaWluZgAAAAAAAQAAABVpbmZlAgAAAAABAABodmMxAAAAAA5waXRtAAAAAAABAAAA12lw"
    "cnAAAAC4aXBjbwAAAHlodmNDAQNwAAAAkAAAAAAAtPAA/P34+AAADwNgAAEAGEABDAH//wNwAAADAJAAAAMAAAMAtLoCQGEAAQAsQgEBA3AA"
    "AAMAkAAAAwAAAwC0oAH4IAL0WW6kkprm4CGgwIAAAAyAAAADAIRiAAEAB0QBwXKwYkAAAAATY29scm5jbHgAAQANAAaAAAAAFGlzcGUAAAAA"
    "AAAPwAAAC9AAAAAQcGl4aQAAAAADCAgIAAAAF2lwbWEAAAAAAAAAAQABBIECAwQ="
)
_AVIF_4032x3024 = (
    "AAAAIGZ0eXBhdmlmAAAAAGF2aWZtaWYxbWlhZk1BMUIAAADrbWV0YQAAAAAAAAAhaGRscgAAAAAAAAAAcGljdAAAAAAAAAAAAAAAAAAAAAAO"
    "cGl0bQAAAAAAAQAAAB5pbG9jAAAAAEQAAAEAAQAAAAEAAAETAAACYQAAAChpaW5mAAAAAAABAAAAGmluZmUCAAAAAAEAAGF2MDFDb2xvcgAA"
    "AABqaXBycAAAAEtpcGNvAAAAFGlzcGUAAAAAAAAPwAAAC9AAAAAQcGl4aQAAAAADCAgIAAAADGF2MUOBEAwAAAAAE2NvbHJuY2x4AAEADQAG"
    "gAAAABdpcG1hAAAAAAAAAAEAAQQBAoME"
)


def _box(kind: bytes, payload: bytes = b"", large: bool = False) -> bytes:
  if large:
    return struct.pack(">I", 1) + kind + struct.pack(">Q", 16 + len(payload)) + payload
  return struct.pack(">I", 8 + len(payload)) + kind + payload


def _full(kind: bytes, payload: bytes, version: int = 0, flags: int = 0) -> bytes:
  return _box(kind, bytes([version]) + flags.to_bytes(3, "big") + payload)


def _ispe(width: int, height: int) -> bytes:
  return _full(b"ispe", struct.pack(">II", width, height))


def _ipma(links: dict[int, list[int]], version: int = 0, wide: bool = False) -> bytes:
  out = struct.pack(">I", len(links))
  for item, props in links.items():
    out += struct.pack(">H" if version == 0 else ">I", item) + bytes([len(props)])
    out += b"".join(struct.pack(">H", 0x8000 | p) if wide else bytes([0x80 | p]) for p in props)
  return _full(b"ipma", out, version, 1 if wide else 0)


def heif(properties: list[bytes], links: dict[int, list[int]] | None, primary: int = 1, brand: bytes = b"heic",
         version: int = 0, wide: bool = False, before_meta: bytes = b"") -> bytes:
  """ftyp, then meta (hdlr, pitm, iprp: ipco and ipma), then an mdat."""
  ftyp = _box(b"ftyp", brand + bytes(4) + b"mif1" + brand + b"miaf")
  hdlr = _full(b"hdlr", bytes(4) + b"pict" + bytes(13))
  pitm = _full(b"pitm", struct.pack(">H" if version == 0 else ">I", primary), version)
  iprp = _box(b"iprp", _box(b"ipco", b"".join(properties)) + (_ipma(links, version, wide) if links else b""))
  return ftyp + before_meta + _full(b"meta", hdlr + pitm + iprp) + _box(b"mdat", bytes(64))


def iphone_grid(width: int = 4032, height: int = 3024, brand: bytes = b"heic") -> bytes:
  """An iPhone-style photo: a grid item (1) over 512x512 tiles (2..), tiles' ispe first."""
  tiles = math.ceil(width / 512) * math.ceil(height / 512)
  hvcc = _box(b"hvcC", bytes(23))
  props = [hvcc, _ispe(512, 512), _box(b"irot", b"\x00"), _ispe(width, height), _box(b"pixi", bytes(8))]
  links = {1: [4, 3]} | {2 + t: [1, 2] for t in range(tiles)}
  return heif(props, links, primary=1, brand=brand)


def jpeg(width: int, height: int) -> bytes:
  return (b"\xff\xd8" + b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
          + b"\xff\xd9")


@pytest.mark.parametrize("fixture,mime", [(_HEIC_4032x3024, "image/heic"), (_AVIF_4032x3024, "image/avif")])
def test_real_heic_and_avif_headers(fixture, mime):
  data = base64.b64decode(fixture)
  assert image_dimensions(data) == image_dimensions(fixture) == (4032, 3024)
  assert _cost(data, mime) == _cost(fixture, mime) == _cost(jpeg(4032, 3024), "image/jpeg") == 3096
  assert _real_part_cost(data, mime) == 3096  # was 1,290, the unknown-size cost


@pytest.mark.parametrize("mime,brand", [("image/heic", b"heic"), ("image/heif", b"mif1"), ("image/avif", b"avif")])
@pytest.mark.parametrize("size", [(4032, 3024), (3024, 4032), (1920, 1080), (300, 200), (8000, 6000), (768, 769)])
def test_grids_cost_like_the_same_jpeg(mime, brand, size):
  data = iphone_grid(*size, brand=brand)
  assert image_dimensions(data) == size
  assert _cost(data, mime) == _cost(base64.urlsafe_b64encode(data).decode(), mime) == _cost(jpeg(*size), "image/jpeg")


def test_the_primary_item_wins_over_a_larger_one():
  props = [_ispe(4000, 3000), _ispe(1000, 800)]
  assert image_dimensions(heif(props, {1: [2], 2: [1]}, primary=1)) == (1000, 800)
  assert image_dimensions(heif(props, {1: [2], 2: [1]}, primary=2)) == (4000, 3000)
  # 32-bit item IDs (ipma and pitm version 1) and 15-bit property indices.
  assert image_dimensions(heif(props, {70000: [2], 2: [1]}, primary=70000, version=1, wide=True)) == (1000, 800)


def test_without_associations_the_largest_ispe_is_taken():
  props = [_ispe(512, 512), _ispe(4032, 3024), _ispe(256, 192)]
  assert image_dimensions(heif(props, None)) == (4032, 3024)
  assert image_dimensions(heif(props, {9: [1]}, primary=1)) == (4032, 3024)  # primary not listed
  assert image_dimensions(heif(props, {1: [3]}, primary=1)) == (256, 192)


def test_boxes_before_meta_and_large_sizes():
  props = [_ispe(4032, 3024)]
  assert image_dimensions(heif(props, {1: [1]}, before_meta=_box(b"free", bytes(100)))) == (4032, 3024)
  ftyp = _box(b"ftyp", b"heic" + bytes(4) + b"mif1heic")
  meta = _box(b"meta", bytes(4) + _box(b"iprp", _box(b"ipco", _ispe(2000, 1000), large=True)), large=True)
  assert image_dimensions(ftyp + meta) == (2000, 1000)


def test_heif_without_sizes_is_unknown():
  ftyp = _box(b"ftyp", b"heic" + bytes(4))
  unknown = 1290
  assert _cost(ftyp, "image/heic") == unknown
  assert _cost(ftyp + _full(b"meta", _box(b"iprp", _box(b"ipco"))), "image/heic") == unknown
  assert _cost(ftyp + _box(b"mdat", bytes(100)), "image/heic") == unknown
  cut_ispe = _full(b"ispe", b"\x00\x01")
  assert _cost(ftyp + _full(b"meta", _box(b"iprp", _box(b"ipco", cut_ispe))), "image/heic") == unknown
  assert _cost(ftyp + _full(b"meta", _box(b"iprp", _box(b"ipco", _ispe(0, 0)))), "image/heic") == unknown
  # Properties outside meta are not the image's.
  outside = _box(b"iprp", _box(b"ipco", _ispe(4032, 3024)))
  assert _cost(ftyp + _full(b"meta", _box(b"hdlr")) + outside, "image/heic") == unknown
  # An MP4 is not an image: no meta, no size.
  assert image_dimensions(_box(b"ftyp", b"isom" + bytes(4)) + _box(b"moov", bytes(100))) is None


def test_truncated_heif_never_raises():
  for data in (iphone_grid(), base64.b64decode(_HEIC_4032x3024), base64.b64decode(_AVIF_4032x3024)):
    for cut in range(len(data) + 1):
      dims = image_dimensions(data[:cut])
      assert dims is None or dims == (4032, 3024) or dims == (512, 512), cut


def test_hostile_heif_nesting_gives_up_quickly():
  ftyp = _box(b"ftyp", b"heic" + bytes(4))
  many = ftyp + _full(b"meta", _box(b"iprp", _box(b"ipco", _box(b"free") * 100_000 + _ispe(9, 9))))
  loop = ftyp + struct.pack(">I", 8) + b"free" * 10_000
  huge = ftyp + _full(b"meta", _box(b"iprp", _box(b"ipco", _ispe(2**32 - 1, 2**32 - 1))))
  for data in (many, loop):
    start = time.perf_counter()
    assert image_dimensions(data) is None  # the ispe is past the property limit
    assert time.perf_counter() - start < 0.5
  assert _cost(huge, "image/heic") == 16 * 258  # downscaled like any huge image


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1024))
def test_random_heif_bodies_are_sane(rest):
  dims = image_dimensions(_box(b"ftyp", b"heic" + bytes(4)) + rest)
  assert dims is None or (len(dims) == 2 and all(type(v) is int and v >= 0 for v in dims))
