"""What ContextPackPlugin adds to a model call through a real ADK Runner.

``compile_bench.py`` times the pure compiler. This times what a user pays:
the same deterministic chat runs through a real ``Runner`` with the scripted
``OfflineLlm``, once without plugins and once with ``ContextPackPlugin`` (its
defaults: hybrid ranker, recall index, manifests written to an in-memory
ArtifactService with content-addressed replay inputs). For each turn it
records the wall time of ``runner.run_async`` (one model call per turn), and
the plugin's own ``compile_ms`` from the manifest (request read, compile,
rewrite, guard; the manifest write is not in it).

Reported per history size bucket: p50 turn time without and with the plugin,
their difference (the plugin's cost per call, manifest write included) and the
plugin's p50 ``compile_ms``.

  python benchmarks/plugin_overhead.py
  python benchmarks/plugin_overhead.py --turns 400 --window 131072
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import random
import statistics
import sys
import time
from typing import Optional

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm
from compile_bench import synth_text  # run as a script: benchmarks/ is on sys.path

APP, USER = "overhead", "u1"


async def run(turns: int, seed: int, plugin: Optional[ContextPackPlugin]) -> tuple[list[float], list[float]]:
  """Per-turn wall ms, and the plugin's compile_ms per call (empty without plugin)."""
  rng = random.Random(seed)
  users = [f"Turn {i + 1}. " + synth_text(rng, 10, 90) for i in range(turns)]
  replies = [synth_text(rng, 30, 200) for _ in range(turns)]
  model = OfflineLlm(script=replies, report_usage=True)
  agent = LlmAgent(name="assistant", model=model, instruction="You are a concise operations assistant.")
  artifacts = InMemoryArtifactService()
  runner = Runner(
      app=App(name=APP, root_agent=agent, plugins=[plugin] if plugin else []),
      session_service=InMemorySessionService(),
      artifact_service=artifacts,
  )
  session = await runner.session_service.create_session(app_name=APP, user_id=USER)
  walls: list[float] = []
  compile_ms: list[float] = []
  gc.collect()
  for text in users:
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    t0 = time.perf_counter()
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=msg):
      pass
    walls.append((time.perf_counter() - t0) * 1000)
  if plugin is not None:
    import json

    versions = await artifacts.list_versions(app_name=APP, user_id=USER, session_id=session.id,
                                             filename="context_pack/manifest.json")
    for v in sorted(versions):
      art = await artifacts.load_artifact(app_name=APP, user_id=USER, session_id=session.id,
                                          filename="context_pack/manifest.json", version=v)
      doc = json.loads(art.inline_data.data)
      compile_ms.append(doc["runtime"]["compile_ms"])
    if len(compile_ms) != turns:
      raise SystemExit(f"expected {turns} manifests, found {len(compile_ms)}")
  return walls, compile_ms


def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--turns", type=int, default=300, help="user turns (each adds 2 events)")
  ap.add_argument("--window", type=int, default=131_072)
  ap.add_argument("--seed", type=int, default=5)
  args = ap.parse_args(argv)
  logging.getLogger("google_adk").setLevel(logging.ERROR)
  base, _ = asyncio.run(run(args.turns, args.seed, None))
  ours, compile_ms = asyncio.run(run(args.turns, args.seed, ContextPackPlugin(window=args.window)))
  print(f"plugin_overhead: {args.turns} turns, window {args.window}, python {sys.version.split()[0]}")
  print(f"{'turns':>11} {'events':>11} | {'no plugin p50':>13} {'plugin p50':>11} {'added':>9} | {'compile_ms p50':>14}")
  step = max(1, args.turns // 3)
  for lo in range(0, args.turns, step):
    hi = min(args.turns, lo + step)
    b, o, c = (statistics.median(x[lo:hi]) for x in (base, ours, compile_ms))
    print(f"{lo + 1:>5}-{hi:<5} {2 * lo:>5}-{2 * hi:<5} | {b:>11.2f}ms {o:>9.2f}ms {o - b:>7.2f}ms | {c:>12.3f}ms")
  b, o, c = (statistics.median(x) for x in (base, ours, compile_ms))
  print(f"{'all':>11} {'':>11} | {b:>11.2f}ms {o:>9.2f}ms {o - b:>7.2f}ms | {c:>12.3f}ms")
  print(f"\nplugin / no plugin, p50 turn time: {o / b:.2f}x")
  return 0


if __name__ == "__main__":
  sys.exit(main())
