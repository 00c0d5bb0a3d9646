"""Per-item token counting cost for 2,000 small items.

Compares one ``encode_ordinary`` call per item, one ``encode_ordinary_batch``
call (num_threads=1 and 8), and ``TiktokenCounter.count_many`` cold (empty
cache) and warm (all hits). Justifies the choices in aether_frame/tokenizers.py.

  TIKTOKEN_CACHE_DIR=/work/shared/tiktoken-cache python benchmarks/token_batch.py
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from aether_frame.tokenizers import TiktokenCounter


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


def best_of(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--items", type=int, default=2000)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--encoding", default="o200k_base")
  args = ap.parse_args()

  items = make_items(args.items)
  n = len(items)
  counter = TiktokenCounter(args.encoding)
  enc = counter._encoding  # same Encoding object the counter uses
  expected = [len(enc.encode_ordinary(t)) for t in items]

  def cold() -> None:
    counter.clear_cache()
    counter.count_many(items)

  results = {
      "encode_ordinary loop": best_of(lambda: [len(enc.encode_ordinary(t)) for t in items], args.repeats),
      "encode_ordinary_batch(num_threads=1)": best_of(
          lambda: [len(x) for x in enc.encode_ordinary_batch(items, num_threads=1)], args.repeats),
      "encode_ordinary_batch(num_threads=8)": best_of(
          lambda: [len(x) for x in enc.encode_ordinary_batch(items, num_threads=8)], args.repeats),
      "TiktokenCounter.count_many cold": best_of(cold, args.repeats),
  }
  counter.clear_cache()
  assert counter.count_many(items) == expected
  results["TiktokenCounter.count_many warm"] = best_of(lambda: counter.count_many(items), args.repeats)
  results["TiktokenCounter.count warm (per call)"] = best_of(lambda: [counter.count(t) for t in items], args.repeats)

  # small batches, as count_parts issues them (a few texts per Content)
  small = [items[i:i + 4] for i in range(0, n, 4)]
  results["encode_ordinary_batch, batches of 4"] = best_of(
      lambda: [enc.encode_ordinary_batch(b, num_threads=1) for b in small], args.repeats)
  results["encode_ordinary loop, batches of 4"] = best_of(
      lambda: [[enc.encode_ordinary(t) for t in b] for b in small], args.repeats)

  base = results["encode_ordinary loop"]
  print(f"{n} items, mean {statistics.mean(len(t) for t in items):.0f} chars / "
        f"{statistics.mean(expected):.1f} tokens, encoding {args.encoding}, best of {args.repeats}")
  print(f"{'method':42s} {'us/item':>9s} {'vs loop':>9s}")
  for name, secs in results.items():
    print(f"{name:42s} {secs / n * 1e6:9.2f} {secs / base:8.2f}x")


if __name__ == "__main__":
  main()
