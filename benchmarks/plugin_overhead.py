"""What ContextPackPlugin adds to a model call through a real ADK Runner.

``compile_bench.py`` times the pure compiler. This times what a user pays:
the same deterministic chat runs through two real ``Runner``s with the scripted
``OfflineLlm``, one without plugins and one with ``ContextPackPlugin`` (its
defaults: hybrid ranker, recall index, manifests written to an in-memory
ArtifactService with content-addressed replay inputs). The two run
interleaved, turn by turn (alternating which goes first), after an untimed
warm-up chat on each side, so load from other processes hits both alike. For
each turn it records the wall time of ``runner.run_async`` (one model call per
turn), and the plugin's own ``compile_ms`` from the manifest (request read,
compile, rewrite, guard; the manifest write is not in it).

Reported per third of the chat: p50 turn time without and with the plugin,
the p50 of the per-turn difference (the plugin's cost per call, manifest
write included), the plugin's p50 ``compile_ms`` and the p50 of the per-turn
ratio; then the median per-turn ratio over the whole chat with its
interquartile range.

  python benchmarks/plugin_overhead.py
  python benchmarks/plugin_overhead.py --turns 400 --window 131072
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
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
from aether_frame.adk.state_schema import LAST_FAULT_KEY
from aether_frame.offline_model import OfflineLlm
from compile_bench import synth_text  # run as a script: benchmarks/ is on sys.path

from _args import positive  # benchmarks/ is on sys.path when run as a script

APP, USER = "overhead", "u1"
WARMUP_TURNS = 3


def make_chat(turns: int, seed: int) -> tuple[list[str], list[str]]:
  """(user messages, model replies), deterministic."""
  rng = random.Random(seed)
  users = [f"Turn {i + 1}. " + synth_text(rng, 10, 90) for i in range(turns)]
  replies = [synth_text(rng, 30, 200) for _ in range(turns)]
  return users, replies


class Chat:
  """One Runner + session (with or without the plugin) that plays the chat one turn at a time."""

  def __init__(self, replies: list[str], plugin: Optional[ContextPackPlugin]):
    self.plugin = plugin
    self.artifacts = InMemoryArtifactService()
    agent = LlmAgent(name="assistant", model=OfflineLlm(script=list(replies), report_usage=True),
                     instruction="You are a concise operations assistant.")
    self.runner = Runner(
        app=App(name=APP, root_agent=agent, plugins=[plugin] if plugin else []),
        session_service=InMemorySessionService(),
        artifact_service=self.artifacts,
    )
    self.session_id = ""
    self.walls: list[float] = []

  async def start(self) -> "Chat":
    session = await self.runner.session_service.create_session(app_name=APP, user_id=USER)
    self.session_id = session.id
    return self

  async def turn(self, text: str) -> float:
    """Wall ms of one ``run_async`` (one model call)."""
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    t0 = time.perf_counter()
    async for _ in self.runner.run_async(user_id=USER, session_id=self.session_id, new_message=msg):
      pass
    return (time.perf_counter() - t0) * 1000

  async def compile_ms(self) -> list[float]:
    """The plugin's compile_ms of every call, from its manifests (in call order)."""
    kw = dict(app_name=APP, user_id=USER, session_id=self.session_id, filename="context_pack/manifest.json")
    out = []
    for v in sorted(await self.artifacts.list_versions(**kw)):
      art = await self.artifacts.load_artifact(**kw, version=v)
      out.append(json.loads(art.inline_data.data)["runtime"]["compile_ms"])
    return out


