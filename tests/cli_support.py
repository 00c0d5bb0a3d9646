"""Shared checks for the command-line tests: one-line errors and exit status 2."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from aether_frame import cli

ROOT = Path(__file__).resolve().parents[1]


def one_line(err: str) -> str:
  """``err`` is one line and no traceback; returned stripped."""
  assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
  return err.strip()


def exit_2(capsys, argv: list[str]) -> str:
  """``cli.main(argv)`` ends in exit status 2 with one line on stderr, returned or raised."""
  try:
    code = cli.main(argv)
  except SystemExit as e:
    code = e.code
  assert code == 2, code
  return one_line(capsys.readouterr().err)


def load_benchmark(name: str):
  """``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package)."""
  spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules.setdefault(name, module)  # dataclasses resolve annotations through it
  spec.loader.exec_module(module)
  return module
