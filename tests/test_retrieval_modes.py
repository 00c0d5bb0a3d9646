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


def _pasted_log(lines: int) -> str:
  """A long pasted log whose middle lines carry dates, "when" and mode cue words: data, not the question."""
  from aether_frame.retrieval.features import CUE_CHARS

  plain = " ".join(f"ok {i} bytes" for i in range(CUE_CHARS // 8))  # longer than a cue window
  cues = "\n".join(f"2021-03-{1 + i % 28:02d} step {i}: who decided when to deploy the release checklist" for i in range(lines))
  return f"{plain}\n{cues}\n{plain}"


def test_a_long_message_takes_its_cues_from_its_head_and_tail_not_the_pasted_middle():
  from aether_frame.retrieval.features import CUE_CHARS, QueryInfo

  w = RetrievalWeights()
  log = _pasted_log(400)
  assert len(log) > 6 * CUE_CHARS
  # The whole text would read as a dated workflow/people question; the cues around the paste say otherwise.
  asked = QueryInfo(f"Here is the output I got:\n{log}\nWhat's the weather like on Mars?", w)
  assert asked.mode == "general"
  assert asked.when is False
  assert asked.span(1_700_000_000.0) is None
  # A question at either end still sets the cues.
  dated = QueryInfo(f"What happened in May 2023?\n{log}\nthanks", w)
  assert dated.span(1_700_000_000.0) is not None and dated.span(1_700_000_000.0).start < 1_690_000_000
  when = QueryInfo(f"{log}\nWhen did Melanie go on a hike?", w)
  assert when.when is True
  # BM25 terms still come from the whole message: nothing of it is dropped for lexical matching.
  assert {"deploi", "deploy"} & asked.qset and len(asked.qterms) > 10
  # A short message is its own cue view.
  short = QueryInfo("When did we decide to deploy?", w)
  assert short.cue is short.text and short.when is True


def test_cue_view_cuts_at_whitespace():
  from aether_frame.retrieval.features import CUE_CHARS, cue_view

  text = "x" * (CUE_CHARS - 3) + " yesterday" + " filler" * 2_000 + " tomorrow " + "y" * (CUE_CHARS - 5)
  view = cue_view(text)
  assert len(view) <= 2 * CUE_CHARS + 2
  assert "yesterday" not in view and "terday" not in view.split()  # the split word is not half-kept
  assert view.startswith("x" * (CUE_CHARS - 3)) and view.endswith("y" * (CUE_CHARS - 5))
