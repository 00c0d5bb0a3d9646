"""Content-addressed replay inputs: a ``CompileInput`` as a small section plus blobs.

Each item, the policy and each full chunk of the history hash list is stored
once, keyed by the sha256 of its canonical JSON, so the calls of a session
share what they share (system instruction, tool declarations, every earlier
turn). History only grows, so its hash list is cut at fixed boundaries: a full
chunk never changes and is reused by every later call, and the manifest lists
O(history / chunk) hashes instead of O(history).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections import ChainMap, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from ..core.canonical import canonical_bytes
from ..core.compiler import CallInputs, CompileInput, recorded_call_exclusions
from ..core.items import Item
from ..core.manifest import ManifestIntegrityError
from ..core.policy import PackPolicy

INPUTS_KEY = "inputs"
INPUTS_SCHEMA = "aether-frame/inputs@1"
DEFAULT_CHUNK_SIZE = 8
"""Measured with ``benchmarks/manifest_storage.py`` (history as a chunk tree): at
30 and 100 turns, 8 stores 4-10% fewer input bytes per call than 16, 32 or 64
and about a third of a flat hash list at 100 turns; 4 saves another ~4% for
~9% more objects (each new object is a list and a write request)."""
GZIP_MIN_BYTES = 1024
"""Blobs at least this large are stored gzip-compressed (keyed by the plain JSON)."""

_GZIP_MAGIC = b"\x1f\x8b"


class BlobIntegrityError(ManifestIntegrityError):
  """A stored blob does not hash to its key, or is missing."""


def blob_key(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _encode(value: Any) -> tuple[str, bytes]:
  data = canonical_bytes(value)
  return blob_key(data), data


def pack_blob(data: bytes) -> tuple[bytes, str]:
  """Storage form of a blob: gzip (deterministic, mtime 0) when large."""
  if len(data) >= GZIP_MIN_BYTES:
    return gzip.compress(data, compresslevel=6, mtime=0), "application/gzip"
  return data, "application/json"


MAX_BLOB_BYTES = 256 << 20
"""What one stored blob may unpack to (256 MiB: an item's inline media is tens of MB)."""


def unpack_blob(stored: bytes, key: str = "") -> bytes:
  """A stored blob's plain bytes, refusing one that unpacks past ``MAX_BLOB_BYTES``.

  Blobs are read from a store anyone with write access could plant in: a 2 MB
  gzip bomb unpacked to 4 GB before its key check could refuse it.
  """
  if stored[:2] != _GZIP_MAGIC:
    return stored
  stream = zlib.decompressobj(wbits=31)  # one gzip member, as pack_blob writes
  plain = stream.decompress(stored, MAX_BLOB_BYTES + 1)
  if len(plain) > MAX_BLOB_BYTES:
    raise BlobIntegrityError(f"stored blob {key or '(unnamed)'} unpacks past {MAX_BLOB_BYTES} bytes; refused as tampered")
  if not stream.eof or stream.unused_data:
    raise gzip.BadGzipFile("a stored blob is not one whole gzip stream")
  return plain


@dataclass
class EncodedInputs:
  section: dict[str, Any]
  """Goes into the manifest body under ``inputs`` (covered by its checksum)."""
  blobs: Mapping[str, bytes] = field(default_factory=dict)
  """sha256 hex → canonical JSON bytes (plain, not packed), every blob the section references."""


@dataclass
class _Stream:
  items: list[Item]
  tree: list[list[str]]
  """Every hash per level: tree[0] the items', tree[i + 1] the full chunks' of tree[i]."""
  blobs: dict[str, bytes]


class InputEncoder:
  """Encodes ``CompileInput``s; a warm call costs about the same at 10,000 turns as at 100.

  The history hash list is a fixed-fanout tree: level 0 holds item hashes,
  each full run of ``chunk_size`` hashes at level i becomes one blob whose
  hash sits at level i+1. A manifest lists only each level's unfinished
  remainder (fewer than ``chunk_size`` hashes per level), so its size grows
  with log(history), and consecutive calls share every full chunk.

  Given a ``stream`` key (one per session and agent), the encoder remembers
  the previous call's history: items that are the very same objects again
  (the plugin's history only grows) are neither serialised nor hashed again,
  and their chunks are reused.
  """

  def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE, max_streams: int = 256):
    if chunk_size < 2:
      raise ValueError(f"chunk_size must be >= 2, got {chunk_size}")
    self.chunk_size = chunk_size
    self._max_streams = max_streams
    self._streams: OrderedDict[Any, _Stream] = OrderedDict()

  def encode(self, ci: CompileInput, *, stream: Any = None) -> EncodedInputs:
    blobs: dict[str, bytes] = {}
    levels, history_blobs = self._history(ci.history, stream)
    call = ci.call
    section = {
        "schema": INPUTS_SCHEMA,
        "hash": "sha256",
        "policy": _put(ci.policy.model_dump(mode="json"), blobs),
        "call": call.model_dump(mode="json", exclude=recorded_call_exclusions(call)),
        "items": [_put(it.model_dump(mode="json"), blobs) for it in call.items],
        "inflight": [_put(it.model_dump(mode="json"), blobs) for it in call.inflight],
        "history": {"len": len(ci.history), "chunk_size": self.chunk_size, "levels": levels},
    }
    return EncodedInputs(section, ChainMap(blobs, history_blobs))

  def forget(self, stream: Any) -> None:
    """Drops ``stream``'s memo (its session's cache was let go: the next call encodes afresh)."""
    self._streams.pop(stream, None)

  def _history(self, history: list[Item], stream: Any) -> tuple[list[list[str]], dict[str, bytes]]:
    size = self.chunk_size
    memo = self._streams.get(stream) if stream is not None else None
    same = 0
    if memo is not None:
      for a, b in zip(memo.items, history):
        if a is not b:
          break
        same += 1
      if len(memo.blobs) > 2 * len(history) + 4 * size:  # much was rewritten: start afresh
        memo, same = None, 0
    blobs = memo.blobs if memo is not None else {}  # grows in place: old entries stay valid
    level = (memo.tree[0][:same] if memo is not None else []) + [_put(it.model_dump(mode="json"), blobs) for it in history[same:]]
    tree, levels, reuse, depth = [level], [], same, 0
    while True:
      full = len(level) - len(level) % size
      levels.append(level[full:])
      if not full:
        break
      prev = memo.tree[depth + 1] if memo is not None and len(memo.tree) > depth + 1 else []
      keep = min(reuse // size, len(prev))  # chunks made only of unchanged hashes are unchanged
      level = prev[:keep] + [_put(level[i:i + size], blobs) for i in range(keep * size, full, size)]
      tree.append(level)
      reuse, depth = keep, depth + 1
    if stream is not None:
      self._streams[stream] = _Stream(list(history), tree, blobs)
      self._streams.move_to_end(stream)
      while len(self._streams) > self._max_streams:
        self._streams.popitem(last=False)
    return levels, blobs


def _put(value: Any, blobs: dict[str, bytes]) -> str:
  key, data = _encode(value)
  blobs[key] = data
  return key


def encode(ci: CompileInput, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> EncodedInputs:
  """Stateless ``InputEncoder(chunk_size).encode(ci)``."""
  return InputEncoder(chunk_size).encode(ci)


def _check_section(section: Any) -> dict[str, Any]:
  if not isinstance(section, dict) or section.get("schema") != INPUTS_SCHEMA:
    raise ValueError(f"manifest has no replayable inputs (expected an {INPUTS_KEY!r} section, schema {INPUTS_SCHEMA})")
  return section


def _levels(section: Mapping[str, Any]) -> list[list[str]]:
  """The history tree's levels; early manifests wrote ``chunks`` + ``tail``, the same tree of height 2."""
  h = section["history"]
  if "levels" in h:
    return h["levels"]
  return [h["tail"], h["chunks"]] if h.get("chunks") else [h["tail"]]


def first_keys(section: Mapping[str, Any]) -> list[str]:
  """Blobs needed before the history tree is expanded (its top level included)."""
  s = _check_section(section)
  levels = _levels(s)
  return [s["policy"], *s["items"], *s["inflight"], *(k for lv in levels[1:] for k in lv)]


def _load(blobs: Mapping[str, bytes], key: str) -> Any:
  data = blobs.get(key)
  if data is None:
    raise BlobIntegrityError(f"input blob {key} is missing from the store")
  if blob_key(data) != key:
    raise BlobIntegrityError(f"input blob {key} hashes to {blob_key(data)}; refusing a tampered input")
  return json.loads(data)


def root_keys(section: Mapping[str, Any]) -> list[str]:
  """Every blob the section names itself; the rest hang below its history chunks."""
  s = _check_section(section)
  return list(dict.fromkeys([*first_keys(s), *_levels(s)[0]]))


def chunk_children(data: bytes) -> Optional[list[str]]:
  """The keys a history chunk lists, or None for an item or policy blob (a JSON object)."""
  if data[:1] != b"[":
    return None
  value = json.loads(data)
  if not isinstance(value, list) or not all(isinstance(k, str) and len(k) == 64 for k in value):
    return None
  return value


def missing_chunks(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  """Chunk blobs of the history tree not in ``blobs`` yet: fetch them, ask again until empty."""
  levels = _levels(_check_section(section))
  need: list[str] = []
  frontier = [(depth, k) for depth in range(len(levels) - 1, 0, -1) for k in levels[depth]]
  while frontier:
    depth, key = frontier.pop()
    if key not in blobs:
      need.append(key)
    elif depth > 1:
      frontier.extend((depth - 1, k) for k in _load(blobs, key))
  return need


def _history_keys(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  h = _check_section(section)["history"]
  levels = _levels(section)
  out: list[str] = []
  for depth in range(len(levels) - 1, -1, -1):  # the earliest items sit under the top level
    frontier = list(levels[depth])
    for _ in range(depth):
      frontier = [k for chunk in frontier for k in _load(blobs, chunk)]
    out.extend(frontier)
  if len(out) != h["len"]:
    raise BlobIntegrityError(f"history lists {len(out)} items, the manifest says {h['len']}")
  return out


def history_keys(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  """The history's item hashes, oldest first (every chunk on the way must be in ``blobs``)."""
  return _history_keys(section, blobs)


def all_keys(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  return first_keys(section) + history_keys(section, blobs)


def policy_problem(e: Exception) -> str:
  """A pydantic ValidationError as one line: each field and what is wrong with it."""
  errors = getattr(e, "errors", None)
  if not callable(errors):
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
  out = []
  for err in errors():
    where = ".".join(str(x) for x in err.get("loc", ())) or "policy"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    given = err.get("input")
    out.append(f"{where}: {msg}" + (f" (got {given!r})" if not isinstance(given, (dict, list)) else ""))
  return "; ".join(out) or type(e).__name__


def stored_policy(data: Any) -> PackPolicy:
  """The policy a call was compiled with, as stored (``PackPolicy.from_stored``).

  One that no version accepted is one line naming the field, not pydantic's
  multi-line report inside a replay's per-call line.
  """
  try:
    return PackPolicy.from_stored(data)
  except ValidationError as e:
    raise ValueError(f"stored policy: {policy_problem(e)}") from None


def decode(section: Mapping[str, Any], blobs: Mapping[str, bytes], memo: Optional[dict[str, Item]] = None) -> CompileInput:
  """Rebuilds the exact ``CompileInput``; every blob is checked against its key.

  ``memo``: items already decoded, by key, shared by the calls of one session (each call's
  history holds the one before it: decoding every call's whole history again made replaying
  a session quadratic in its items' parsing). A key names its bytes, so a memoised item is
  the one those bytes hold.
  """
  s = _check_section(section)
  memo = {} if memo is None else memo

  def item(key: str) -> Item:
    got = memo.get(key)
    if got is None:
      got = memo[key] = Item.model_validate(_load(blobs, key))
    return got

  items = [item(k) for k in s["items"]]
  inflight = [item(k) for k in s["inflight"]]
  history = [item(k) for k in history_keys(s, blobs)]
  call = CallInputs.model_validate({**s["call"], "items": items, "inflight": inflight})
  return CompileInput(policy=stored_policy(_load(blobs, s["policy"])), history=history, call=call)
