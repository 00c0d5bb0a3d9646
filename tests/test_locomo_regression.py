"""LoCoMo recall must not regress: conversation 42 (test split) at B=2000, default install.

Runs the benchmark's own code path (``benchmarks/locomo_recall.py``: rank_layer +
select_within_budget over MEMORY "recall" items, o200k_base counts) for the
default ranker only. The reported value is the one in ``docs/retrieval.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aether_frame.retrieval import HybridRanker
from tests.cli_support import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
CONVERSATION = "42"
BUDGET = 2000
REPORTED = 0.881
MARGIN = 0.02




def test_default_ranker_recall_at_2000_on_conversation_42():
  bench = load_benchmark("locomo_recall")
  path = bench.DEFAULT_DATA / f"{CONVERSATION}.json"
  if not path.exists():
    pytest.skip(f"LoCoMo data not found at {path} (expected shared/ beside the repo)")
  from aether_frame.tokenizers import get_counter

  if not getattr(get_counter("o200k_base"), "exact", False):
    pytest.skip("o200k_base is not available (set TIKTOKEN_CACHE_DIR); estimated counts would change the budget")
  started = time.perf_counter()
  convs = bench.load_all([CONVERSATION], bench.DEFAULT_DATA)
  result = bench.evaluate("ours (default)", HybridRanker, convs, budgets=(BUDGET,))
  assert result.questions == 199
  assert result.recall[BUDGET] >= REPORTED - MARGIN, (
      f"recall@{BUDGET} on LoCoMo {CONVERSATION} fell to {result.recall[BUDGET]:.3f} "
      f"(reported {REPORTED:.3f}, margin {MARGIN})"
  )
  print(f"recall@{BUDGET} = {result.recall[BUDGET]:.3f} in {time.perf_counter() - started:.1f}s")
