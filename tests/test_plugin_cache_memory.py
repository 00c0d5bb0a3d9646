"""The plugin's warm session caches are bounded by memory, not only by count.

A warm cache holds a session's costed history and its recall index: ~85 bytes
per history token (a 10,000-event session: ~84 MB), plus any inline media the
history carries. 256 such sessions would be ~21 GB, so the plugin also evicts
the least recently used caches past ``session_cache_bytes``
(``CompilerSession.held_bytes``). An evicted session is rebuilt from its
events on its next call, and sends the pack a warm cache would have sent.
"""

from __future__ import annotations

import base64
import itertools
import logging

import pytest
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.genai import types

from aether_frame import ContextPackPlugin
from aether_frame.core.compiler import HISTORY_BYTES_PER_TOKEN, CompilerSession
from aether_frame.core.items import Item, Layer
from aether_frame.offline_model import OfflineLlm

from .adk_support import USER, agent, make_runner, manifests, new_session, payload_of, png_bytes, say

_TURN = "Please summarise the shipment record for warehouse {i} and the invoice totals of week {i}. " * 3
REPLY = "Noted. " + "The shipment and invoice figures are recorded for the summary. " * 3


def _check_totals(plugin) -> None:
  """The running total is the sum of what the cached sessions hold, key for key."""
  assert set(plugin._cache_bytes) == set(plugin._sessions)
  for key, cache in plugin._sessions.items():
    assert plugin._cache_bytes[key] == plugin._held(cache) >= cache.compiler.held_bytes(), key
  assert plugin._cached_bytes == sum(plugin._cache_bytes.values())


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2GB", None])
def test_session_cache_bytes_is_checked_at_construction(bad):
  with pytest.raises((TypeError, ValueError), match="session_cache_bytes"):
    ContextPackPlugin(window=8192, session_cache_bytes=bad)


async def test_caches_stay_under_the_byte_cap_and_evicted_sessions_still_pack():
  cap = 120_000  # ~1,200 history tokens: about two of the three sessions below
  plugin = ContextPackPlugin(window=32_768, session_cache_bytes=cap)
  a, model = agent()
  runner = make_runner(a, [plugin])
  ids = [(await new_session(runner)).id for _ in range(3)]
  evicted = False
  for turn in range(6):
    for sid in ids:
      await say(runner, sid, _TURN.format(i=f"{sid[:4]}-{turn}"))
      served = (runner.app_name, USER, sid)
      assert [k for k in plugin._sessions if k[:3] == served], "the session just served must stay cached"
      _check_totals(plugin)
      assert plugin._cached_bytes <= cap
      evicted = evicted or len(plugin._sessions) < 3
      session = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=sid)
      assert "aether_frame:last_fault" not in session.state, session.state.get("aether_frame:last_fault")
  assert evicted, "three growing sessions never passed the cap"
  assert plugin.faults == 0
  # Every call went out as a pack, with its manifest, evicted sessions included.
  assert len(model.received) == 18
  assert all("USER REQUEST (VERBATIM):" in payload_of(r) for r in model.received)
  for sid in ids:
    assert len(await manifests(runner, sid)) == 6


def test_held_bytes_counts_history_tokens_and_inline_media():
  from aether_frame.tokenizers import get_counter

  session = CompilerSession(__import__("aether_frame").PackPolicy(), get_counter("o200k_base"))
  image = base64.b64encode(png_bytes(64, 64)).decode()
  text = Item(id="g0", layer=Layer.CONVERSATION, role="user", kind="turn", text="hello there " * 20,
              parts=[{"text": "hello there " * 20}])
  media = Item(id="g1", layer=Layer.CONVERSATION, role="model", kind="turn", text="[image]",
               parts=[{"function_response": {"name": "shot", "response": {"ok": True},
                                             "parts": [{"inline_data": {"mime_type": "image/png", "data": image}}]}}])
  session.extend_history([text])
  assert session.held_bytes() == session.history_tokens * HISTORY_BYTES_PER_TOKEN
  session.extend_history([media])
  assert session.held_bytes() == session.history_tokens * HISTORY_BYTES_PER_TOKEN + len(image)
  session.truncate_history(1)
  assert session.held_bytes() == session.history_tokens * HISTORY_BYTES_PER_TOKEN


async def test_a_session_of_screenshots_is_weighed_by_its_images():
  """An image costs a few hundred tokens but the cache holds its base64: the weight counts it."""
  plugin = ContextPackPlugin(window=131_072)
  a, _ = agent()
  runner = make_runner(a, [plugin])
  sid = (await new_session(runner)).id
  image = png_bytes(400, 300)
  for i in range(3):
    await say(runner, sid, f"screenshot {i}", parts=[types.Part(inline_data=types.Blob(mime_type="image/png", data=image))])
  await say(runner, sid, "what changed between them?")
  (cache,) = plugin._sessions.values()
  assert cache.compiler.held_bytes() >= cache.compiler.history_tokens * HISTORY_BYTES_PER_TOKEN + 3 * len(image)
  _check_totals(plugin)


