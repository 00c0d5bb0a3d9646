"""Compile overhead per model call, ADK not involved (issue 2 §8).

Synthetic sessions of 100, 1,000 and 10,000 events (user/model turns of
20-200 tokens, some function call/response pairs) plus, per call, a plan,
4 tools, 10 evidence and 10 memory items, compiled for a 128K and a 1M window
with the plugin's own defaults (``default_ranker()`` and the plugin's history
index factory).

- warm: one persistent ``CompilerSession``; each timed call is
  ``extend_history([new_group])`` + ``compile(call)`` with a new user request
  (and the previous call's ``tail_start_id`` as the hint, as the plugin does).
- cold: a fresh ``compile_pack`` of the whole input (fresh ranker and history
  index) after ``counter.clear_cache()``.

Ratios, from the same run: cold compile vs raw tiktoken
``encode_ordinary_batch`` on exactly the texts that cold compile tokenized,
and warm p50 at 10,000 events vs at 100 events.

  python benchmarks/compile_bench.py           # full run (about 3 minutes)
  python benchmarks/compile_bench.py --quick   # fewer iterations, ~1 minute
  python benchmarks/compile_bench.py --no-ranker   # core only, no ranker/recall
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from aether_frame.core.compiler import CallInputs, CompileInput, CompilerSession, compile_pack
from aether_frame.core.items import Item, Layer, Provenance, Trust
from aether_frame.core.policy import PackPolicy
from aether_frame.core.rank import ScanHistoryIndex
from aether_frame.tokenizers import get_counter

EVENT_SIZES = (100, 1_000, 10_000)
WINDOWS = (("128K", 131_072), ("1M", 1_048_576))
SMALL_CASE = (200, "128K", 131_072)
T0 = 1_750_000_000.0

# Targets (issue 2 §8).
SMALL_P50_MS = 1.0
SMALL_P99_MS = 5.0
COLD_VS_TIKTOKEN = 1.3
WARM_10K_VS_100 = 1.2

_WORDS = """
the order customer invoice shipment delivery address payment refund account
report quarter revenue forecast budget team meeting schedule deadline project
release version build test failure error log service database query index
cache latency request response user admin setting config option feature plan
step goal acceptance review draft summary document section table chart value
total average number date week month year today yesterday tomorrow morning
please could would should check update confirm cancel create delete send
receive open close start finish move copy compare explain describe list show
because however although therefore also still already only just maybe likely
new old large small first last next previous current final main other same
price cost tax discount item product warehouse stock supplier contract policy
email phone message ticket issue bug fix patch deploy rollback migration api
endpoint token window context model prompt memory evidence tool result status
Berlin Paris Tokyo Madrid Alice Bob Carol Dave Erin Frank Grace Heidi Ivan
travel flight hotel booking trip conference talk slides notes agenda minutes
""".split()
_PUNCT = (",", ",", ".", ".", ".", "?", ";", ":")
_TOOLS = ("lookup_order", "search_docs", "get_weather", "create_ticket")


def _sentence(rng: random.Random, n_words: int) -> str:
  out = []
  for i in range(n_words):
    r = rng.random()
    if r < 0.05:
      w = str(rng.randint(1, 99_999))
    elif r < 0.07:
      w = f"{rng.choice(_WORDS)}_{rng.randint(10, 999)}"
    else:
      w = rng.choice(_WORDS)
    if i == 0:
      w = w.capitalize()
    out.append(w)
    if i < n_words - 1 and rng.random() < 0.08:
      out[-1] += rng.choice(_PUNCT[:2])
  return " ".join(out) + rng.choice(_PUNCT[2:])


def synth_text(rng: random.Random, lo: int = 20, hi: int = 200) -> str:
  """Pseudo-English of roughly ``lo``..``hi`` o200k tokens (~1.25 tokens a word)."""
  target = int(rng.uniform(lo, hi) / 1.25)
  words, parts = 0, []
  while words < target:
    n = min(target - words, rng.randint(6, 22))
    parts.append(_sentence(rng, max(n, 3)))
    words += max(n, 3)
  return " ".join(parts)


def _stamp(ts: float) -> str:
  return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _group(gid: str, role: str, parts: list[dict[str, Any]], text: str, ts: float, author: str) -> Item:
  return Item(
      id=gid, layer=Layer.CONVERSATION, role=role, text=f"[{_stamp(ts)}] {author}: {text}",
      parts=parts, kind="turn", trust=Trust.USER if role == "user" else Trust.TOOL,
      provenance=Provenance(source=f"ev-{gid}", timestamp=ts, author=author),
  )


class SessionSynth:
  """Deterministic conversation groups; one content = one event."""

  def __init__(self, seed: int):
    self.rng = random.Random(seed)
    self.events = 0
    self.groups = 0
    self.turn = 0

  def next_groups(self) -> list[Item]:
    """One exchange: user text, sometimes a call/response pair, model text."""
    rng, out = self.rng, []
    ts = T0 + 90.0 * self.events
    text = synth_text(rng)
    out.append(self._mk("user", [{"text": text}], text, ts, "user", 1))
    if rng.random() < 0.2:
      name = rng.choice(_TOOLS)
      cid = f"call_{self.events}"
      args = {"query": synth_text(rng, 5, 20), "limit": rng.randint(1, 20)}
      result = {"status": "ok", "result": synth_text(rng, 20, 160)}
      parts = [
          {"function_call": {"id": cid, "name": name, "args": args}},
          {"function_response": {"id": cid, "name": name, "response": result}},
      ]
      text = (
          f"called {name}({json.dumps(args, sort_keys=True, separators=(',', ':'))}) / "
          f"{name} returned {json.dumps(result, sort_keys=True, separators=(',', ':'))}"
      )
      out.append(self._mk("model", parts, text, ts + 20, "assistant", 2))
    text = synth_text(rng)
    out.append(self._mk("model", [{"text": text}], text, ts + 40, "assistant", 1))
    return out

  def _mk(self, role, parts, text, ts, author, n_events) -> Item:
    gid = f"g{self.groups}-e{self.events}"
    self.groups += 1
    self.events += n_events
    return _group(gid, role, parts, text, ts, author)

  def history(self, n_events: int) -> list[Item]:
    out: list[Item] = []
    while self.events < n_events:
      out.extend(self.next_groups())
    return out

  def one_group(self) -> Item:
    """A single new turn group (text only) for the warm loop."""
    role = "user" if self.turn % 2 == 0 else "model"
    self.turn += 1
    ts = T0 + 90.0 * self.events
    text = synth_text(self.rng)
    return self._mk(role, [{"text": text}], text, ts, "user" if role == "user" else "assistant", 1)


class CallSynth:
  """Per-call items: plan, tools, stable evidence, rotating memory, new request."""

  def __init__(self, seed: int):
    rng = self.rng = random.Random(seed)
    dev = Trust.DEVELOPER
    self.static = [
        Item(id="system:instruction", layer=Layer.SYSTEM, text="You are a careful operations assistant. " + synth_text(rng, 80, 120),
             trust=Trust.SYSTEM, pinned=True),
        Item(id="task:role", layer=Layer.TASK, kind="role", text="Operations analyst", trust=dev, pinned=True),
        Item(id="task:goal", layer=Layer.TASK, kind="goal", text=synth_text(rng, 15, 30), trust=dev, pinned=True),
        Item(id="task:step:s2", layer=Layer.TASK, kind="step", text=synth_text(rng, 15, 30), trust=dev, pinned=True),
        *[Item(id=f"task:acceptance:{i}", layer=Layer.TASK, kind="acceptance", text=synth_text(rng, 8, 20), trust=dev, pinned=True)
          for i in range(3)],
        *[Item(id=f"task:constraint:{i}", layer=Layer.TASK, kind="constraint", text=synth_text(rng, 8, 20), trust=dev, pinned=True)
          for i in range(2)],
    ]
    for name in _TOOLS:
      decl = {"name": name, "description": synth_text(rng, 15, 30),
              "parameters": {"type": "OBJECT", "properties": {"query": {"type": "STRING"}, "limit": {"type": "INTEGER"}}}}
      self.static.append(Item(id=f"tool:{name}", layer=Layer.TOOLS, kind="tool", pinned=True, trust=dev,
                              text=json.dumps(decl, sort_keys=True, separators=(",", ":")), meta={"name": name}))
    for i in range(10):
      self.static.append(Item(
          id=f"evidence:doc{i}", layer=Layer.EVIDENCE, kind="checklist_evidence" if i < 2 else "evidence",
          priority=1 if i < 2 else 0, score=round(rng.random(), 3), text=synth_text(rng, 40, 160),
          provenance=Provenance(source=f"artifact://doc{i}.md", timestamp=T0 - 86_400 * i),
      ))
    self.memory_pool = [
        Item(id=f"memory:m{i}", layer=Layer.MEMORY, kind="memory", text=synth_text(rng, 20, 120),
             provenance=Provenance(source=f"memory://m{i}", timestamp=T0 - 3_600 * i, author="user"))
        for i in range(40)
    ]
    self.n = 0

  def next_call(self, window: int, tail_hint: Optional[str], now: float) -> CallInputs:
    k = self.n
    self.n += 1
    memory = [self.memory_pool[(3 * k + j) % len(self.memory_pool)] for j in range(10)]
    request = Item(id="task:user_request", layer=Layer.TASK, kind="user_request", text=synth_text(self.rng, 15, 80),
                   trust=Trust.USER, pinned=True)
    return CallInputs(items=[*self.static, request, *memory], window=window, tail_hint=tail_hint, now=now, has_plan=True)


@dataclass
class Setup:
  policy: PackPolicy
  counter: Any
  make_ranker: Callable[[], Any]
  make_index: Callable[[Any], Any]


def make_setup(no_ranker: bool) -> Setup:
  counter = get_counter("o200k_base")
  if not getattr(counter, "exact", False):
    print("WARNING: tiktoken o200k_base not loaded; timing the estimating counter", file=sys.stderr)
  if no_ranker:
    return Setup(PackPolicy(), counter, lambda: None, lambda r: None)
  from aether_frame.retrieval import default_ranker

  def make_index(ranker):
    # Same rule as ContextPackPlugin._default_index_factory.
    make = getattr(ranker, "new_history_index", None)
    return make() if callable(make) else ScanHistoryIndex(ranker)

  return Setup(PackPolicy(), counter, default_ranker, make_index)


def pct(samples: list[int], q: float) -> float:
  """Nearest-rank percentile of nanosecond samples, in ms."""
  s = sorted(samples)
  i = min(len(s) - 1, max(0, int(round(q / 100.0 * len(s) + 0.5)) - 1))
  return s[i] / 1e6


def bench_warm(setup: Setup, n_events: int, window: int, warmup: int, iters: int, seed: int) -> dict[str, Any]:
  synth = SessionSynth(seed)
  history = synth.history(n_events)
  calls = CallSynth(seed + 1)
  ranker = setup.make_ranker()
  session = CompilerSession(setup.policy, setup.counter, ranker=ranker, history_index=setup.make_index(ranker))
  session.extend_history(history)
  hint: Optional[str] = None
  samples: list[int] = []
  pack = None
  gc.collect()
  for i in range(warmup + iters):
    group = synth.one_group()
    call = calls.next_call(window, hint, group.provenance.timestamp + 30)
    t0 = time.perf_counter_ns()
    session.extend_history([group])
    pack = session.compile(call)
    t1 = time.perf_counter_ns()
    hint = pack.tail_start_id
    if i >= warmup:
      samples.append(t1 - t0)
  return {
      "events": n_events, "window": window, "groups": len(session.history), "n": len(samples),
      "p50": pct(samples, 50), "p99": pct(samples, 99),
      "kept": len(pack.conversation_ids), "tokens": pack.tokens,
  }


def _recording(counter):
  """Wraps the counter's encoder to record what a compile tokenizes (benchmark only)."""
  texts: list[str] = []
  inner = getattr(counter, "_encode", None)
  if inner is None:
    return texts, lambda: None

  def encode(text):
    texts.append(text)
    return inner(text)

  counter._encode = encode

  def restore():
    counter._encode = inner

  return texts, restore


