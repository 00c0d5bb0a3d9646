"""Replay cost as a session's manifest count grows: reading is linear, compiling is per call.

Runs one short real session (Runner + ContextPackPlugin + the offline model)
into a ``FileArtifactService`` folder, then copies its first manifest version
to versions 0..N-1 of the same artifact (same inputs, so every call replays
identically at the same cost). For each N it times what ``aether-frame
replay`` does before compiling (list the sessions, list the versions, load
every version) and, with ``--replay``, the whole ``aether-frame replay -q``.

Reading a version through ``FileArtifactService.load_artifact`` lists all N
version folders, so the read phase was quadratic: 77 s at 2,000 calls and
834 s at 5,000 on a loaded 2-core box (reads ~2 s and ~5 s once fixed).

  TIKTOKEN_CACHE_DIR=/work/shared/tiktoken-cache PYTHONPATH=. python benchmarks/replay_scale.py --calls 2000 10000 --replay
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path

from google.adk.artifacts import FileArtifactService

from aether_frame.audit.source import open_location
from aether_frame.cli import main as cli_main
from tests.fixtures.audit_session import run_session

from _args import positive  # benchmarks/ is on sys.path when run as a script


def build(root: Path, n: int) -> None:
  """A store with one session of ``n`` manifest versions (copies of a real one)."""
  asyncio.run(run_session(FileArtifactService(str(root)), 3, tools=False))
  (versions,) = root.glob("apps/*/users/*/sessions/*/artifacts/context_pack/manifest.json/versions")
  have = {int(p.name) for p in versions.iterdir()}
  for v in range(n):
    if v not in have:
      shutil.copytree(versions / "0", versions / str(v))
  for v in sorted(have - set(range(n))):
    shutil.rmtree(versions / str(v))


async def read_all(loc: str) -> int:
  source = open_location(loc)
  n = 0
  for ref in await source.sessions():
    for v in await source.versions(ref):
      await source.load(ref, v)
      n += 1
  return n


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--calls", type=positive, nargs="+", default=[2000, 5000, 10000], help="manifests per session")
  ap.add_argument("--replay", action="store_true", help="also time the whole `aether-frame replay -q`")
  args = ap.parse_args()
  print(f"{'calls':>7} {'read s':>8} {'read ms/call':>13}" + (f" {'replay s':>9} {'ms/call':>8}" if args.replay else ""))
  with tempfile.TemporaryDirectory() as tmp:
    for n in args.calls:
      root = Path(tmp) / f"s{n}"
      build(root, n)
      t = time.perf_counter()
      assert asyncio.run(read_all(str(root))) == n
      read = time.perf_counter() - t
      line = f"{n:>7} {read:>8.2f} {1000 * read / n:>13.3f}"
      if args.replay:
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # its summary line would land inside the table
          rc = cli_main(["replay", "-q", str(root)])
        full = time.perf_counter() - t
        assert rc == 0, f"replay exited {rc}"
        line += f" {full:>9.1f} {1000 * full / n:>8.2f}"
      print(line, flush=True)
      shutil.rmtree(root)


if __name__ == "__main__":
  main()
