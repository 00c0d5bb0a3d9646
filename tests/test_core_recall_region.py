"""Recall searches the trimmed turns only.

Recall offers MEMORY copies of older turns. A hit on a turn the tail already
carries is wasted: it takes one of the ``recall_top_k`` slots, and while the
budget is split it counts as memory demand, so the conversation is trimmed to
make room for a copy of a turn that was in the conversation already.
"""

from __future__ import annotations

from aether_frame.core.compiler import CallInputs, CompileInput, CompilerSession, compile_pack
from aether_frame.core.items import Item, Layer, Provenance
from aether_frame.core.policy import PackPolicy
from aether_frame.retrieval import default_ranker
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()
TOPICS = ("lentil soup", "mountain weather", "the train strike", "ukulele lessons", "whale documentaries",
          "kitchen paint", "running shoes", "a history podcast")  # fmt: skip
FACT = "the storage unit code is 7319 at the Riverside depot"
QUESTION = "What was the storage unit code at the Riverside depot?"


def _turn(i: int, fact_at: int) -> Item:
  body = f"by the way, {FACT}." if i == fact_at else f"let me tell you about {TOPICS[i % len(TOPICS)]}, quite something."
  text = f"Turn {i}: {body} " + "More small talk about the week and the plans. " * 3
  return Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model", parts=[{"text": text}],
              text=text, kind="turn", provenance=Provenance(timestamp=1_700_000_000.0 + 60 * i, author="user"))


def _call(window: int, hint=None, question: str = QUESTION) -> CallInputs:
  items = [
      Item(id="system:i", layer=Layer.SYSTEM, text="You are a helpful assistant."),
      Item(id="task:u", layer=Layer.TASK, kind="user_request", text=question),
      Item(id="memory:m", layer=Layer.MEMORY, kind="memory", text="The user likes short answers."),
  ]
  return CallInputs(items=items, window=window, tail_hint=hint, now=1_700_100_000.0)


def _session() -> CompilerSession:
  ranker = default_ranker()
  return CompilerSession(PackPolicy(), COUNTER, ranker=ranker, history_index=ranker.new_history_index())


def _recall_rows(pack) -> list[dict]:
  return [r for r in pack.manifest["items"] if r["kind"] == "recall"]


def test_hits_come_from_before_the_tail_in_every_call():
  session = _session()
  session.extend_history([_turn(i, fact_at=3) for i in range(40)])
  hint, trims, found = None, 0, 0
  for n in range(40, 120):
    session.extend_history([_turn(n, fact_at=3)])
    pack = session.compile(_call(2048, hint))
    start = pack.manifest["tail"]["start"]
    rows = _recall_rows(pack)
    assert all(r["status"] != "in_tail" for r in rows), rows
    assert all(session.history_ids().index(r["id"].removeprefix("recall:")) < start for r in rows)
    # The index holds the trimmed region only: never a turn the tail carries.
    assert len(session.history_index) <= start
    trims += hint is not None and start > session.history_ids().index(hint)
    found += any(r["id"] == "recall:h3" and r["status"] == "included" for r in rows)
    hint = pack.tail_start_id
  assert trims >= 2, "the 2K window must trim in chunks along the way"
  assert found >= 70, "the fact turn, long trimmed, is recalled for the question"


def test_nothing_is_searched_while_nothing_is_trimmed():
  session = _session()
  session.extend_history([_turn(i, fact_at=1) for i in range(12)])
  pack = session.compile(_call(16_384))
  assert pack.manifest["tail"]["start"] == 0 and _recall_rows(pack) == []
  assert len(session.history_index) == 0
  again = session.compile(_call(16_384, pack.tail_start_id))  # the hint names the first turn
  assert _recall_rows(again) == [] and len(session.history_index) == 0


def test_recall_does_not_trim_the_turns_it_would_copy():
  """A history that just fits keeps every turn: no recall copy of a kept turn takes its budget."""
  history = [_turn(i, fact_at=2) for i in range(30)]
  need = sum(COUNTER.count(h.text) + 4 for h in history)
  fits = None
  for window in range(need, 3 * need, 64):  # the smallest window that keeps every turn
    ranker = default_ranker()
    inp = CompileInput(policy=PackPolicy(), history=history, call=_call(window))
    pack = compile_pack(inp, COUNTER, ranker=ranker, history_index=ranker.new_history_index())
    if pack.manifest["tail"]["start"] == 0:
      fits = pack
      break
  assert fits is not None
  assert _recall_rows(fits) == [] and len(fits.conversation_ids) == len(history)
  # One window quantum less trims, and then the trimmed turns are what recall searches.
  ranker = default_ranker()
  tight = compile_pack(
      CompileInput(policy=PackPolicy(), history=history, call=_call(window - 1024)),
      COUNTER, ranker=ranker, history_index=ranker.new_history_index(),
  )
  start = tight.manifest["tail"]["start"]
  assert start > 0
  assert all(int(r["id"].removeprefix("recall:h")) < start for r in _recall_rows(tight))


def test_the_index_follows_history_edits():
  session = _session()
  session.extend_history([_turn(i, fact_at=3) for i in range(80)])
  pack = session.compile(_call(2048))
  start = pack.manifest["tail"]["start"]
  # Without a hint, the region is the cut before recall adds its demand (which may cut a little more).
  assert start > 10 and start - 8 <= len(session.history_index) <= start
  indexed = len(session.history_index)
  session.truncate_history(5)  # a rewind below the indexed region cuts the index with it
  assert len(session.history_index) == 5
  session.extend_history([_turn(i, fact_at=3) for i in range(5, 80)])
  again = session.compile(_call(2048))
  assert len(session.history_index) == indexed
  assert again.payload == pack.payload and again.manifest == pack.manifest
  session.reset_history()
  assert len(session.history_index) == 0
