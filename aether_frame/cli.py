"""``aether-frame``: the demo, plus the manifest tools (inspect, replay, diff, report, flush)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="aether-frame", description="Context Packs for Google ADK.")
  sub = parser.add_subparsers(dest="command", required=True)
  demo = sub.add_parser("demo", help="run the offline demo app and print per-call budgets")
  demo.add_argument("--out", default="aether-frame-demo", help="FileArtifactService folder for manifests")
  demo.add_argument("--window", type=int, default=8192, help="context window in tokens (default 8192)")
  demo.add_argument("--turns", type=int, default=30)
  demo.add_argument("--model", default=None, help="e.g. gemini-2.5-flash (needs GOOGLE_API_KEY); default: offline model")
  demo.set_defaults(func=lambda a: _demo(a))
  try:
    from .audit.cli import add_subcommands
  except ImportError:  # the audit tools are part of the package; guard partial installs
    add_subcommands = None
  if add_subcommands is not None:
    add_subcommands(sub)
  return parser


def _demo(args) -> int:
  from .demo import main
  if args.window <= 0:
    raise SystemExit(f"--window must be positive, got {args.window}")
  return main(out=args.out, window=args.window, turns=args.turns, model=args.model)


def main(argv: Optional[Sequence[str]] = None) -> int:
  logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
  args = build_parser().parse_args(argv)
  return int(args.func(args) or 0)


if __name__ == "__main__":
  sys.exit(main())
