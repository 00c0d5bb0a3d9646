"""What a user's ``pip install`` gets: the type-hint marker and the top-level names.

Without ``py.typed`` in the wheel, mypy and pyright ignore every inline type
hint of the package; the lazily imported ADK names were missing from
``dir(aether_frame)`` (and so from IDE completion).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import aether_frame

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_wheel_ships_the_py_typed_marker(tmp_path):
  src = tmp_path / "src"  # a copy: building in the checkout leaves build/ behind, and reuses a stale one
  shutil.copytree(ROOT / "aether_frame", src / "aether_frame", ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("pyproject.toml", "README.md"):
    shutil.copy(ROOT / name, src / name)
  subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
      check=True, capture_output=True, timeout=300,
  )
  (wheel,) = tmp_path.glob("aether_frame-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  assert "aether_frame/py.typed" in names and "aether_frame/core/compiler.py" in names


def test_every_exported_name_resolves_and_is_listed():
  for name in aether_frame.__all__:
    assert getattr(aether_frame, name) is not None, name
  assert set(aether_frame.__all__) <= set(dir(aether_frame))
