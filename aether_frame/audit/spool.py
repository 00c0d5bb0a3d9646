"""The local spool: manifests (with their input blobs) the artifact store refused.

One JSON file per failed write, named so that a plain sort is write order.
``ManifestWriter`` flushes the spool, oldest first, before its next direct
write, and ``aether-frame flush`` does the same from the command line, so
nothing is lost and a session's manifest versions stay in call order.

An entry carries every input blob its manifest references (it may be sent to
another store, which has none of them), but the blobs are kept once, by
content, under ``blobs/``: a long session's history is the same blobs call
after call, so an outage costs disk for new content only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from ..core.canonical import escape_lone_surrogates
from ..core.errors import AetherFrameError
from .files import write_atomic

SPOOL_SCHEMA = "aether-frame/spool@1"
SPOOL_ENV = "AETHER_FRAME_SPOOL_DIR"
BLOB_DIR = "blobs"
DAMAGED_DIR = "damaged"
"""Where a flush moves entries that can never be sent (not JSON, a blob that does not hash to its key)."""
BLOB_GRACE_S = 3600.0
"""A blob no entry references is deleted only this long after its last write:
an agent may be adding the entry that references it at the same moment."""

_seq_lock = threading.Lock()
_last_stamp = 0


def default_spool_dir() -> Path:
  """``$AETHER_FRAME_SPOOL_DIR``, else ``$XDG_STATE_HOME/aether-frame/spool`` (state, not cache: it must survive)."""
  if os.environ.get(SPOOL_ENV):
    return Path(os.environ[SPOOL_ENV]).expanduser()
  state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
  return Path(state) / "aether-frame" / "spool"


def _stamp() -> int:
  """Strictly increasing within the process, even if the clock steps back."""
  global _last_stamp
  with _seq_lock:
    _last_stamp = max(time.time_ns(), _last_stamp + 1)
    return _last_stamp


def store_tag(store: str) -> str:
  """Short tag of a store URI, part of the entry's file name so filtering needs no reads.

  ``surrogatepass``: a folder whose name is not UTF-8 reaches here as lone surrogates.
  """
  return hashlib.sha256(store.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def make_entry(*, store: str, app: str, user: str, session: str, filename: str, blob_app: str,
               manifest: dict[str, Any], blobs: Mapping[str, bytes], reason: str = "") -> dict[str, Any]:
  return {
      "schema": SPOOL_SCHEMA,
      "store": store,
      "app": app,
      "user": user,
      "session": session,
      "filename": filename,
      "blob_app": blob_app,
      "reason": reason,
      "manifest": manifest,
      "blobs": {k: v.decode("utf-8") for k, v in blobs.items()},
  }


def entry_blobs(entry: dict[str, Any]) -> dict[str, bytes]:
  """The blobs as bytes; ``surrogateescape`` gives back the bytes of a damaged file (see ``load_blobs``)."""
  return {k: v.encode("utf-8", "surrogateescape") for k, v in entry.get("blobs", {}).items()}


def load_blobs(entry: dict[str, Any], spool_root: Path, where: str) -> dict[str, Any]:
  """The entry with the blobs it names (``blob_keys``) read back from ``spool_root/blobs``.

  Entries written before the shared blob folder carry theirs inline.
  """
  keys = entry.get("blob_keys")
  if not keys:
    return entry
  blobs = dict(entry.get("blobs") or {})
  bdir = Path(spool_root) / BLOB_DIR
  for key in keys:
    if key in blobs:
      continue
    try:
      # A file damaged into bytes that are not UTF-8 is read as it is: its hash check (on upload,
      # on replay) then names the entry and the key, as for any other damage.
      blobs[key] = (bdir / key).read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
      raise SpoolEntryError(f"{where}: blob {key} is missing from {bdir}") from None
  return {**entry, "blobs": blobs}


def is_entry(doc: Any) -> bool:
  return isinstance(doc, dict) and doc.get("schema") == SPOOL_SCHEMA


_REQUIRED = ("store", "app", "user", "session", "filename")


class SpoolEntryError(AetherFrameError, ValueError):
  """A spool file that is not a readable entry; its message names the file."""


def check_entry(doc: Any, where: str) -> dict[str, Any]:
  """The entry, or SpoolEntryError: a bad one must stop the flush, not go to a guessed store."""
  if not is_entry(doc):
    raise SpoolEntryError(f"{where}: not a spool entry (expected a JSON object with schema {SPOOL_SCHEMA})")
  absent = [k for k in _REQUIRED if not isinstance(doc.get(k), str) or not doc[k]]
  if absent:
    raise SpoolEntryError(f"{where}: spool entry has no {', '.join(absent)}")
  if not isinstance(doc.get("manifest"), dict) or not isinstance(doc.get("blobs", {}), dict):
    raise SpoolEntryError(f"{where}: spool entry's manifest or blobs is not a JSON object")
  keys = doc.get("blob_keys", [])
  if not isinstance(keys, list) or not all(isinstance(k, str) and _is_key(k) for k in keys):
    raise SpoolEntryError(f"{where}: spool entry's blob_keys is not a list of sha256 hex keys")
  return doc


def _is_key(key: str) -> bool:
  return len(key) == 64 and all(c in "0123456789abcdef" for c in key)


def _write_atomic(path: Path, text: str) -> None:
  """``text`` is JSON: a lone surrogate (a non-UTF-8 store folder) is written as its escape."""
  write_atomic(path, escape_lone_surrogates(text).encode("utf-8"))


class Spool:
  """A folder of pending writes. Created on first use, never read by the agent itself."""

  def __init__(self, root: str | os.PathLike):
    self.root = Path(root)
    self._held = 0
    self._lock_file = None

  def add(self, entry: dict[str, Any]) -> Path:
    """Writes the entry's blobs (those not spooled already), then the entry naming them."""
    blobs = dict(entry.get("blobs") or {})
    bad = [k for k in blobs if not _is_key(k)]
    if bad:
      raise ValueError(f"spool blob keys must be sha256 hex, got {bad[0]!r}")
    bdir = self.root / BLOB_DIR
    bdir.mkdir(parents=True, exist_ok=True)
    for key in sorted(blobs):
      path = bdir / key
      if path.exists():
        with contextlib.suppress(FileNotFoundError):
          os.utime(path)  # in use again: out of the collector's reach for another grace period
      if not path.exists():  # (a collector may have taken it between the two checks)
        _write_atomic(path, blobs[key])
    stored = {k: v for k, v in entry.items() if k != "blobs"}
    stored["blob_keys"] = sorted(blobs)
    name = f"{_stamp():020d}-{store_tag(entry['store'])}-{os.getpid()}.json"
    _write_atomic(self.root / name, json.dumps(stored, ensure_ascii=False, separators=(",", ":")))
    # A collector in another process that listed the entries before this one
    # landed may have taken a blob this entry reuses: put any such back.
    for key in sorted(blobs):
      if not (bdir / key).exists():
        _write_atomic(bdir / key, blobs[key])
    return self.root / name

  def paths(self) -> list[Path]:
    if not self.root.is_dir():
      return []
    return sorted(p for p in self.root.iterdir() if p.suffix == ".json" and not p.name.startswith("."))

  @staticmethod
  def read(path: Path) -> dict[str, Any]:
    """The entry at ``path`` with its blobs, checked; errors name the file (move it aside to flush the rest)."""
    try:
      with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    except ValueError as e:  # includes UnicodeDecodeError
      raise SpoolEntryError(f"{path}: not JSON ({e})") from None
    return load_blobs(check_entry(doc, str(path)), Path(path).parent, str(path))

  def pending(self, store: Optional[str] = None) -> list[Path]:
    """Entries waiting, oldest first; only those for ``store`` when given."""
    paths = self.paths()
    if store is None:
      return paths
    tag = f"-{store_tag(store)}-"
    return [p for p in paths if tag in p.name]

  def set_aside(self, path: Path) -> Path:
    """Moves a damaged entry into ``damaged/``, kept for a look, out of the flush's way.

    The blobs it names (those still there) are copied to ``damaged/blobs/``: once
    no waiting entry names them, the collector deletes them from ``blobs/``.
    """
    aside = self.root / DAMAGED_DIR
    aside.mkdir(parents=True, exist_ok=True)
    try:
      with open(path, encoding="utf-8") as f:
        keys = json.load(f).get("blob_keys") or []
    except (OSError, ValueError, AttributeError):  # not JSON, not an object: no blobs to keep
      keys = []
    for key in keys:
      if isinstance(key, str) and _is_key(key) and (self.root / BLOB_DIR / key).exists():
        (aside / BLOB_DIR).mkdir(exist_ok=True)
        shutil.copyfile(self.root / BLOB_DIR / key, aside / BLOB_DIR / key)
    target = aside / path.name
    os.replace(path, target)
    return target

  @staticmethod
  def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
      path.unlink()

  def collect(self, *, grace_s: float = BLOB_GRACE_S) -> int:
    """Deletes blobs no entry references any more (after ``grace_s``); returns how many.

    Run by a flush, under the spool lock. An entry that cannot be read keeps
    every blob (it may still need them). Half-written ``.tmp-*`` files older
    than ``grace_s`` (a process that died mid-write) go too; a live writer's
    are seconds old.
    """
    bdir = self.root / BLOB_DIR
    self._sweep_temp(time.time() - grace_s)
    if not bdir.is_dir():
      return 0
    used: set[str] = set()
    for path in self.paths():
      try:
        with open(path, encoding="utf-8") as f:
          keys = json.load(f).get("blob_keys", [])
      except (OSError, ValueError, AttributeError):
        return 0
      used.update(k for k in keys if isinstance(k, str))
    cutoff, removed = time.time() - grace_s, 0
    for blob in bdir.iterdir():
      if blob.name.startswith(".") or blob.name in used:
        continue
      with contextlib.suppress(FileNotFoundError):
        if blob.stat().st_mtime < cutoff:
          blob.unlink()
          removed += 1
    return removed

  def _sweep_temp(self, cutoff: float) -> None:
    for folder in (self.root, self.root / BLOB_DIR):
      if not folder.is_dir():
        continue
      for tmp in folder.glob(".tmp-*"):
        with contextlib.suppress(FileNotFoundError):
          if tmp.stat().st_mtime < cutoff:
            tmp.unlink()

  def acquire(self) -> bool:
    """Non-blocking inter-process lock, re-entrant within this Spool object.

    Held while flushing, and while an upload that timed out may still land,
    so that a ``flush`` in another process cannot send the same manifest twice.
    """
    if self._held:
      self._held += 1
      return True
    self.root.mkdir(parents=True, exist_ok=True)
    f = open(self.root / ".lock", "a")
    try:
      import fcntl
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # pragma: no cover - not POSIX: no inter-process lock
      pass
    except OSError:
      f.close()
      return False
    self._lock_file, self._held = f, 1
    return True

  def release(self) -> None:
    if not self._held:
      return
    self._held -= 1
    if not self._held and self._lock_file is not None:
      self._lock_file.close()  # closing the descriptor drops the flock
      self._lock_file = None

  @contextlib.contextmanager
  def lock(self) -> Iterator[bool]:
    """``acquire`` as a context manager; yields False if another process holds the lock."""
    got = self.acquire()
    try:
      yield got
    finally:
      if got:
        self.release()
