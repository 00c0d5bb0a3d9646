"""A worker's first turns on a long session it has never seen, with and without the plugin.

A restarted or newly scaled-out worker meets sessions whose history it has
not indexed: its first packed call fingerprints and costs every content,
builds the recall index and stores the session's input blobs for replay
(content-addressed: later calls store only what is new). This measures that
first turn and the two after it, through a real ADK ``Runner`` with the
offline model and ADK's in-memory session and artifact services, against the
same session with no plugin (which sends the whole history every turn).

  python benchmarks/cold_worker.py                   # 1,000 and 10,000 events, 3 rounds, ~3 min
  python benchmarks/cold_worker.py --events 2000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time

from _args import positive  # benchmarks/ is on sys.path when run as a script
import compile_bench as cb
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm

ASKS = ("what did we decide about the budget?", "and the schedule?", "ok, thanks")


async def turns(n_events: int, plugin: bool) -> list[float]:
  """Seconds for each of ``ASKS`` on a session of ``n_events`` prior events."""
  agent = LlmAgent(name="assistant", model=OfflineLlm(default="noted"), instruction="Be brief.")
  plugins = [ContextPackPlugin(window=131_072)] if plugin else []
  runner = Runner(app=App(name="bench", root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
  session = await runner.session_service.create_session(app_name="bench", user_id="u")
  rng = random.Random(1)
  ts = time.time() - 45.0 * n_events
  for i in range(n_events):
    role, author = ("user", "user") if i % 2 == 0 else ("model", agent.name)
    content = types.Content(role=role, parts=[types.Part(text=cb.synth_text(rng))])
    await runner.session_service.append_event(session, Event(author=author, invocation_id=f"i{i // 2}", content=content, timestamp=ts))
    ts += 45.0
  out = []
  for ask in ASKS:
    t0 = time.perf_counter()
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(role="user", parts=[types.Part(text=ask)])):
      pass
    out.append(time.perf_counter() - t0)
  if plugin and plugins[0].faults:
    raise SystemExit(f"the plugin recorded {plugins[0].faults} fault(s): the timing would be of an unpacked run")
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--events", type=positive, nargs="+", default=[1_000, 10_000])
  ap.add_argument("--rounds", type=positive, default=3, help="pairs of runs per size, alternating which side goes first")
  args = ap.parse_args(argv)
  print(f"cold_worker: a fresh worker's first three turns on a session of N events; offline model, in-memory "
        f"services, window 131,072; python {sys.version.split()[0]}")
  print(f"{'events':>7} | {'no plugin (s)':>22} | {'plugin (s)':>22} | first turn added  later turns ratio")
  for plugin in (False, True):  # imports, tokenizer and caches warm, so neither side pays them
    asyncio.run(turns(10, plugin=plugin))
  fmt = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
  for n in args.events:
    pairs = []  # (no plugin, plugin) per round, run back to back, the first side alternating
    for r in range(args.rounds):
      got = {side: asyncio.run(turns(n, plugin=side)) for side in ((False, True) if r % 2 == 0 else (True, False))}
      pairs.append((got[False], got[True]))
    base = [statistics.median(b[t] for b, _ in pairs) for t in range(3)]
    ours = [statistics.median(o[t] for _, o in pairs) for t in range(3)]
    added = [o[0] - b[0] for b, o in pairs]
    later = [(o[1] + o[2]) / (b[1] + b[2]) for b, o in pairs]
    print(f"{n:>7,} | {fmt(base):>22} | {fmt(ours):>22} | {statistics.median(added):>14.2f}s  "
          f"{statistics.median(later):>17.2f}x  (rounds {min(later):.2f}x-{max(later):.2f}x)")
  print(f"turns: first / second / third, medians of {args.rounds} rounds; 'added' = plugin first turn - no-plugin first")
  print("turn of the same round (the cold cost); later turns ratio = plugin / no plugin over turns 2-3 of the same")
  print("round (the offline model's work grows with what it is sent): medians of the per-round values")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
