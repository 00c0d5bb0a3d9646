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
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..core.canonical import canonical_json
from ..core.compiler import CallInputs, CompileInput
from ..core.items import Item
from ..core.manifest import ManifestIntegrityError
from ..core.policy import PackPolicy

INPUTS_KEY = "inputs"
INPUTS_SCHEMA = "aether-frame/inputs@1"
DEFAULT_CHUNK_SIZE = 16
"""Measured with ``benchmarks/manifest_storage.py`` (30 turns): 16 stores fewer
bytes per call than 8 or 32, and far fewer than an inline hash list."""
GZIP_MIN_BYTES = 1024
"""Blobs at least this large are stored gzip-compressed (keyed by the plain JSON)."""

_GZIP_MAGIC = b"\x1f\x8b"


class BlobIntegrityError(ManifestIntegrityError):
  """A stored blob does not hash to its key, or is missing."""


def blob_key(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _encode(value: Any) -> tuple[str, bytes]:
  data = canonical_json(value).encode("utf-8")
  return blob_key(data), data


def pack_blob(data: bytes) -> tuple[bytes, str]:
  """Storage form of a blob: gzip (deterministic, mtime 0) when large."""
  if len(data) >= GZIP_MIN_BYTES:
    return gzip.compress(data, compresslevel=6, mtime=0), "application/gzip"
  return data, "application/json"


def unpack_blob(stored: bytes) -> bytes:
  return gzip.decompress(stored) if stored[:2] == _GZIP_MAGIC else stored


@dataclass
class EncodedInputs:
  section: dict[str, Any]
  """Goes into the manifest body under ``inputs`` (covered by its checksum)."""
  blobs: dict[str, bytes] = field(default_factory=dict)
  """sha256 hex → canonical JSON bytes (plain, not packed)."""


def encode(ci: CompileInput, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> EncodedInputs:
  if chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
  blobs: dict[str, bytes] = {}

  def put(value: Any) -> str:
    key, data = _encode(value)
    blobs[key] = data
    return key

  history = [put(it.model_dump(mode="json")) for it in ci.history]
  full = len(history) - len(history) % chunk_size
  chunks = [put(history[i:i + chunk_size]) for i in range(0, full, chunk_size)]
  call = ci.call
  section = {
      "schema": INPUTS_SCHEMA,
      "hash": "sha256",
      "policy": put(ci.policy.model_dump(mode="json")),
      "call": call.model_dump(mode="json", exclude={"items", "inflight"}),
      "items": [put(it.model_dump(mode="json")) for it in call.items],
      "inflight": [put(it.model_dump(mode="json")) for it in call.inflight],
      "history": {"len": len(history), "chunk_size": chunk_size, "chunks": chunks, "tail": history[full:]},
  }
  return EncodedInputs(section, blobs)


def _check_section(section: Any) -> dict[str, Any]:
  if not isinstance(section, dict) or section.get("schema") != INPUTS_SCHEMA:
    raise ValueError(f"manifest has no replayable inputs (expected an {INPUTS_KEY!r} section, schema {INPUTS_SCHEMA})")
  return section


def first_keys(section: Mapping[str, Any]) -> list[str]:
  """Blobs needed before the history chunks can be expanded."""
  s = _check_section(section)
  return [s["policy"], *s["items"], *s["inflight"], *s["history"]["chunks"]]


def _load(blobs: Mapping[str, bytes], key: str) -> Any:
  data = blobs.get(key)
  if data is None:
    raise BlobIntegrityError(f"input blob {key} is missing from the store")
  if blob_key(data) != key:
    raise BlobIntegrityError(f"input blob {key} hashes to {blob_key(data)}; refusing a tampered input")
  return json.loads(data)


def history_keys(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  h = _check_section(section)["history"]
  keys: list[str] = []
  for chunk in h["chunks"]:
    keys.extend(_load(blobs, chunk))
  keys.extend(h["tail"])
  if len(keys) != h["len"]:
    raise BlobIntegrityError(f"history lists {len(keys)} items, the manifest says {h['len']}")
  return keys


def all_keys(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> list[str]:
  return first_keys(section) + history_keys(section, blobs)


def decode(section: Mapping[str, Any], blobs: Mapping[str, bytes]) -> CompileInput:
  """Rebuilds the exact ``CompileInput``; every blob is checked against its key."""
  s = _check_section(section)
  items = [Item.model_validate(_load(blobs, k)) for k in s["items"]]
  inflight = [Item.model_validate(_load(blobs, k)) for k in s["inflight"]]
  history = [Item.model_validate(_load(blobs, k)) for k in history_keys(s, blobs)]
  call = CallInputs.model_validate({**s["call"], "items": items, "inflight": inflight})
  return CompileInput(policy=PackPolicy.model_validate(_load(blobs, s["policy"])), history=history, call=call)
