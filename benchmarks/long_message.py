"""Compile cost of one long user message (a pasted log or document), against tokenizing it.

A warm session (the plugin's defaults: hybrid ranker + recall, 2,000 events,
a window large enough to hold every message) compiles one call whose user
request is N characters of pseudo-English with dates and cue words all
through it. The baseline is raw tiktoken ``encode_ordinary`` of the same
message, which every compile must pay at least once. The two alternate, call
by call, in rounds; each ratio is the median of the per-round ratios.

Before query cues were read from the message's head and tail only
(``retrieval.features.cue_view``), a 100 KB message cost ~8x its
tokenization in mode and time-range detection alone.

  python benchmarks/long_message.py                  # 1K..400K characters, ~1 min
  python benchmarks/long_message.py --sizes 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import tiktoken

from _args import positive  # benchmarks/ is on sys.path when run as a script
import compile_bench as cb

WINDOW = 1_048_576
DATED = ("On 2021-03-{d:02d} who decided when to deploy the release checklist? ",
         "Last week the team met yesterday about the May budget. ")


def message(rng: random.Random, chars: int) -> str:
  """Pseudo-English of about ``chars`` characters, a dated, cue-laden sentence every ~400."""
  parts, n = [], 0
  while n < chars:
    text = cb.synth_text(rng, 60, 100) + " " + DATED[len(parts) % 2].format(d=1 + len(parts) % 28)
    parts.append(text)
    n += len(text) + 1
  return " ".join(parts)[:chars]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", type=positive, nargs="+", default=[1_000, 10_000, 100_000, 400_000],
                  help="message lengths in characters")
  ap.add_argument("--rounds", type=positive, default=7)
  ap.add_argument("--events", type=positive, default=2_000)
  args = ap.parse_args(argv)

  setup = cb.make_setup("plugin")
  case = cb.WarmCase(setup, args.events, WINDOW, budget_s=10_000, seed=7)
  case.run(20, 60)  # warm-up
  rng = random.Random(11)
  encode = tiktoken.get_encoding("o200k_base").encode_ordinary
  print(f"long_message: warm session of {args.events} events, window {WINDOW:,}, plugin defaults; "
        f"{args.rounds} rounds per size, python {sys.version.split()[0]}")
  print(f"{'chars':>9} {'tokens':>8} | {'compile p50':>12} {'tiktoken p50':>13} | {'ratio p50':>9}  rounds")
  for size in args.sizes:
    text = message(rng, size)
    compile_ms, encode_ms, ratios = [], [], []
    tokens = len(encode(text))
    for r in range(args.rounds):
      # A new message each round (one character differs): no query cache hit.
      variant = f"{r} {text}"
      call = case.calls.next_call(WINDOW, case.hint, cb.T0 + 1e6)
      items = [i if i.kind != "user_request" else i.model_copy(update={"text": variant}) for i in call.items]
      call = call.model_copy(update={"items": items})
      t0 = time.perf_counter()
      encode(variant)
      t1 = time.perf_counter()
      case.session.compile(call)
      t2 = time.perf_counter()
      encode_ms.append((t1 - t0) * 1e3)
      compile_ms.append((t2 - t1) * 1e3)
      ratios.append((t2 - t1) / max(t1 - t0, 1e-9))
    print(f"{size:>9,} {tokens:>8,} | {statistics.median(compile_ms):>10.1f}ms {statistics.median(encode_ms):>11.1f}ms | "
          f"{statistics.median(ratios):>8.2f}x  {min(ratios):.2f}-{max(ratios):.2f}x")
  print("compile = the whole warm compile (costing, ranking, recall, assembly); tiktoken = encode_ordinary of the message")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