def bench_cold(setup: Setup, n_events: int, window: int, iters: int, seed: int) -> dict[str, Any]:
  synth = SessionSynth(seed)
  history = synth.history(n_events)
  call = CallSynth(seed + 1).next_call(window, None, T0 + 90.0 * synth.events)
  inp = CompileInput(policy=setup.policy, history=history, call=call)
  counter = setup.counter

  def once() -> int:
    clear = getattr(counter, "clear_cache", None)
    if clear is not None:
      clear()
    ranker = setup.make_ranker()
    index = setup.make_index(ranker)
    t0 = time.perf_counter_ns()
    compile_pack(inp, counter, ranker=ranker, history_index=index)
    return time.perf_counter_ns() - t0

  texts, restore = _recording(counter)
  try:
    once()  # untimed: records the texts a cold compile tokenizes
  finally:
    restore()
  gc.collect()
  samples = [once() for _ in range(iters)]
  out = {
      "events": n_events, "window": window, "groups": len(history), "n": len(samples),
      "p50": pct(samples, 50), "p99": pct(samples, 99), "texts": len(texts),
      "chars": sum(len(t) for t in texts),
  }
  enc = getattr(counter, "_encoding", None)
  if enc is not None and texts:
    batch, loop = [], []
    for _ in range(max(3, iters)):
      t0 = time.perf_counter_ns()
      toks = enc.encode_ordinary_batch(texts)
      batch.append(time.perf_counter_ns() - t0)
      t0 = time.perf_counter_ns()
      for t in texts:
        enc.encode_ordinary(t)
      loop.append(time.perf_counter_ns() - t0)
    out["tokens_encoded"] = sum(len(t) for t in toks)
    out["tiktoken_batch_ms"] = statistics.median(batch) / 1e6
    out["tiktoken_loop_ms"] = statistics.median(loop) / 1e6
  return out


