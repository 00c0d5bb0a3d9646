"""What a long-lived process keeps in memory: warm sessions and the ranker's caches.

1. A warm ``CompilerSession`` (the plugin's defaults: hybrid ranker and recall
   index) at 1,000 and 10,000 events: bytes held per history token, before and
   after recall has indexed the trimmed turns. The plugin keeps up to 256 such
   caches, and sizes its byte cap (``session_cache_bytes``) with this figure.
2. The rankers when every call brings a new large document (``--docs`` calls
   over 40 sessions' rankers, one new ``--doc-kb`` KB evidence item each): bytes
   still held afterwards, what the sessions' rankers count toward the plugin's
   ``session_cache_bytes`` (``held_bytes``), and the rest, which the shared
   analysis cache's cap bounds; and, in the same run, the shared cache capped
   by entry count only, as it was.

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

from _args import positive

import compile_bench as cb
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.retrieval import ranker as ranker_mod
from aether_frame.retrieval.features import LRU

MIB = 2**20


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


def _count_capped(r: ranker_mod.HybridRanker) -> ranker_mod.HybridRanker:
  """The caches as they were: entry caps only (the baseline)."""
  r._features = LRU(ranker_mod.FEATURE_CACHE)
  r._queries = LRU(ranker_mod.QUERY_CACHE)
  return r


def ranker_retained(docs: list[str], *, baseline: bool, sessions: int = 40) -> tuple[int, int, int]:
  """Bytes held after ranking ``docs`` through ``sessions`` session rankers (children), the
  analyses the shared cache keeps, and what the children count in ``held_bytes``."""
  def run():
    parent = ranker_mod.HybridRanker()
    if baseline:
      _count_capped(parent)
    children = [parent.child() for _ in range(sessions)]
    for i, text in enumerate(docs):
      item = Item(id=f"evidence:doc{i}", layer=Layer.EVIDENCE, kind="evidence", text=text,
                  provenance=Provenance(source=f"artifact://doc{i}.md", timestamp=cb.T0))
      children[i % sessions].rank(f"what does document {i} say about the quarterly invoice totals", [item],
                                  layer=Layer.EVIDENCE, now=cb.T0 + i)
    return parent, children

  (parent, children), held = traced(run)
  return held, len(parent._features), sum(c.held_bytes for c in children)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--docs", type=positive, default=400, help="calls with a new large document (default 400)")
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
  print(f"\n2. rankers after {args.docs} calls over 40 sessions, each call with a new {args.doc_kb} KB document")
  ours, ours_n, ours_own = ranker_retained(docs, baseline=False)
  base, base_n, _ = ranker_retained(docs, baseline=True)
  print(f"   shared cache capped by entry count only (before): {base / MIB:8.1f} MiB held, {base_n} analyses shared")
  print(f"   shipped caps: {ours / MIB:8.1f} MiB held, {ours_n} analyses shared (cap "
        f"{ranker_mod.FEATURE_CACHE_BYTES / MIB:.0f} MiB); the sessions' rankers count {ours_own / MIB:.1f} MiB "
        f"toward session_cache_bytes")
  print(f"   held, not counted by any session: {(ours - ours_own) / MIB:.1f} MiB (at most the shared cap)")
  print(f"\ntotal runtime {time.perf_counter() - started:.0f}s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
