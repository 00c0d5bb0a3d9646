"""Whole-file writes for the manifest tools: a reader sees the old file or the new one, never half.

A crash, a full disk or Ctrl-C during a plain ``write_bytes`` leaves a
truncated file under the final name (a spool entry that no longer parses, a
report that renders half a page); writing a sibling temporary file and
renaming it over the target is atomic on POSIX and Windows.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
  """Writes ``data`` to ``path`` in one step; an ``OSError`` names ``path``, not the temporary file."""
  tmp = None
  try:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # the spool sweeps stale ".tmp-*"
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
    tmp = None
    _sync_folder(path.parent)  # the rename itself survives a power loss only once its folder is on disk
  except BaseException as e:
    if tmp is not None:
      with contextlib.suppress(OSError):
        os.unlink(tmp)
    if isinstance(e, OSError):
      raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    raise


def _sync_folder(folder: Path) -> None:
  """fsyncs a folder's entry list (POSIX); a platform that cannot open folders (Windows) skips it."""
  try:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:  # some file systems refuse fsync on a folder: the rename still happened
    pass
  finally:
    os.close(fd)
