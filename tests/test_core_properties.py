"""Property tests of the pure compiler over random histories, calls and windows.

(a) the real token count plus the reserve fits the window, or
    ``ContextBudgetExhausted`` is raised only when the fixed tiers cannot fit;
(b) call/response groups are atomic (checked at request level in the
    plugin properties; here: pending groups are never dropped);
(c) every input item is in the pack or named by a truncation event;
(d) identical inputs give identical bytes, also after a JSON round trip;
(e) a warm incremental session equals the stateless ``compile_pack``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from aether_frame.core import manifest as manifest_doc
from aether_frame.core.allocator import ContextBudgetExhausted
from aether_frame.core.compiler import CompileInput, CompilerSession, compile_pack
from aether_frame.core.items import FIXED_LAYERS
from aether_frame.core.rank import ScanHistoryIndex
from aether_frame.retrieval import default_ranker
from aether_frame.tokenizers import TiktokenCounter, get_counter

from tests.strategies import pending_openers, check_accounting, compile_inputs, recount, reserve_of

COUNTER = get_counter()
OTHER_COUNTER = TiktokenCounter("o200k_base")
assert isinstance(COUNTER, TiktokenCounter), "the property tests need the real o200k_base encoding"


def _ranking(use_ranker: bool):
  if not use_ranker:
    return {}
  ranker = default_ranker()
  return {"ranker": ranker, "history_index": ScanHistoryIndex(ranker)}


def _compile(inp: CompileInput, use_ranker: bool, counter=COUNTER):
  return compile_pack(inp, counter, **_ranking(use_ranker))


def _bytes(pack) -> tuple[str, bytes]:
  return pack.payload, manifest_doc.dumps(manifest_doc.finalize(pack.manifest, {}))


def _stripped(inp: CompileInput) -> CompileInput:
  """Only what can never be dropped: fixed tiers, pinned history (with the user turns of
  pending calls), in-flight steps."""
  call = inp.call.model_copy(update={"items": [i for i in inp.call.items if i.layer in FIXED_LAYERS], "tail_hint": None})
  held = pending_openers(inp.history)
  return inp.model_copy(update={"history": [h for p, h in enumerate(inp.history) if h.pinned or p in held], "call": call})


# The fence marker is a hash of the input and the BUDGET line names what was
# omitted, so a full pack with everything elastic dropped can cost a few tokens
# more than the minimal one; a minimal pack this far under the limit must fit.
FENCE_JITTER = 40


@given(inp=compile_inputs(), use_ranker=st.booleans())
def test_pack_fits_window_and_accounts_for_every_item(inp, use_ranker):
  """(a) + (c): real tokens + reserve <= window; nothing vanishes unrecorded."""
  try:
    pack = _compile(inp, use_ranker)
  except ContextBudgetExhausted as e:
    note(str(e))
    assert e.window == inp.call.window
    return  # whether that was justified is the next property
  call = inp.call
  reserve = reserve_of(inp.policy, call.window, call.max_output_tokens)
  real = recount(inp, pack, COUNTER)
  note(f"real={real} reserve={reserve} window={call.window} scale={call.token_scale}")
  # The compiled total is exact near the limit and an upper bound elsewhere;
  # either way it never understates the request.
  assert real <= pack.tokens == pack.manifest["totals"]["tokens"] <= pack.manifest["usable"]
  assert real <= math.floor((call.window - reserve) / call.token_scale)
  assert real * call.token_scale + reserve <= call.window
  check_accounting(inp, pack)
  # A trimmed tail opens on a user turn (pinned groups before the cut aside): Gemini refuses
  # contents that open with a function call, Anthropic any that open with other than a user.
  tail = [g for g in inp.history if g.id in set(pack.conversation_ids) and not g.pinned]
  if pack.manifest["tail"]["start"] > 0 and tail:
    assert tail[0].role != "model" and not any("function_response" in p for p in tail[0].parts), tail[0].id


@given(inp=compile_inputs(), use_ranker=st.booleans(), data=st.data())
def test_budget_exhausted_only_when_fixed_tiers_cannot_fit(inp, use_ranker, data):
  """(a'): if every fixed tier and pinned item fits, the full compile must not raise.

  The oracle is independent of the allocator: the real token count (recounted
  with the tokenizer) of the pack of only what can never be dropped, compiled
  in a roomy window. The window is then drawn around the smallest one that
  holds it, so about a third of the examples sit just above that edge.
  """
  minimal = _stripped(inp)
  roomy = minimal.model_copy(update={"call": minimal.call.model_copy(update={"window": 10**6, "max_output_tokens": None})})
  need = recount(roomy, compile_pack(roomy, COUNTER), COUNTER)
  scale = inp.call.token_scale
  edge = math.ceil((need + FENCE_JITTER) * scale / (1 - inp.policy.floors.slack_min))
  window = data.draw(st.integers(max(1, edge - edge // 5), edge + edge // 2), label="window")
  max_out = data.draw(st.none() | st.integers(0, window // 4), label="max_output_tokens")
  inp = inp.model_copy(update={"call": inp.call.model_copy(update={"window": window, "max_output_tokens": max_out})})
  reserve = reserve_of(inp.policy, window, max_out)
  fits = window > reserve and need + FENCE_JITTER <= math.floor((window - reserve) / scale)
  try:
    pack = _compile(inp, use_ranker)
  except ContextBudgetExhausted as e:
    note(f"minimal pack {need} tokens, window {window}, reserve {reserve}, scale {scale}: {e}")
    assert not fits, f"ContextBudgetExhausted although every fixed tier and pinned item fits: {e}"
    assert set(e.needs) >= ({"reserve"} if "total" not in e.needs else {"total"})
    return
  assert recount(inp, pack, COUNTER) * scale + reserve <= window
  check_accounting(inp, pack)


def _both_or_same_error(first, second):
  """Both compiles' packs, or None when both raised ``ContextBudgetExhausted`` with the same message."""
  try:
    a = first()
  except ContextBudgetExhausted as e:
    with pytest.raises(ContextBudgetExhausted) as again:
      second()
    assert str(again.value) == str(e)
    return None
  return a, second()


@given(inp=compile_inputs(), use_ranker=st.booleans())
def test_identical_inputs_give_identical_bytes(inp, use_ranker):
  """(d): a second compile, from the JSON replay of the input, with another counter instance."""
  replay = CompileInput.model_validate_json(inp.model_dump_json())
  both = _both_or_same_error(lambda: _compile(inp, use_ranker), lambda: _compile(replay, use_ranker, OTHER_COUNTER))
  if both is None:
    return
  first, second = both
  assert _bytes(first) == _bytes(second)
  assert first.conversation_ids == second.conversation_ids


@given(inp=compile_inputs(), use_ranker=st.booleans(), data=st.data())
def test_warm_incremental_session_equals_stateless_compile(inp, use_ranker, data):
  """(e): extend one group at a time (compiling in between) == compile_pack."""
  ranking = _ranking(use_ranker)
  session = CompilerSession(inp.policy, COUNTER, **ranking)
  checkpoints = data.draw(st.sets(st.integers(0, len(inp.history)), max_size=2), label="checkpoints")
  rewind = data.draw(st.integers(0, 3), label="rewind")
  for i, group in enumerate(inp.history):
    if i in checkpoints:
      try:  # an intermediate compile must leave no trace in the session
        session.compile(inp.call)
      except ContextBudgetExhausted:
        pass
      if rewind:  # nor must truncating and re-adding the last groups (the plugin re-groups)
        back = max(0, i - rewind)
        session.truncate_history(back)
        session.extend_history(inp.history[back:i])
    session.extend_history([group])
  both = _both_or_same_error(lambda: session.compile(inp.call), lambda: _compile(inp, use_ranker, OTHER_COUNTER))
  if both is None:
    return
  warm, cold = both
  assert _bytes(warm) == _bytes(cold)
  assert warm.tail_start_id == cold.tail_start_id
