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


def chain_step(head: str, value: str) -> str:
  """One link of a running hash over an ordered list of strings."""
  return sha256_hex(head + "\x1f" + value)


def sequence_digest(values: list[str], head: str = "") -> str:
  """Hash of an ordered id list as a running chain.

  A chain (rather than the canonical JSON of the list) lets a list that only
  grows at its end, like a conversation tail, be re-hashed in O(1) per call.
  """
  for value in values:
    head = chain_step(head, value)
  return "sha256:" + sha256_hex(head)
