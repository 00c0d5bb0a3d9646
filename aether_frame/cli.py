"""``aether-frame``: the demo, plus the manifest tools (inspect, replay, diff, report, flush)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from .audit.terminal import TerminalSafe

EXIT_STATUS = """exit status:
  0    fine
  1    a difference (replay), or flush left entries in the spool
  2    an error: bad arguments, an unreadable or refused (tampered) manifest, a failed demo run;
       one line on stderr
  130  interrupted (Ctrl-C)
  141  the output was cut short by a closed pipe (`… | head`): 128 + SIGPIPE, as a shell reports it"""


class CommandError(SystemExit):
  """A bad argument or a failed run: ``main`` prints it as one line, and the process exits 2."""

  def __init__(self, message: str):
    super().__init__(message)
    self.code = 2


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="aether-frame", description="Context Packs for Google ADK.",
                                   epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  demo = sub.add_parser("demo", help="run the offline demo app and print per-call budgets")
  demo.add_argument("--out", default="aether-frame-demo", help="FileArtifactService folder for manifests")
  demo.add_argument("--window", type=int, default=8192, help="context window in tokens (default 8192)")
  demo.add_argument("--turns", type=int, default=30, help="user turns in the scripted chat (default 30, at most 10,000)")
  demo.add_argument("--model", default=None, help="e.g. gemini-3.5-flash (needs GOOGLE_API_KEY); default: offline model")
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
  return main(out=args.out, window=args.window, turns=args.turns, model=args.model)


def _never_fail_to_print() -> None:
  """A folder name that is not UTF-8 (a lone surrogate after ``os.fsdecode``) is printed as ``\\udcff``.

  Under a UTF-8 locale Python's stdout is strict, and ``inspect`` of such a
  folder died printing its label; under the C locale it is already lenient.
  """
  if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
    sys.stdout.reconfigure(errors="backslashreplace")


def main(argv: Optional[Sequence[str]] = None) -> int:
  _never_fail_to_print()
  streams = sys.stdout, sys.stderr
  sys.stdout, sys.stderr = TerminalSafe(sys.stdout), TerminalSafe(sys.stderr)  # ids are anyone's text
  try:
    return _main(argv)
  finally:
    sys.stdout = streams[0] if isinstance(sys.stdout, TerminalSafe) else sys.stdout
    sys.stderr = streams[1] if isinstance(sys.stderr, TerminalSafe) else sys.stderr


def _main(argv: Optional[Sequence[str]]) -> int:
  logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
  args = build_parser().parse_args(argv)
  try:
    code = int(args.func(args) or 0)
    sys.stdout.flush()  # what is still buffered breaks the pipe here, not in the interpreter's exit
    return code
  except BrokenPipeError:  # `aether-frame demo | head`: the run finished, its reader left early
    from .audit.cli import EXIT_BROKEN_PIPE, silence_stdout
    silence_stdout()
    return EXIT_BROKEN_PIPE
  except CommandError as e:
    print(f"aether-frame: {e}", file=sys.stderr)
    raise
  except KeyboardInterrupt as e:
    print(f"aether-frame: interrupted{f'; {e}' if str(e) else ''}", file=sys.stderr)
    return 130


if __name__ == "__main__":
  from aether_frame.cli import main as package_main  # demo.py raises the package's CommandError, not __main__'s copy
  sys.exit(package_main())
