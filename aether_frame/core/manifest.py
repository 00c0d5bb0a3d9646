"""The manifest document: a deterministic body, a runtime section, a checksum.

``body`` is everything the compiler produced; it is byte-identical for the
same inputs. ``runtime`` holds what legitimately varies between runs
(timings, calibration, guard outcome). ``checksum`` is the sha256 of the
canonical body, so a tampered manifest is detected.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from .canonical import canonical_bytes, digest
from .errors import AetherFrameError

RUNTIME_KEY = "runtime"
CHECKSUM_KEY = "checksum"


class ManifestIntegrityError(AetherFrameError, ValueError):
  """A manifest's checksum does not match its body (tampered or corrupted)."""


def body_of(doc: dict[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in doc.items() if k not in (RUNTIME_KEY, CHECKSUM_KEY)}


def finalize(body: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
  doc = dict(body)
  doc[RUNTIME_KEY] = runtime
  doc[CHECKSUM_KEY] = digest(body_of(body))
  return doc


def verify(doc: dict[str, Any], *, where: str = "manifest") -> dict[str, Any]:
  """Returns the document if its checksum holds; raises naming the mismatch."""
  if not isinstance(doc, dict) or CHECKSUM_KEY not in doc:
    raise ManifestIntegrityError(f"{where}: not a manifest (no {CHECKSUM_KEY!r} field)")
  body = body_of(doc)
  try:
    expected = digest(body)
  except ValueError:  # Python's json reads NaN/Infinity, which canonical JSON refuses: say where
    bad = _non_finite_at(body, "") or "a value"
    raise ManifestIntegrityError(f"{where}: not a valid manifest ({bad} is not a finite number)") from None
  if doc[CHECKSUM_KEY] != expected:
    raise ManifestIntegrityError(
        f"{where}: checksum mismatch (recorded {doc[CHECKSUM_KEY]}, body hashes to {expected}); refusing a tampered manifest"
    )
  wrong = _shape_problem(body)
  if wrong is not None:  # re-signed after an edit, or written by a buggy tool: readers would misread it
    raise ManifestIntegrityError(f"{where}: not a valid manifest ({wrong})")
  return doc


_INT, _NUMBER, _STR, _OPT_STR = "an integer", "a number", "a string", "a string or null"
_TOP_FIELDS = {  # field: (what it must be, required); what inspect, diff, report and replay read
    "window": (_INT, True), "reserve": (_INT, True), "usable": (_INT, True),
    "layers": (dict, True), "items": (list, True), "truncation_events": (list, True), "totals": (dict, True),
    "inputs": (dict, False), "tokenizer": (dict, False), "tail": (dict, False), "ranking": (dict, False),
    "problems": (list, False), "artifact_uris": (list, False), "allocation_notes": (list, False),
    "pack_id": (_STR, False), "agent": (_OPT_STR, False), "session_id": (_OPT_STR, False),
}
_LAYER_FIELDS = {"budget": _INT, "floor": _INT, "requested": _INT, "used": _INT, "received": _INT, "weight": _NUMBER}
_ITEM_FIELDS = {"id": _STR, "layer": _STR, "status": _STR, "tokens": _INT}
_TOTAL_FIELDS = {"tokens": _INT, "unallocated": _INT}


def _is(value: Any, kind: Any) -> bool:
  if kind is _INT:
    return isinstance(value, int) and not isinstance(value, bool)
  if kind is _NUMBER:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if kind is _STR:
    return isinstance(value, str)
  if kind is _OPT_STR:
    return value is None or isinstance(value, str)
  return isinstance(value, kind)


def _what(kind: Any) -> str:
  return {dict: "an object", list: "a list"}.get(kind, kind)


def _shape_problem(body: dict[str, Any]) -> Optional[str]:
  """What is the wrong type or missing in a manifest body (``layers.memory.used is not an integer``), or None."""
  for field, (kind, required) in _TOP_FIELDS.items():
    if field not in body:
      if required:
        return f"it has no {field!r}"
    elif not _is(body[field], kind):
      return f"{field} is not {_what(kind)}"
  nested = [(f"layers.{name}", layer, _LAYER_FIELDS) for name, layer in sorted(body["layers"].items())]
  nested += [(f"items[{i}]", item, _ITEM_FIELDS) for i, item in enumerate(body["items"])]
  nested += [(f"truncation_events[{i}]", event, {}) for i, event in enumerate(body["truncation_events"])]
  nested.append(("totals", body["totals"], _TOTAL_FIELDS))
  for path, value, fields in nested:
    if not isinstance(value, dict):
      return f"{path} is not an object"
    for field, kind in fields.items():
      if field in value and not _is(value[field], kind):
        return f"{path}.{field} is not {_what(kind)}"
  return None


def _non_finite_at(value: Any, path: str) -> Optional[str]:
  """The path of the first NaN or infinity in ``value`` (``layers.memory.used``), or None."""
  if isinstance(value, float):
    return (path or "the document") if not math.isfinite(value) else None
  if isinstance(value, dict):
    for key in sorted(value, key=str):
      found = _non_finite_at(value[key], f"{path}.{key}" if path else str(key))
      if found is not None:
        return found
  elif isinstance(value, (list, tuple)):
    for i, item in enumerate(value):
      found = _non_finite_at(item, f"{path}[{i}]")
      if found is not None:
        return found
  return None


def dumps(doc: dict[str, Any]) -> bytes:
  return canonical_bytes(doc)
