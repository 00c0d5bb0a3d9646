"""What a long-lived process keeps in memory: warm sessions and the ranker's caches.

1. A warm ``CompilerSession`` (the plugin's defaults: hybrid ranker and recall
   index) at 1,000 and 10,000 events: bytes held per history token, before and
   after recall has indexed the trimmed turns. The plugin keeps up to 256 such
   caches, and sizes its byte cap (``session_cache_bytes``) with this figure.
2. A plugin serving 40 sessions one call each through a real Runner, each
   session bringing its own large knowledge documents (``--docs`` in all, of
   ``--doc-kb`` KB): the bytes its caches free when dropped (warm sessions, their
   input memos, the shared analysis cache) and what it counts for the sessions
   it kept, with no effective cap and with ``session_cache_bytes`` = 64 MiB, in
   the same run.

Bytes are Python allocations traced by ``tracemalloc`` (the encodings' own Rust
memory is not included and does not grow).

  python benchmarks/memory_footprint.py              # ~1 minute
  python benchmarks/memory_footprint.py --docs 100   # quicker
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from typing import Any, Callable

from _args import at_least, positive

import compile_bench as cb
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.retrieval import ranker as ranker_mod
from aether_frame.retrieval.features import LRU

MIB = 2**20
SESSIONS = 40
"""Sessions of part 2, one call each."""


def traced(fn: Callable[[], Any]) -> tuple[Any, int]:
  """``fn()`` and the bytes its result keeps alive (traced allocations after a collection)."""
  gc.collect()
  tracemalloc.start()
  try:
    before = tracemalloc.get_traced_memory()[0]
    out = fn()
    gc.collect()
    return out, tracemalloc.get_traced_memory()[0] - before
  finally:
    tracemalloc.stop()


def session_footprint(n_events: int) -> dict[str, float]:
  setup = cb.make_setup("plugin")

  def build():
    case = cb.WarmCase(setup, n_events, 131_072, budget_s=1e9, seed=7)
    return case

  case, held_history = traced(build)
  tokens = case.session.history_tokens

  def warm():
    case.run(3, 1e9)  # recall indexes the trimmed turns on the first call that needs it
    return None

  _, held_recall = traced(warm)
  return {"events": n_events, "tokens": tokens, "history_mib": held_history / MIB,
          "per_token": held_history / tokens, "with_recall_per_token": (held_history + held_recall) / tokens}


async def plugin_held(docs: list[str], cap: int, sessions: int) -> tuple[int, int, int]:
  """One call each for ``sessions`` sessions through a real Runner (offline model), each with
  its share of ``docs`` as knowledge; returns the bytes the plugin's caches free when dropped,
  the plugin's own count of what its warm caches hold, and how many it kept."""
  from google.adk.agents import LlmAgent
  from google.adk.apps import App
  from google.adk.artifacts import InMemoryArtifactService
  from google.adk.runners import Runner
  from google.adk.sessions import InMemorySessionService
  from google.genai import types

  from aether_frame.adk.plugin import ContextPackPlugin
  from aether_frame.offline_model import OfflineLlm

  plugin = ContextPackPlugin(window=131_072, session_cache_bytes=cap)
  app = App(name="mem", root_agent=LlmAgent(name="assistant", model=OfflineLlm(), instruction="Be brief."), plugins=[plugin])
  runner = Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
  for k in range(sessions):  # every document once: session k takes documents k, k + sessions, ...
    knowledge = [{"uri": f"artifact://s{k}/doc{i}.md", "summary": doc} for i, doc in enumerate(docs[k::sessions])]
    session = await runner.session_service.create_session(app_name="mem", user_id="u", state={"knowledge": knowledge})
    msg = types.Content(role="user", parts=[types.Part(text=f"What do the documents say about item {k}?")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
      pass
  counted, kept = plugin._cached_bytes, len(plugin._sessions)
  gc.collect()
  before = tracemalloc.get_traced_memory()[0]
  plugin._sessions.clear()
  plugin.manifests._encoder._streams.clear()
  plugin.ranker._features = LRU(1)
  gc.collect()
  return before - tracemalloc.get_traced_memory()[0], counted, kept


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--docs", type=at_least(SESSIONS), default=400,
                  help=f"large documents in all, spread over the {SESSIONS} sessions (default 400, at least {SESSIONS})")
  ap.add_argument("--doc-kb", type=positive, default=100, help="size of each document in KB (default 100)")
  args = ap.parse_args(argv)
  started = time.perf_counter()

  print("1. warm session (plugin defaults), bytes held per history token")
  print(f"{'events':>7} {'tokens':>9} {'history MiB':>12} {'B/token':>8} {'B/token with recall index':>26}")
  per_token = 0.0
  for n in (1_000, 10_000):
    s = session_footprint(n)
    per_token = max(per_token, s["with_recall_per_token"])
    print(f"{s['events']:>7} {s['tokens']:>9} {s['history_mib']:>12.1f} {s['per_token']:>8.1f} "
          f"{s['with_recall_per_token']:>26.1f}")
  from aether_frame.adk.plugin import DEFAULT_SESSION_CACHE_BYTES
  from aether_frame.core.compiler import HISTORY_BYTES_PER_TOKEN

  print(f"   the plugin counts {HISTORY_BYTES_PER_TOKEN} B per history token; its default cap "
        f"({DEFAULT_SESSION_CACHE_BYTES / 2**30:.0f} GiB) holds ~{DEFAULT_SESSION_CACHE_BYTES / HISTORY_BYTES_PER_TOKEN / 1e6:.0f}M "
        f"history tokens of warm sessions (256 {s['events']:,}-event sessions would be "
        f"~{256 * per_token * s['tokens'] / 2**30:.0f} GiB)")

  rng = random.Random(11)
  words = [f"{rng.choice(cb._CONTENT)}{i % 997}" for i in range(20_000)]
  docs = []
  for _ in range(args.docs):
    target, out, n = args.doc_kb * 1000, [], 0
    while n < target:
      w = rng.choice(words)
      out.append(w)
      n += len(w) + 1
    docs.append(" ".join(out))
  each = f"{args.docs // SESSIONS}" + (f"-{args.docs // SESSIONS + 1}" if args.docs % SESSIONS else "")
  print(f"\n2. a plugin after one call each for {SESSIONS} sessions, each with {each} new {args.doc_kb} KB "
        f"knowledge documents ({args.docs} in all; real Runner, offline model)")
  import asyncio

  for cap in (2**40, 64 * MIB):
    tracemalloc.start()
    try:
      freed, counted, kept = asyncio.run(plugin_held(docs, cap, SESSIONS))
    finally:
      tracemalloc.stop()
    label = "no effective cap" if cap == 2**40 else f"session_cache_bytes={cap // MIB} MiB"
    print(f"   {label:>28}: its caches hold {freed / MIB:7.1f} MiB; it counts {counted / MIB:7.1f} MiB "
          f"for the {kept} sessions it kept warm")
  print(f"\ntotal runtime {time.perf_counter() - started:.0f}s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
