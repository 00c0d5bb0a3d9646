"""Replay and report rebuild a session's calls in order on warm compiler sessions.

Each call extends the session that rebuilt the previous call of its stream, so a
session's replay costs what its compiles cost, not the square of its length; and
every rebuilt pack is byte-identical to a cold ``compile_pack`` of the same input.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from google.adk.artifacts import FileArtifactService
from hypothesis import given, settings
from hypothesis import strategies as st

from aether_frame.audit import inputs as ri
from aether_frame.audit.replay import new_rebuilds, replay
from aether_frame.audit.source import open_location
from aether_frame.audit.warm import MAX_WARM
from aether_frame.cli import main as cli_main
from aether_frame.core import manifest as manifest_doc
from aether_frame.core.allocator import ContextBudgetExhausted
from aether_frame.core.compiler import CallInputs, CompileInput, compile_pack
from aether_frame.core.items import Item, Layer
from aether_frame.core.policy import PackPolicy
from aether_frame.tokenizers import get_counter
from tests.fixtures.audit_session import run_session
from tests.strategies import compile_inputs

COUNTER = get_counter()


def _key(item: Item) -> str:
  return ri.blob_key(json.dumps(item.model_dump(mode="json"), sort_keys=True).encode())


def _bytes(pack) -> tuple[str, bytes, tuple]:
  return pack.payload, manifest_doc.dumps(manifest_doc.finalize(pack.manifest, {})), tuple(pack.conversation_ids)


def _edited(item: Item) -> Item:
  """The same group (same id) with other text: a history rewritten in the middle."""
  return item.model_copy(update={"text": item.text + " (edited)", "tokens": None})


def _outcome(fn):
  try:
    return _bytes(fn())
  except ContextBudgetExhausted as e:
    return ("exhausted", str(e))


@given(inp=compile_inputs(), data=st.data())
@settings(max_examples=60, deadline=None)
def test_each_rebuild_equals_a_cold_compile_as_the_history_grows_shrinks_and_changes(inp, data):
  n = len(inp.history)
  steps = data.draw(st.lists(st.tuples(st.integers(0, n), st.integers(-1, max(0, n - 1)), st.integers(0, 1)),
                             min_size=1, max_size=5), label="steps")
  rebuilds = new_rebuilds()
  for length, edit_at, stream in steps:
    history = list(inp.history[:length])
    if 0 <= edit_at < length:  # same id, other content: the warm session must not keep the old one
      history[edit_at] = _edited(history[edit_at])
    ci = inp.model_copy(update={"history": history})
    warm = _outcome(lambda: rebuilds.compile(ci, [_key(h) for h in history], COUNTER, stream))
    cold_rebuilds = new_rebuilds(cold=True)
    cold = _outcome(lambda: cold_rebuilds.compile(ci, [_key(h) for h in history], COUNTER, stream))
    reference = _outcome(lambda: compile_pack(ci, COUNTER, ranker=cold_rebuilds._ranker,
                                              history_index=cold_rebuilds._make_index()))
    assert warm == cold == reference


def _growing(inp: CompileInput, n: int) -> list[CompileInput]:
  return [inp.model_copy(update={"history": inp.history[:k]}) for k in range(n + 1)]


def test_a_growing_session_adds_each_group_once_warm_and_every_call_whole_cold():
  inp = _session_input(40)
  calls = _growing(inp, 40)
  warm, cold = new_rebuilds(), new_rebuilds(cold=True)
  for ci in calls:
    keys = [_key(h) for h in ci.history]
    assert _bytes(warm.compile(ci, keys, COUNTER, "a")) == _bytes(cold.compile(ci, keys, COUNTER, "a"))
  assert warm.groups_added == 40
  assert cold.groups_added == sum(range(41))


def test_streams_keep_their_own_sessions_and_the_oldest_is_let_go():
  inp = _session_input(12)
  rebuilds = new_rebuilds()
  keys = [_key(h) for h in inp.history]
  for stream in range(MAX_WARM + 1):
    rebuilds.compile(inp, keys, COUNTER, stream)
  assert rebuilds.groups_added == 12 * (MAX_WARM + 1)
  rebuilds.compile(inp, keys, COUNTER, MAX_WARM)  # still warm: nothing added
  assert rebuilds.groups_added == 12 * (MAX_WARM + 1)
  rebuilds.compile(inp, keys, COUNTER, 0)  # let go when the ninth came: rebuilt whole
  assert rebuilds.groups_added == 12 * (MAX_WARM + 2)


def test_a_call_that_fails_leaves_no_half_built_session_behind():
  inp = _session_input(10)
  keys = [_key(h) for h in inp.history]
  rebuilds = new_rebuilds()
  rebuilds.compile(inp.model_copy(update={"history": inp.history[:5]}), keys[:5], COUNTER, "a")
  twice = [*inp.history[:7], inp.history[3]]  # a duplicate id: extend_history refuses the batch
  with pytest.raises(ValueError, match="duplicate history id"):
    rebuilds.compile(inp.model_copy(update={"history": twice}), [*keys[:7], keys[3]], COUNTER, "a")
  pack = rebuilds.compile(inp, keys, COUNTER, "a")
  assert _bytes(pack) == _bytes(new_rebuilds(cold=True).compile(inp, keys, COUNTER, "a"))


def test_history_keys_must_match_the_history():
  inp = _session_input(3)
  with pytest.raises(ValueError, match="2 history keys for 3 history groups"):
    new_rebuilds().compile(inp, ["a", "b"], COUNTER, "a")


def _session_input(n: int) -> CompileInput:
  """``n`` plain turns that overflow a 1K window, so trimming and recall run."""
  history = [Item(id=f"t{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
                  text=f"turn {i} about topic {i % 7} and the plan for week {i % 5}. " * 6)
             for i in range(n)]
  request = Item(id="task:user_request", layer=Layer.TASK, kind="user_request", text="what about topic 3 in week 2?")
  return CompileInput(policy=PackPolicy(), history=history, call=CallInputs(items=[request], window=1024))


# ------------------------------------------------------------- replay and CLI
@pytest.fixture(scope="module")
def stored_session(tmp_path_factory):
  root = tmp_path_factory.mktemp("warm_replay")
  asyncio.run(run_session(FileArtifactService(str(root)), 12))
  return str(root)


def test_replay_warm_and_cold_report_the_same_calls_identical(stored_session):
  warm = asyncio.run(replay(open_location(stored_session)))
  cold = asyncio.run(replay(open_location(stored_session), cold=True))
  assert len(warm) > 12
  assert [(r.label, r.status) for r in warm] == [(r.label, r.status) for r in cold]
  assert {r.status for r in warm} == {"identical"}


def test_the_replay_command_takes_cold(stored_session, capsys):
  assert cli_main(["replay", "-q", "--cold", stored_session]) == 0
  assert " identical, 0 different, 0 refused, 0 errors" in capsys.readouterr().out
