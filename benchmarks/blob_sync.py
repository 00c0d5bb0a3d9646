"""A second worker's first manifest on a long session another worker already stored.

Replay inputs are content-addressed blobs. A worker that has never seen a
session (a restart, a scale-out) does not know which of its blobs the store
has. This runs one worker's first turn on an N-event session (it stores the
whole session's inputs), then a fresh worker's first turn on the same session
and store, and counts the store requests each made for input blobs (listings
and saves), through a real Runner with the offline model, on ADK's
FileArtifactService and on GcsArtifactService against the gcp-storage-emulator
(in process, loopback). The first worker is the baseline of the same run.

  python benchmarks/blob_sync.py                        # file: 1,000 and 10,000 events; gcs: 1,000
  python benchmarks/blob_sync.py --file 2000 --gcs 2000 5000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from _args import positive  # benchmarks/ is on sys.path when run as a script
import compile_bench as cb
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import FileArtifactService, GcsArtifactService
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.manifest_store import ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm

APP, USER, BUCKET = "bench", "u", "af-blob-sync"


def counting(cls):
  """``cls`` with its input-blob listings and saves counted (the real store underneath)."""

  class Counting(cls):
    def reset(self):
      self.listed = self.saved = 0

    async def list_artifact_versions(self, **kw):
      self.listed += kw["filename"].startswith("context_pack/blobs/")
      return await super().list_artifact_versions(**kw)

    async def save_artifact(self, **kw):
      self.saved += kw["filename"].startswith("context_pack/blobs/")
      return await super().save_artifact(**kw)

  return Counting


async def first_turn(store, sessions, sid: str, ask: str) -> dict:
  agent = LlmAgent(name="assistant", model=OfflineLlm(default="noted"), instruction="Be brief.")
  writer = ManifestWriter(spool_dir=False, timeout=3600.0)  # time the whole store, however long
  plugin = ContextPackPlugin(window=131_072, manifest_writer=writer)
  runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]), session_service=sessions, artifact_service=store)
  store.reset()
  t0 = time.perf_counter()
  async for _ in runner.run_async(user_id=USER, session_id=sid, new_message=types.Content(role="user", parts=[types.Part(text=ask)])):
    pass
  if plugin.faults or writer.stats["stored"] != 1:
    raise SystemExit(f"faults={plugin.faults} stored={writer.stats['stored']}: the timing would not be of a stored manifest")
  return {"s": time.perf_counter() - t0, "listed": store.listed, "saved": store.saved}


async def case(store, n_events: int) -> tuple[dict, dict]:
  sessions = InMemorySessionService()
  session = await sessions.create_session(app_name=APP, user_id=USER)
  rng = random.Random(1)
  ts = time.time() - 45.0 * n_events
  for i in range(n_events):
    role, author = ("user", "user") if i % 2 == 0 else ("model", "assistant")
    content = types.Content(role=role, parts=[types.Part(text=cb.synth_text(rng))])
    await sessions.append_event(session, Event(author=author, invocation_id=f"i{i // 2}", content=content, timestamp=ts))
    ts += 45.0
  a = await first_turn(store, sessions, session.id, "what did we decide about the budget?")
  b = await first_turn(store, sessions, session.id, "and the schedule?")
  return a, b


def report(name: str, n: int, a: dict, b: dict) -> None:
  print(f"{name:5s} {n:>7,} | {a['s']:8.2f}s {a['listed']:>7,} {a['saved']:>7,} | {b['s']:8.2f}s {b['listed']:>7,} {b['saved']:>7,} "
        f"| {b['listed'] / max(1, a['listed']):8.4f}x")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--file", type=positive, nargs="*", default=[1_000, 10_000], help="event counts on FileArtifactService")
  ap.add_argument("--gcs", type=positive, nargs="*", default=[1_000], help="event counts on the GCS emulator")
  args = ap.parse_args()
  print("store  events | worker 1 (stores all): turn  listed   saved | worker 2 (fresh): turn  listed   saved | listed 2/1")
  with tempfile.TemporaryDirectory() as tmp:
    for n in args.file:
      store = counting(FileArtifactService)(str(Path(tmp) / f"file{n}"))
      report("file", n, *asyncio.run(case(store, n)))
    if args.gcs:
      sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
      from tests.fixtures.gcs_emulator import GcsEmulator

      emulator = GcsEmulator(Path(tmp) / "gcs").start()
      os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
      try:
        emulator.create_bucket(BUCKET)
        for n in args.gcs:
          store = counting(GcsArtifactService)(BUCKET)
          report("gcs", n, *asyncio.run(case(store, n)))
      finally:
        emulator.stop()
  print("turn = the whole first turn (compile, model, manifest store); listed / saved = input-blob listings and saves.")


if __name__ == "__main__":
  main()
