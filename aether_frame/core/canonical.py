"""Canonical JSON and hashing, the basis of byte-identical packs and manifests."""

from __future__ import annotations

import hashlib
import json
import re
from json.encoder import encode_basestring as _json_string
from typing import Any

from .errors import AetherFrameError


def canonical_json(value: Any) -> str:
  """Serialises with sorted keys and fixed separators, so equal data gives equal bytes."""
  return json.dumps(
      value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
  )


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical_bytes(value: Any) -> bytes:
  """``canonical_json(value)`` as UTF-8, for storage, lone surrogates escaped
  (``escape_lone_surrogates``). (A high and a low surrogate side by side load
  back joined, as one character, as any JSON reader does.)
  """
  text = canonical_json(value)
  try:
    return text.encode("utf-8")
  except UnicodeEncodeError:
    return _escape(text).encode("utf-8")


def escape_lone_surrogates(json_text: str) -> str:
  """JSON text with every lone surrogate written as its ``\\u`` escape, so it encodes as UTF-8.

  A lone surrogate (a non-UTF-8 file name through ``os.fsdecode``, half an
  emoji) has no UTF-8 form; its escape loads back as the same string. Text
  without one is returned as is.
  """
  try:
    json_text.encode("utf-8")
  except UnicodeEncodeError:
    return _escape(json_text)
  return json_text


def _escape(text: str) -> str:
  return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


MAX_DEPTH = 900
"""Deepest nesting of free-form JSON (parts, meta) accepted, on every Python: ``json``'s own
limit went from ~1,000 levels (3.11) to ~1,500 (3.12) and ~10,000 (3.13), so data one
version took another refused, and a pack recorded on one could not be replayed on another."""


class NestedTooDeep(AetherFrameError, RecursionError):
  """Free-form JSON nested deeper than ``MAX_DEPTH`` (caught where ``json``'s RecursionError is)."""


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
  """Raises ``NestedTooDeep`` past ``limit`` levels of dicts and lists; iterative, so any depth is safe."""
  stack = [(value, 1)]
  pop, push = stack.pop, stack.append
  while stack:
    node, depth = pop()
    if depth > limit:
      raise NestedTooDeep(f"nested deeper than {limit} levels")
    if isinstance(node, dict):
      children = node.values()
    elif isinstance(node, (list, tuple)):
      children = node
    else:
      continue
    for child in children:
      if isinstance(child, (dict, list, tuple)):
        push((child, depth + 1))


def canonical_parts_json(parts: Any) -> str:
  """``canonical_json(parts)`` for a list of Part dicts, byte-identical.

  The common part, ``{"text": str}``, is written directly with the same C
  string encoder ``json.dumps(ensure_ascii=False)`` uses: every history
  group is hashed this way, and the general encoder is 3x slower.
  """
  if not isinstance(parts, (list, tuple)):
    check_depth(parts)
    return canonical_json(parts)
  pieces = []
  for part in parts:
    if type(part) is dict and len(part) == 1 and type(part.get("text")) is str:
      pieces.append('{"text":' + _json_string(part["text"]) + "}")
    else:
      check_depth(part, MAX_DEPTH - 1)
      pieces.append(canonical_json(part))
  return "[" + ",".join(pieces) + "]"


def sha256_hex(data: str | bytes) -> str:
  if isinstance(data, str):
    # surrogatepass: a lone surrogate (from a JSON "\\ud83d" escape) hashes
    # instead of failing the whole compile; valid text encodes the same.
    data = data.encode("utf-8", "surrogatepass")
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
