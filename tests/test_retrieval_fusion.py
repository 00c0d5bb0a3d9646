"""Fusion and MMR with hand-computed expectations."""

from __future__ import annotations

import random

import pytest

from aether_frame.retrieval.dedup import NearDuplicateIndex, jaccard
from aether_frame.retrieval.fusion import max_normalise, min_max_normalise, ranks, rrf, weighted
from aether_frame.retrieval.mmr import dense_neighbours, mmr, redundancy


def test_max_normalise_keeps_ratios():
  assert max_normalise([2.0, 1.0, 0.0]) == [1.0, 0.5, 0.0]
  assert max_normalise([0.0, 0.0]) == [0.0, 0.0]
  assert max_normalise([]) == []


def test_min_max_normalise():
  assert min_max_normalise([0.2, 0.6, 0.4]) == pytest.approx([0.0, 1.0, 0.5])
  assert min_max_normalise([0.3, 0.3]) == [0.0, 0.0]


def test_ranks_break_ties_by_index_and_skip_zeros():
  assert ranks([0.5, 0.0, 0.9, 0.5]) == [2, None, 1, 3]


def test_rrf_hand_computed():
  # item0: ranks (1, 2); item1: (2, 1); item2: (-, 3); k = 60, equal weights.
  out = rrf({"text": [1, 2, None], "sim": [2, 1, 3]}, {"text": 1.0, "sim": 1.0}, k=60)
  best = 2 / 61
  assert out[0] == pytest.approx((1 / 61 + 1 / 62) / best)  # = 123/124
  assert out[0] == pytest.approx(123 / 124)
  assert out[1] == pytest.approx(out[0])
  assert out[2] == pytest.approx((1 / 63) / best)  # = 61/126
  assert out[2] == pytest.approx(61 / 126)


def test_rrf_weights_and_first_everywhere_is_one():
  out = rrf({"a": [1, 2], "b": [1, None]}, {"a": 3.0, "b": 1.0}, k=10)
  assert out[0] == pytest.approx(1.0)
  assert out[1] == pytest.approx((3 / 12) / (4 / 11))


def test_weighted_is_a_convex_mix():
  out = weighted({"a": [1.0, 0.0], "b": [0.5, 1.0]}, {"a": 3.0, "b": 1.0})
  assert out == pytest.approx([0.875, 0.25])


def test_redundancy_is_gated_by_the_threshold():
  assert redundancy(0.5, 0.6) == 0.0
  assert redundancy(0.6, 0.6) == 0.0
  assert redundancy(0.8, 0.6) == 0.8
  assert redundancy(0.3, 0.0) == 0.3


def test_mmr_pushes_a_duplicate_below_other_evidence():
  # rel = 1.0, 0.95, 0.8; item1 duplicates item0. lam 0.8, threshold 0.6:
  # pick 0 (0.8); then item1 = 0.8*0.95 - 0.2*1.0 = 0.56 < item2 = 0.8*0.8 = 0.64.
  sim = [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  picks = mmr([1.0, 0.95, 0.8], dense_neighbours(sim), lam=0.8, threshold=0.6)
  assert [p.index for p in picks] == [0, 2, 1]
  assert [p.value for p in picks] == pytest.approx([0.8, 0.64, 0.56])
  assert picks[2].similar_to == 0 and picks[2].redundancy == 1.0


def test_mmr_classic_form_with_zero_threshold():
  # lam 0.7: pick0 = 0.7; item1 = 0.63 - 0.3*0.9 = 0.36; item2 = 0.595 - 0.3*0.1 = 0.565.
  sim = [[1, 0.9, 0.1], [0.9, 1, 0.2], [0.1, 0.2, 1]]
  picks = mmr([1.0, 0.9, 0.85], dense_neighbours(sim), lam=0.7, threshold=0.0)
  assert [p.index for p in picks] == [0, 2, 1]
  assert [p.value for p in picks] == pytest.approx([0.7, 0.565, 0.36])


def test_mmr_ties_go_to_the_lower_index():
  picks = mmr([0.5, 0.5, 0.5], lambda i: (), lam=0.8, threshold=0.6)
  assert [p.index for p in picks] == [0, 1, 2]


def test_mmr_values_never_increase():
  rng = random.Random(7)
  n = 40
  rel = [round(rng.random(), 3) for _ in range(n)]
  sim = [[0.0] * n for _ in range(n)]
  for i in range(n):
    for j in range(i + 1, n):
      sim[i][j] = sim[j][i] = round(rng.random(), 3)
  picks = mmr(rel, dense_neighbours(sim), lam=0.6, threshold=0.5)
  assert sorted(p.index for p in picks) == list(range(n))
  values = [p.value for p in picks]
  assert values == sorted(values, reverse=True)


def test_near_duplicate_index_is_exact_against_brute_force():
  rng = random.Random(3)
  vocab = [f"w{i}" for i in range(30)]
  sets = [frozenset(rng.sample(vocab, rng.randint(1, 8))) for _ in range(120)]
  sets += [frozenset(list(s)[:-1] or s) for s in sets[:20]]  # near-duplicates
  index = NearDuplicateIndex(0.5)
  index.sync((i, s) for i, s in enumerate(sets))
  for i, a in enumerate(sets):
    expected = {j: jaccard(a, b) for j, b in enumerate(sets) if j != i and jaccard(a, b) > 0.5}
    assert index.pairs(i) == pytest.approx(expected)
  # Removing documents removes their pairs, and re-adding restores them.
  index.sync((i, s) for i, s in enumerate(sets) if i % 2 == 0)
  for i in range(0, len(sets), 2):
    expected = {j: jaccard(sets[i], sets[j]) for j in range(0, len(sets), 2) if j != i and jaccard(sets[i], sets[j]) > 0.5}
    assert index.pairs(i) == pytest.approx(expected)
  index.sync((i, s) for i, s in enumerate(sets))
  assert all(index.pairs(i) == pytest.approx({j: jaccard(a, b) for j, b in enumerate(sets) if j != i and jaccard(a, b) > 0.5})
             for i, a in enumerate(sets))
  assert sum(len(index.pairs(i)) for i in range(len(sets))) >= 40  # the near-duplicates pair up
