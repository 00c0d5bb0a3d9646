"""Per-item token counting cost for 2,000 small items.

Compares one ``encode_ordinary`` call per item, one ``encode_ordinary_batch``
call (num_threads=1 and 8), and ``TiktokenCounter.count_many`` cold (empty
cache) and warm (all hits). Justifies the choices in aether_frame/tokenizers.py.
Every method gets one untimed warm-up call, then ``--repeats`` rounds run each
method once, in a rotated order. Reported: the best time per item, and the
median over rounds of each method's time over the ``encode_ordinary`` loop's
time in the same round (with the range), so the ratios hold up on a shared,
noisy machine.

  TIKTOKEN_CACHE_DIR=/work/shared/tiktoken-cache python benchmarks/token_batch.py
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Optional

from aether_frame.tokenizers import ALLOWED_ENCODINGS, TiktokenCounter

from _args import positive  # benchmarks/ is on sys.path when run as a script


def make_items(n: int, seed: int = 7) -> list[str]:
  """Small, distinct chat-like items: prose, tool-call JSON, code, CJK."""
  rnd = random.Random(seed)
  words = ("the agent calls a tool to fetch the weather for the city and then answers the user "
           "context window budget token session memory").split()
  items = []
  for i in range(n):
    kind = i % 4
    if kind == 0:
      items.append(" ".join(rnd.choice(words) for _ in range(rnd.randint(5, 40))) + f" #{i}")
    elif kind == 1:
      items.append(json.dumps({"name": "get_weather", "args": {"city": f"city-{i}", "days": rnd.randint(1, 9)}},
                              sort_keys=True, separators=(",", ":")))
    elif kind == 2:
      items.append(f"def f_{i}(x):\n  return [x * {rnd.randint(1, 99)} for _ in range(3)]\n")
    else:
      items.append("人工智能是计算机科学的一个分支" * rnd.randint(1, 3) + str(i))
  return items


def interleaved(methods: dict[str, tuple], repeats: int) -> dict[str, list[float]]:
  """Seconds per method and round over ``repeats`` rounds; every round runs each
  method once, in a rotated order, so load from other processes hits all alike.
  A method is ``(setup, fn)``: ``setup`` (untimed, may be None) runs right before ``fn``."""
  names = list(methods)
  times: dict[str, list[float]] = {name: [] for name in names}
  for r in range(repeats):
    k = r % len(names)
    for name in names[k:] + names[:k]:
      setup, fn = methods[name]
      if setup is not None:
        setup()
      t0 = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t0)
  return times



def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--items", type=positive, default=2000)
  ap.add_argument("--repeats", type=positive, default=9, help="rounds (default 9)")
  ap.add_argument("--encoding", default="o200k_base", choices=sorted(ALLOWED_ENCODINGS))
  args = ap.parse_args(argv)

  items = make_items(args.items)
  n = len(items)
  try:
    counter = TiktokenCounter(args.encoding)
  except Exception as e:  # BPE file neither cached nor downloadable
    raise SystemExit(f"token_batch: cannot load {args.encoding}: {e}")
  enc = counter._encoding  # same Encoding object the counter uses
  expected = [len(enc.encode_ordinary(t)) for t in items]
  counter.clear_cache()
  assert counter.count_many(items) == expected

  def fill() -> None:
    counter.clear_cache()
    counter.count_many(items)

  # small batches, as count_parts issues them (a few texts per Content)
  small = [items[i:i + 4] for i in range(0, n, 4)]
  methods = {
      "encode_ordinary loop": (None, lambda: [len(enc.encode_ordinary(t)) for t in items]),
      "encode_ordinary_batch(num_threads=1)": (
          None, lambda: [len(x) for x in enc.encode_ordinary_batch(items, num_threads=1)]),
      "encode_ordinary_batch(num_threads=8)": (
          None, lambda: [len(x) for x in enc.encode_ordinary_batch(items, num_threads=8)]),
      # cold: the cache is emptied before (untimed), so every item is a miss
      "TiktokenCounter.count_many cold": (counter.clear_cache, lambda: counter.count_many(items)),
      # warm: the cache is filled before (untimed), so every item is a hit
      "TiktokenCounter.count_many warm": (fill, lambda: counter.count_many(items)),
      "TiktokenCounter.count warm (per call)": (fill, lambda: [counter.count(t) for t in items]),
      "encode_ordinary_batch, batches of 4": (
          None, lambda: [enc.encode_ordinary_batch(b, num_threads=1) for b in small]),
      "encode_ordinary loop, batches of 4": (None, lambda: [[enc.encode_ordinary(t) for t in b] for b in small]),
  }
  for _, fn in methods.values():  # one untimed warm-up call each
    fn()
  times = interleaved(methods, args.repeats)

  base = times["encode_ordinary loop"]
  print(f"{n} items, mean {statistics.mean(len(t) for t in items):.0f} chars / "
        f"{statistics.mean(expected):.1f} tokens, encoding {args.encoding}, {args.repeats} rounds "
        "(every method once per round, rotated order)")
  print(f"{'method':42s} {'us/item':>9s} {'vs loop':>9s} {'(rounds)':>15s}")
  for name, secs in times.items():
    ratios = [t / b for t, b in zip(secs, base)]
    print(f"{name:42s} {min(secs) / n * 1e6:9.2f} {statistics.median(ratios):8.2f}x "
          f"{min(ratios):6.2f}-{max(ratios):.2f}x")
  print("us/item: best round; vs loop: median over rounds of (method / encode_ordinary loop of the same\n"
        "round), with its range")
  return 0


if __name__ == "__main__":
  sys.exit(main())
