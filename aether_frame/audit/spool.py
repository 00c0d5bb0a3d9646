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
from typing import Any, Iterator, Optional

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


def make_entry(*, store: str, app: str, user: str, session: str, filename: str, blob_session: str,
               manifest: dict[str, Any], blobs: dict[str, bytes], reason: str = "") -> dict[str, Any]:
  return {
      "schema": SPOOL_SCHEMA,
      "store": store,
      "app": app,
      "user": user,
      "session": session,
      "filename": filename,
      "blob_session": blob_session,
      "reason": reason,
      "manifest": manifest,
      "blobs": {k: v.decode("utf-8") for k, v in blobs.items()},
  }


def entry_blobs(entry: dict[str, Any]) -> dict[str, bytes]:
  return {k: v.encode("utf-8") for k, v in entry.get("blobs", {}).items()}


def is_entry(doc: Any) -> bool:
  return isinstance(doc, dict) and doc.get("schema") == SPOOL_SCHEMA


class Spool:
  """A folder of pending writes. Created on first use, never read by the agent itself."""

  def __init__(self, root: str | os.PathLike):
    self.root = Path(root)

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
    with open(path, encoding="utf-8") as f:
      return json.load(f)

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

  @contextlib.contextmanager
  def lock(self) -> Iterator[bool]:
    """Non-blocking inter-process lock for a flush; yields False if another process holds it."""
    self.root.mkdir(parents=True, exist_ok=True)
    try:
      import fcntl
    except ImportError:  # pragma: no cover - not POSIX
      yield True
      return
    with open(self.root / ".lock", "a") as f:
      try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError:
        yield False
        return
      try:
        yield True
      finally:
        fcntl.flock(f, fcntl.LOCK_UN)
