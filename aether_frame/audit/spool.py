"""The local spool: manifests (with their input blobs) the artifact store refused.

One JSON file per failed write, named so that a plain sort is write order.
``ManifestWriter`` flushes the spool, oldest first, before its next direct
write, and ``aether-frame flush`` does the same from the command line, so
nothing is lost and a session's manifest versions stay in call order.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

SPOOL_SCHEMA = "aether-frame/spool@1"
SPOOL_ENV = "AETHER_FRAME_SPOOL_DIR"

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
  """Short tag of a store URI, part of the entry's file name so filtering needs no reads."""
  return hashlib.sha256(store.encode("utf-8")).hexdigest()[:10]


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
  return {k: v.encode("utf-8") for k, v in entry.get("blobs", {}).items()}


def is_entry(doc: Any) -> bool:
  return isinstance(doc, dict) and doc.get("schema") == SPOOL_SCHEMA


_REQUIRED = ("store", "app", "user", "session", "filename")


class SpoolEntryError(ValueError):
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
  return doc


class Spool:
  """A folder of pending writes. Created on first use, never read by the agent itself."""

  def __init__(self, root: str | os.PathLike):
    self.root = Path(root)
    self._held = 0
    self._lock_file = None

  def add(self, entry: dict[str, Any]) -> Path:
    self.root.mkdir(parents=True, exist_ok=True)
    name = f"{_stamp():020d}-{store_tag(entry['store'])}-{os.getpid()}.json"
    fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(entry, f, ensure_ascii=False, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, self.root / name)
    except BaseException:
      with contextlib.suppress(OSError):
        os.unlink(tmp)
      raise
    return self.root / name

  def paths(self) -> list[Path]:
    if not self.root.is_dir():
      return []
    return sorted(p for p in self.root.iterdir() if p.suffix == ".json" and not p.name.startswith("."))

  @staticmethod
  def read(path: Path) -> dict[str, Any]:
    """The entry at ``path``, checked; errors name the file (move it aside to flush the rest)."""
    try:
      with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    except ValueError as e:  # includes UnicodeDecodeError
      raise SpoolEntryError(f"{path}: not JSON ({e})") from None
    return check_entry(doc, str(path))

  def pending(self, store: Optional[str] = None) -> list[Path]:
    """Entries waiting, oldest first; only those for ``store`` when given."""
    paths = self.paths()
    if store is None:
      return paths
    tag = f"-{store_tag(store)}-"
    return [p for p in paths if tag in p.name]

  @staticmethod
  def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
      path.unlink()

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
