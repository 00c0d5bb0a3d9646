"""Canonical JSON and hashing, the basis of byte-identical packs and manifests."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
  """Serialises with sorted keys and fixed separators, so equal data gives equal bytes."""
  return json.dumps(
      value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
  )


def sha256_hex(data: str | bytes) -> str:
  if isinstance(data, str):
    data = data.encode("utf-8")
  return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
  """sha256 of the canonical JSON of ``value``, prefixed like manifest checksums."""
  return "sha256:" + sha256_hex(canonical_json(value))
