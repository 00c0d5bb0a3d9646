"""Replaying one long real session: each call as the next call of its compiler session, vs from scratch.

Runs one real session per size (Runner + ContextPackPlugin + the offline model,
the audit tests' research chat with tool calls, 4K window) into a
``FileArtifactService`` folder. Then, per size, it times ``aether-frame
replay``'s work (``audit.replay.replay``) both ways, alternating which goes
first, ``--rounds`` times:

- warm (the default): a call's rebuild extends the compiler session that rebuilt
  the previous call of the same agent, so only the new turns are costed,
  digested and indexed;
- cold (``replay --cold``): every call compiled whole with ``compile_pack``,
  the stateless reference. Each call's history holds the previous one's, so
  this grows with the square of the session's length.

Both must report every call identical. Printed per size: the median seconds of
each, and the median of the per-round ratios (cold / warm) with their spread.

  TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache PYTHONPATH=. python benchmarks/replay_session.py
  ... --turns 100 400 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from google.adk.artifacts import FileArtifactService

from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from tests.fixtures.audit_session import run_session

from _args import positive  # benchmarks/ is on sys.path when run as a script


def timed_replay(loc: str, *, cold: bool) -> tuple[float, int, int]:
  """Seconds for a whole replay of ``loc``, its call count and its identical count."""
  t0 = time.perf_counter()
  reports = asyncio.run(replay(open_location(loc), cold=cold))
  return time.perf_counter() - t0, len(reports), sum(r.status == "identical" for r in reports)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--turns", type=positive, nargs="+", default=[100, 300], help="user turns per session")
  ap.add_argument("--rounds", type=positive, default=3, help="replays of each kind per size")
  args = ap.parse_args()
  print(f"{'turns':>6} {'calls':>6} | {'warm s':>8} {'cold s':>8} | cold/warm  (medians of {args.rounds} rounds)")
  failed = False
  for n in args.turns:
    with tempfile.TemporaryDirectory() as tmp:
      asyncio.run(run_session(FileArtifactService(tmp), n))
      times: dict[bool, list[float]] = {False: [], True: []}
      calls = 0
      for r in range(args.rounds):
        for cold in ((False, True) if r % 2 == 0 else (True, False)):
          s, calls, same = timed_replay(tmp, cold=cold)
          times[cold].append(s)
          if same != calls:
            print(f"  {'cold' if cold else 'warm'} replay: {calls - same} of {calls} calls not identical", file=sys.stderr)
            failed = True
      warm, cold = statistics.median(times[False]), statistics.median(times[True])
      ratios = [c / w for w, c in zip(times[False], times[True])]
      print(f"{n:>6} {calls:>6} | {warm:>8.2f} {cold:>8.2f} | {statistics.median(ratios):>8.2f}x"
            f"  (rounds {min(ratios):.2f}x-{max(ratios):.2f}x)")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
