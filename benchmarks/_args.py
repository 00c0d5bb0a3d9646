"""Argument types shared by the benchmark scripts (run as scripts: ``benchmarks/`` is on sys.path)."""

from __future__ import annotations

import argparse


def at_least(lo: int):
  """An ``int`` argument type that refuses values below ``lo`` with a one-line error."""

  def parse(text: str) -> int:
    n = int(text)
    if n < lo:
      raise argparse.ArgumentTypeError(f"must be >= {lo}, got {n}")
    return n

  parse.__name__ = "int"
  return parse


positive = at_least(1)