async def run(turns: int, seed: int, window: int) -> tuple[list[float], list[float], list[float], int]:
  """Per-turn wall ms without and with the plugin, measured interleaved turn by turn
  (alternating which goes first), the plugin's compile_ms per call and its faults.

  Both sides first play WARMUP_TURNS untimed turns of a separate chat, so neither
  pays the first-call costs (imports, caches) in its timed turns.
  """
  users, replies = make_chat(turns, seed)
  w_users, w_replies = make_chat(WARMUP_TURNS, seed + 1)
  quiet = logging.getLogger("aether_frame")
  level = quiet.level
  quiet.setLevel(logging.CRITICAL)  # a fault is reported below, in one line
  try:
    for plugin in (None, ContextPackPlugin(window=window)):
      chat = await Chat(w_replies, plugin).start()
      for text in w_users:
        await chat.turn(text)
  finally:
    quiet.setLevel(level)
  if plugin.faults:  # it failed open: the timed turns would not be doing the plugin's work
    session = await chat.runner.session_service.get_session(app_name=APP, user_id=USER, session_id=chat.session_id)
    fault = session.state.get(LAST_FAULT_KEY) or {}
    raise SystemExit(f"plugin_overhead: the plugin faults at window {window}: {fault.get('error')}: {fault.get('message')}")
  base = await Chat(replies, None).start()
  ours = await Chat(replies, ContextPackPlugin(window=window)).start()
  gc.collect()
  for i, text in enumerate(users):
    for chat in ((base, ours) if i % 2 == 0 else (ours, base)):
      chat.walls.append(await chat.turn(text))
  compile_ms = await ours.compile_ms()
  if len(compile_ms) != turns:
    raise SystemExit(f"plugin_overhead: expected {turns} manifests, found {len(compile_ms)}")
  return base.walls, ours.walls, compile_ms, ours.plugin.faults



def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--turns", type=positive, default=300, help="user turns (each adds 2 events)")
  ap.add_argument("--window", type=positive, default=131_072)
  ap.add_argument("--seed", type=int, default=5)
  args = ap.parse_args(argv)
  logging.getLogger("google_adk").setLevel(logging.ERROR)
  base, ours, compile_ms, faults = asyncio.run(run(args.turns, args.seed, args.window))
  added = [o - b for o, b in zip(ours, base)]
  ratio = [o / b for o, b in zip(ours, base)]
  print(f"plugin_overhead: {args.turns} turns, window {args.window}, python {sys.version.split()[0]}; "
        "the two chats run interleaved, turn by turn")
  print(f"{'turns':>11} {'events':>11} | {'no plugin p50':>13} {'plugin p50':>11} {'added p50':>9} | "
        f"{'compile_ms p50':>14} | {'ratio p50':>9}")
  step = max(1, math.ceil(args.turns / 3))
  for lo in range(0, args.turns, step):
    hi = min(args.turns, lo + step)
    b, o, a, c, r = (statistics.median(x[lo:hi]) for x in (base, ours, added, compile_ms, ratio))
    print(f"{lo + 1:>5}-{hi:<5} {2 * lo:>5}-{2 * hi:<5} | {b:>11.2f}ms {o:>9.2f}ms {a:>7.2f}ms | {c:>12.3f}ms | "
          f"{r:>8.2f}x")
  b, o, a, c, r = (statistics.median(x) for x in (base, ours, added, compile_ms, ratio))
  print(f"{'all':>11} {'':>11} | {b:>11.2f}ms {o:>9.2f}ms {a:>7.2f}ms | {c:>12.3f}ms | {r:>8.2f}x")
  q1, q3 = (statistics.quantiles(ratio, n=4)[i] for i in (0, 2)) if len(ratio) > 1 else (r, r)
  print(f"\nplugin / no plugin, per-turn ratio: median {r:.2f}x (interquartile {q1:.2f}x-{q3:.2f}x, {len(ratio)} turns)")
  if faults:
    print(f"WARNING: the plugin faulted on {faults} of {args.turns} calls (sent unmodified): those turns did not compile")
  print("added and ratio: per turn, plugin turn vs the no-plugin turn timed next to it; events = history\n"
        "before the first / after the last turn of the row")
  return 0


if __name__ == "__main__":
  sys.exit(main())
