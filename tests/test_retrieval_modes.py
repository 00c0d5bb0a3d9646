"""Recall modes: picked from the message, recorded in every explanation."""

from __future__ import annotations

import pytest

from aether_frame.core.items import Item, Layer
from aether_frame.retrieval import HybridRanker, RetrievalWeights, detect_mode


@pytest.mark.parametrize(
    "query,mode",
    [
        ("What's the weather like on Mars?", "general"),
        ("Why did we decide to drop the Redis cache?", "decision"),
        ("Should we deploy to production today?", "decision"),
        ("How do I set up the test runner?", "workflow"),
        ("What are the steps of the release checklist?", "workflow"),
        ("Which milestone is the codebase refactor in?", "project"),
        ("Who owns the billing service?", "people"),
        ("What's my relationship with the design team like?", "people"),
        ("You just said something about retries, go on", "conversation"),
        ("and why?", "conversation"),
        ("When did Melanie go on a hike after the roadtrip?", "general"),
    ],
)
def test_detect_mode(query, mode):
  assert detect_mode(query) == mode


def test_mode_is_recorded_and_changes_the_weights():
  items = [
      Item(id="d", layer=Layer.MEMORY, kind="memory", text="we picked postgres over mysql", meta={"type": "decision"}, tokens=6),
      Item(id="n", layer=Layer.MEMORY, kind="memory", text="postgres notes from the meetup", tokens=6),
  ]
  ranker = HybridRanker()
  general = {it.id: it for it in ranker.rank("postgres", items, layer=Layer.MEMORY, now=None)}
  decision = {it.id: it for it in ranker.rank("why did we choose postgres?", items, layer=Layer.MEMORY, now=None)}
  assert general["d"].meta["explain"]["mode"] == "general"
  assert decision["d"].meta["explain"]["mode"] == "decision"
  # Decision mode boosts decision memories' salience.
  assert decision["d"].meta["explain"]["salience"] > general["d"].meta["explain"]["salience"]
  assert decision["d"].score - decision["n"].score > general["d"].score - general["n"].score


def test_mode_weights_multiply_the_base_weights():
  w = RetrievalWeights()
  conv = w.for_mode("conversation")
  assert conv["continuity"] == pytest.approx(w.continuity * w.modes.conversation.continuity)
  assert w.for_mode("general")["text"] == w.text