def verdict(ok: bool) -> str:
  return "PASS" if ok else "FAIL"


def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="fewer iterations (about 1 minute)")
  ap.add_argument("--no-ranker", action="store_true", help="compile without ranker and history index")
  ap.add_argument("--seed", type=int, default=7)
  args = ap.parse_args(argv)
  setup = make_setup(args.no_ranker)
  warm_iters = 150 if args.quick else 500
  small_iters = 500 if args.quick else 2_000
  cold_iters = {100: 20, 1_000: 10, 10_000: 3} if args.quick else {100: 100, 1_000: 30, 10_000: 8}
  started = time.perf_counter()
  print(f"compile_bench: counter={setup.counter!r} ranker={'none' if args.no_ranker else 'default_ranker()'} "
        f"index={type(setup.make_index(setup.make_ranker())).__name__ if not args.no_ranker else 'none'} "
        f"python={sys.version.split()[0]} quick={args.quick}")

  warm: dict[tuple[int, str], dict] = {}
  cold: dict[tuple[int, str], dict] = {}
  for n_events in EVENT_SIZES:
    for wname, window in WINDOWS:
      warm[(n_events, wname)] = bench_warm(setup, n_events, window, 20, warm_iters, args.seed)
      cold[(n_events, wname)] = bench_cold(setup, n_events, window, cold_iters[n_events], args.seed)
  n_small, wname_small, w_small = SMALL_CASE
  small = bench_warm(setup, n_small, w_small, 50, small_iters, args.seed)

  print()
  hdr = (f"{'events':>7} {'window':>6} {'groups':>6} {'kept':>5} | {'warm p50':>9} {'warm p99':>9} {'n':>5} | "
         f"{'cold p50':>9} {'cold p99':>9} {'n':>4} | {'tt batch':>9} {'tt loop':>9} {'cold/batch':>10}")
  print(hdr)
  print("-" * len(hdr))
  for n_events in EVENT_SIZES:
    for wname, _ in WINDOWS:
      w, c = warm[(n_events, wname)], cold[(n_events, wname)]
      ratio = c["p50"] / c["tiktoken_batch_ms"] if c.get("tiktoken_batch_ms") else float("nan")
      c["ratio"] = ratio
      print(f"{n_events:>7} {wname:>6} {c['groups']:>6} {w['kept']:>5} | {w['p50']:>7.3f}ms {w['p99']:>7.3f}ms {w['n']:>5} | "
            f"{c['p50']:>7.1f}ms {c['p99']:>7.1f}ms {c['n']:>4} | {c.get('tiktoken_batch_ms', float('nan')):>7.1f}ms "
            f"{c.get('tiktoken_loop_ms', float('nan')):>7.1f}ms {ratio:>9.2f}x")
  print(f"{n_small:>7} {wname_small:>6} {'':>6} {small['kept']:>5} | {small['p50']:>7.3f}ms {small['p99']:>7.3f}ms "
        f"{small['n']:>5} | (warm-only case)")
  print("(ms per call; kept = conversation groups in the pack; tt = raw tiktoken on the texts a cold compile "
        "tokenizes: encode_ordinary_batch / encode_ordinary loop)")

  print()
  results = []
  results.append((f"warm p50, {n_small} events / {wname_small}", f"{small['p50']:.3f} ms", f"<= {SMALL_P50_MS} ms",
                  small["p50"] <= SMALL_P50_MS))
  results.append((f"warm p99, {n_small} events / {wname_small}", f"{small['p99']:.3f} ms", f"<= {SMALL_P99_MS} ms",
                  small["p99"] <= SMALL_P99_MS))
  for wname, _ in WINDOWS:
    c = cold[(EVENT_SIZES[-1], wname)]
    results.append((f"cold p50 / tiktoken batch, {EVENT_SIZES[-1]} events / {wname}", f"{c['ratio']:.2f}x",
                    f"<= {COLD_VS_TIKTOKEN}x", c["ratio"] <= COLD_VS_TIKTOKEN))
  for wname, _ in WINDOWS:
    r = warm[(EVENT_SIZES[-1], wname)]["p50"] / warm[(EVENT_SIZES[0], wname)]["p50"]
    results.append((f"warm p50 {EVENT_SIZES[-1]} / {EVENT_SIZES[0]} events, {wname}", f"{r:.2f}x",
                    f"<= {WARM_10K_VS_100}x", r <= WARM_10K_VS_100))
  width = max(len(r[0]) for r in results)
  for name, value, target, ok in results:
    print(f"{verdict(ok)}  {name:<{width}}  {value:>10}  (target {target})")
  print(f"\ntotal runtime {time.perf_counter() - started:.0f}s")
  return 0 if all(r[3] for r in results) else 1


if __name__ == "__main__":
  sys.exit(main())