async def test_a_session_larger_than_the_cap_is_not_kept_and_the_others_stay_warm(caplog):
  """Kept, it would push out every other session and be pushed out by the next."""
  plugin = ContextPackPlugin(window=32_768, session_cache_bytes=60_000)
  a, model = agent()
  runner = make_runner(a, [plugin])
  small = [(await new_session(runner)).id for _ in range(2)]
  big = (await new_session(runner)).id
  for sid in small:
    await say(runner, sid, "hi")
  kept = dict(plugin._sessions)
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    for turn in range(4):
      await say(runner, big, _TURN.format(i=turn) * 4)
      for sid in small:
        await say(runner, sid, f"and {turn}?")
  assert all((runner.app_name, USER, big) != k[:3] for k in plugin._sessions), "the oversized session stayed cached"
  for key, cache in kept.items():
    assert plugin._sessions.get(key) is cache, "a small session was pushed out by the oversized one"
  _check_totals(plugin)
  assert plugin.faults == 0 and len(model.received) == 14
  assert len(await manifests(runner, big)) == 4
  assert sum("more than session_cache_bytes" in r.getMessage() for r in caplog.records) == 1


def _pin_clock(turn: int) -> None:
  """Event times and ids that depend on the turn alone, so two runs build equal sessions."""
  ticks, ids = itertools.count(), itertools.count()
  platform_time.set_time_provider(lambda: 1_700_000_000 + 100 * turn + next(ticks) * 0.01)
  platform_uuid.set_id_provider(lambda: f"t{turn}-{next(ids):04d}")


async def _interleaved(cap: int, turns: int):
  """Three sessions served in turn on a window that trims their tails, clock pinned."""
  plugin = ContextPackPlugin(window=1_536, session_cache_bytes=cap)
  model = OfflineLlm(default=REPLY)
  runner = make_runner(agent(model=model)[0], [plugin])
  ids = [f"s{k}" for k in range(3)]
  try:
    for t in range(turns):
      for k, sid in enumerate(ids):
        _pin_clock(3 * t + k)
        if t == 0:
          await new_session(runner, session_id=sid)
        await say(runner, sid, f"Turn {t} of {sid}: " + _TURN.format(i=f"{sid}-{t}") * 2)
  finally:
    platform_time.reset_time_provider()
    platform_uuid.reset_id_provider()
  return plugin, model, [await manifests(runner, sid) for sid in ids]


def _untimed(doc: dict) -> dict:
  return {**doc, "runtime": {k: v for k, v in doc["runtime"].items() if k != "compile_ms"}}


async def test_a_rebuilt_session_sends_the_pack_a_warm_one_would():
  """The same three sessions, events and clock, served by a plugin that keeps every
  cache warm and by one whose cap keeps only the session it serves: every request
  and every manifest (bar timings) is the same, with tails trimmed and recall on."""
  turns = 10
  warm, warm_model, warm_docs = await _interleaved(2**40, turns)
  cold, cold_model, cold_docs = await _interleaved(1, turns)
  assert len(warm._sessions) == 3 and len(cold._sessions) == 0  # 1 byte: not even the one served stays
  trims = [d for docs in warm_docs for d in docs if d["tail"]["start"] > 0]
  assert trims, "the fixture must trim the tail, so the rebuilt path reads the tail hint and recalls"
  assert any(i["kind"] == "recall" for d in trims for i in d["items"]), "the fixture must recall older turns"
  assert len(warm_model.received) == len(cold_model.received) == 3 * turns
  for w, c in zip(warm_model.received, cold_model.received):
    assert payload_of(c) == payload_of(w)
    assert [x.model_dump_json(exclude_none=True) for x in c.contents] == [
        x.model_dump_json(exclude_none=True) for x in w.contents]
  for w_docs, c_docs in zip(warm_docs, cold_docs):
    assert [_untimed(d) for d in c_docs] == [_untimed(d) for d in w_docs]


async def test_what_a_compile_memoises_is_weighed_and_an_evicted_sessions_input_memo_goes():
  """One call per session, each ranking 10 knowledge documents: the weight is taken after
  the compile (its ranker's memos count), and a session let go takes its manifest
  writer's input memo (its history items and their JSON) with it."""
  knowledge = [{"uri": f"artifact://doc{i}.md", "summary": f"Document {i} on warehouse audits. " * 60} for i in range(10)]
  cap = 150_000
  plugin = ContextPackPlugin(window=32_768, session_cache_bytes=cap)
  a, _ = agent()
  runner = make_runner(a, [plugin])
  for n in range(6):
    sid = (await new_session(runner, state={"knowledge": knowledge})).id
    await say(runner, sid, f"Which document covers audit {n}?")
    _check_totals(plugin)
    assert plugin._cached_bytes <= cap
    for cache in plugin._sessions.values():
      ranker_bytes = cache.compiler.ranker.held_bytes
      assert ranker_bytes > 0
      assert cache.compiler.held_bytes() >= cache.compiler.history_tokens * HISTORY_BYTES_PER_TOKEN + ranker_bytes
    assert set(plugin.manifests._encoder._streams) <= set(plugin._sessions)
  assert 0 < len(plugin._sessions) < 6, "six sessions of ten documents each must pass a 150 KB cap"
  assert plugin.faults == 0


async def test_a_call_that_fails_after_the_sync_still_weighs_the_session():
  """An instruction larger than the window: every call faults (and goes out unpacked), but
  the history the plugin synced is weighed, so the session can still be let go."""
  plugin = ContextPackPlugin(window=2_048)
  a, _ = agent(instruction="Follow every rule below. " + "Rule: check the invoice totals twice. " * 700)
  runner = make_runner(a, [plugin])
  sid = (await new_session(runner)).id
  for t in range(4):
    await say(runner, sid, f"Turn {t}: " + _TURN.format(i=t))
  assert plugin.faults == 4
  (cache,) = plugin._sessions.values()
  assert cache.compiler.history_tokens > 0
  _check_totals(plugin)
