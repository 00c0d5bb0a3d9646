"""The manifest document: a deterministic body, a runtime section, a checksum.

``body`` is everything the compiler produced; it is byte-identical for the
same inputs. ``runtime`` holds what legitimately varies between runs
(timings, calibration, guard outcome). ``checksum`` is the sha256 of the
canonical body, so a tampered manifest is detected.
"""

from __future__ import annotations

from typing import Any

from .canonical import canonical_bytes, digest

RUNTIME_KEY = "runtime"
CHECKSUM_KEY = "checksum"


class ManifestIntegrityError(ValueError):
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
  expected = digest(body_of(doc))
  if doc[CHECKSUM_KEY] != expected:
    raise ManifestIntegrityError(
        f"{where}: checksum mismatch (recorded {doc[CHECKSUM_KEY]}, body hashes to {expected}); refusing a tampered manifest"
    )
  return doc


def dumps(doc: dict[str, Any]) -> bytes:
  return canonical_bytes(doc)
