"""Review regressions for RedisMemoryService and WorkingMemory (real redis)."""

from __future__ import annotations

import asyncio

from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.genai import types
import redis

from aether_frame.stores import RedisMemoryService
from aether_frame.stores import WorkingMemory
from tests.fixtures.redis_server import redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_url  # noqa: F401
from tests.test_redis_memory import check_index

APP, USER, SID = "app", "u", "s1"


def texts(notes):
  return [n.content.parts[0].text for n in notes]


def step_key(step: str) -> str:
  return f"aether:{{{APP}:{USER}}}:wm:{SID}:step:{step}"


async def wait_gone(r: redis.Redis, key: str) -> None:
  """Bounded wait for a key's TTL to run out."""
  for _ in range(500):
    if not r.exists(key):
      return
    await asyncio.sleep(0.01)
  raise AssertionError(f"{key} never expired")


async def test_notes_with_equal_timestamps_list_oldest_first(redis_url):
  # A fixed ADK time provider (replays, tests) or a coarse clock gives notes
  # equal timestamps; list_notes must still return them in insertion order.
  wm = WorkingMemory(redis_url)
  platform_time.set_time_provider(lambda: 1_700_000_000.0)
  try:
    added = []
    for i in range(12):
      step = "plan" if i % 3 else "act"
      await wm.add_note(APP, USER, SID, step, f"note {i}")
      added.append((step, f"note {i}"))
  finally:
    platform_time.reset_time_provider()
  assert texts(await wm.list_notes(APP, USER, SID)) == [t for _, t in added]
  assert texts(await wm.list_notes(APP, USER, SID, "plan")) == [
      t for s, t in added if s == "plan"]
  await wm.close()


async def test_short_ttl_store_does_not_hide_live_steps(redis_url):
  # Two stores with different ttl_seconds share a session's steps set; the
  # short one must not make the long-lived step vanish from list_notes().
  r = redis.Redis.from_url(redis_url)
  long_lived = WorkingMemory(redis_url, ttl_seconds=3600)
  scratch = WorkingMemory(redis_url, ttl_seconds=0.05)
  await long_lived.add_note(APP, USER, SID, "a", "long lived")
  await scratch.add_note(APP, USER, SID, "b", "scratch")
  await wait_gone(r, step_key("b"))
  assert texts(await long_lived.list_notes(APP, USER, SID, "a")) == [
      "long lived"]
  assert texts(await long_lived.list_notes(APP, USER, SID)) == ["long lived"]
  await long_lived.close()
  await scratch.close()
  r.close()


async def test_ttl_none_keeps_notes_in_a_step_with_a_ttl(redis_url):
  # "None keeps them": a note added by a ttl_seconds=None store must not
  # expire because another store gave the step a TTL earlier.
  r = redis.Redis.from_url(redis_url)
  scratch = WorkingMemory(redis_url, ttl_seconds=1.0)
  keeper = WorkingMemory(redis_url, ttl_seconds=None)
  await scratch.add_note(APP, USER, SID, "a", "scratch in a")
  assert r.pttl(step_key("a")) > 0  # the case under test: the step has a TTL when the keeper writes
  await keeper.add_note(APP, USER, SID, "a", "keep me")
  await scratch.add_note(APP, USER, SID, "b", "scratch in b")  # expires last
  await wait_gone(r, step_key("b"))
  assert "keep me" in texts(await keeper.list_notes(APP, USER, SID, "a"))
  assert "keep me" in texts(await keeper.list_notes(APP, USER, SID))
  await scratch.close()
  await keeper.close()
  r.close()


async def test_huge_events_are_indexed_in_bounded_script_calls(redis_url):
  # 200 documents per script is no bound when documents are huge: one call
  # with 100k postings blocks Redis for seconds (other workers get BUSY, and
  # a script that wrote cannot be killed). Each call's postings stay bounded.
  r = redis.Redis.from_url(redis_url)
  mem = RedisMemoryService(redis_url)
  await mem.add_events_to_memory(  # loads the script (no NOSCRIPT calls below)
      app_name=APP, user_id="warm-up", events=[Event(
          author="user", content=types.Content(parts=[types.Part(text="hi")]))])
  r.config_set("slowlog-max-len", 1_000_000)
  r.config_set("slowlog-log-slower-than", 0)  # log every command, no timing
  r.slowlog_reset()
  events = [
      Event(id=f"e{k}", invocation_id="i", author="tool", timestamp=float(k),
            content=types.Content(role="user", parts=[types.Part(
                text=" ".join(f"w{k}x{i}" for i in range(1000)))]))
      for k in range(100)
  ]
  try:
    await mem.add_events_to_memory(app_name=APP, user_id=USER, events=events)
    calls = [e["command"].split() for e in r.slowlog_get(1_000_000)]
  finally:
    r.config_set("slowlog-log-slower-than", 10_000)
    r.slowlog_reset()
  keys_per_call = [int(c[2]) for c in calls if c[0].upper() == b"EVALSHA"]
  assert sum(keys_per_call) - 8 * len(keys_per_call) == 100 * 1000
  assert max(keys_per_call) <= 8 + 50_000
  assert check_index(redis_url) == 100
  got = await mem.search_memory(app_name=APP, user_id=USER, query="w7x3 w99x999")
  assert sorted(m.id for m in got.memories) == ["e7", "e99"]
  await mem.close()
  r.close()


def _session(sid: str, events: list[tuple[str, str, float]]):
  from google.adk.sessions.session import Session
  return Session(id=sid, app_name=APP, user_id=USER, events=[
      Event(id=eid, invocation_id="i", author="user", timestamp=ts,
            content=types.Content(role="user", parts=[types.Part(text=text)]))
      for eid, text, ts in events])


async def test_sessions_whose_event_ids_repeat_keep_both_memories(redis_url):
  """Event ids are unique per session only (ADK's own stores key events by session too): an
  imported session with ids "1", "2"… overwrote another session's memory "1" without a word."""
  from google.adk.memory import InMemoryMemoryService

  mem, ref = RedisMemoryService(redis_url, key_prefix="collide"), InMemoryMemoryService()
  a = _session("sA", [("1", "my passport number is in the blue folder", 1.0)])
  b = _session("sB", [("1", "book a table for dinner on friday", 2.0)])
  for service in (mem, ref):
    for session in (a, b, a, b):  # re-adding is idempotent
      await service.add_session_to_memory(session)
  for query, sid in (("passport folder", "sA"), ("dinner friday", "sB")):
    got = (await mem.search_memory(app_name=APP, user_id=USER, query=query)).memories
    assert [(m.id, m.custom_metadata["session_id"]) for m in got] == [("1", sid)]
    assert [m.id for m in (await ref.search_memory(app_name=APP, user_id=USER, query=query)).memories] == ["1"]
  assert await mem.count(app_name=APP, user_id=USER) == 2
  assert check_index(redis_url, prefix="collide") == 2
  # delete_memory takes the id from every session, as ADK's in-memory service does
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="1")
  assert await mem.count(app_name=APP, user_id=USER) == 0
  assert check_index(redis_url, prefix="collide") == 0
  assert not redis.Redis.from_url(redis_url).exists(f"collide:{{{APP}:{USER}}}:mem:alias")
  await mem.close()


async def test_an_entry_that_cannot_be_serialised_fails_the_call_with_nothing_written(redis_url):
  from google.adk.memory.memory_entry import MemoryEntry

  mem = RedisMemoryService(redis_url, key_prefix="ser")
  entries = [MemoryEntry(id=f"m{i}", content=types.Content(parts=[types.Part(text=f"fact {i}")]),
                         custom_metadata={"tag": object()} if i == 250 else {})
             for i in range(300)]
  try:
    await mem.add_memory(app_name=APP, user_id=USER, memories=entries)
  except ValueError as e:
    assert "'m250'" in str(e) and "nothing was written" in str(e)
  else:
    raise AssertionError("an unserialisable entry was accepted")
  assert await mem.count(app_name=APP, user_id=USER) == 0  # was 200: the batches before it
  await mem.close()


async def test_a_one_character_cjk_query_finds_its_memories(redis_url):
  """CJK runs were indexed as bigrams only: 雨, 猫 or 집 found nothing (ADK's in-memory service finds them)."""
  mem = RedisMemoryService(redis_url, key_prefix="cjk")
  texts = {"c0": "明日は雨です", "c1": "我的猫很可爱", "c2": "우리 집은 서울에 있어요", "c3": "The weather is fine"}
  await mem.add_session_to_memory(_session("s", [(k, v, float(i)) for i, (k, v) in enumerate(texts.items())]))
  for query, want in (("雨", "c0"), ("猫", "c1"), ("집", "c2"), ("可爱", "c1"), ("weather", "c3")):
    got = (await mem.search_memory(app_name=APP, user_id=USER, query=query)).memories
    assert [m.id for m in got] == [want], query
  assert check_index(redis_url, prefix="cjk") == 4
  await mem.close()


async def test_re_adding_a_grown_session_sends_only_what_changed(redis_url):
  """ADK's after_agent_callback pattern re-adds the whole session every turn: each re-add
  re-tokenised and sent every event (3.4 s at 8,000 events, against 0.34 s for ADK's in-memory service)."""
  r = redis.Redis.from_url(redis_url)
  mem = RedisMemoryService(redis_url, key_prefix="grow")
  events = [(f"e{i}", f"turn {i} talks about topic{i % 97} and detail{i}", float(i)) for i in range(600)]
  await mem.add_session_to_memory(_session("s", events))
  r.config_set("slowlog-max-len", 100_000)
  r.config_set("slowlog-log-slower-than", 0)
  r.slowlog_reset()
  try:
    await mem.add_session_to_memory(_session("s", events + [("e600", "one more turn about topic5", 600.0)]))
    calls = [e["command"].split() for e in r.slowlog_get(100_000)]
  finally:
    r.config_set("slowlog-log-slower-than", 10_000)
    r.slowlog_reset()
  scripts = [c for c in calls if c[0].upper() == b"EVALSHA"]
  assert len(scripts) == 1 and b"e600" in scripts[0] and b"e599" not in scripts[0]
  got = (await mem.search_memory(app_name=APP, user_id=USER, query="one more turn")).memories
  assert got[0].id == "e600"
  assert check_index(redis_url, prefix="grow") == 601
  # A changed event is sent again (and re-indexed), the others are not.
  events[3] = ("e3", "turn 3 now talks about zebras", 3.0)
  await mem.add_session_to_memory(_session("s", events))
  assert [m.id for m in (await mem.search_memory(app_name=APP, user_id=USER, query="zebras")).memories] == ["e3"]
  assert check_index(redis_url, prefix="grow") == 601
  await mem.close()


async def test_a_sessions_copy_beside_another_stays_one_copy(redis_url):
  """sA and sB both hold event "7" (sB's beside sA's); an explicit memory "7" then replaces sA's:
  re-adding sB stored it a second time, under "7" too (two results, count 3)."""
  from google.adk.memory.memory_entry import MemoryEntry

  mem = RedisMemoryService(redis_url, key_prefix="twice")
  await mem.add_session_to_memory(_session("sA", [("7", "the passport is in the blue folder", 1.0)]))
  b = _session("sB", [("7", "book a table for dinner on friday", 2.0)])
  await mem.add_session_to_memory(b)
  await mem.add_memory(app_name=APP, user_id=USER, memories=[
      MemoryEntry(id="7", content=types.Content(parts=[types.Part(text="a note about the garden")]))])
  await mem.add_session_to_memory(b)
  got = (await mem.search_memory(app_name=APP, user_id=USER, query="dinner friday")).memories
  assert [(m.id, m.custom_metadata.get("session_id")) for m in got] == [("7", "sB")]
  assert await mem.count(app_name=APP, user_id=USER) == 2
  assert check_index(redis_url, prefix="twice") == 2
  await mem.close()


async def test_memories_stored_before_digests_gain_them_and_their_new_terms_on_re_add(redis_url):
  """A memory an earlier version stored has no digest and lacks the CJK single-character terms:
  the script skipped it as unchanged, so re-adding never added either."""
  r = redis.Redis.from_url(redis_url)
  mem = RedisMemoryService(redis_url, key_prefix="legacy")
  session = _session("s", [("r1", "明日は雨です", 1.0), ("r2", "plain english words", 2.0)])
  await mem.add_session_to_memory(session)
  base = f"legacy:{{{APP}:{USER}}}:mem"
  from aether_frame.retrieval.text import tokenize
  from aether_frame.stores._redis_util import enc
  old_terms = " ".join(dict.fromkeys(enc(t) for t in tokenize("明日は雨です")))
  r.hset(f"{base}:terms", "r1", old_terms)  # as the earlier version indexed it
  for term in "明日は雨で":
    r.hdel(f"{base}:t:{enc(term)}", "r1")
  r.hdel(f"{base}:sums", "r1", "r2")
  await mem.add_session_to_memory(session)
  assert [m.id for m in (await mem.search_memory(app_name=APP, user_id=USER, query="雨")).memories] == ["r1"]
  assert set(r.hkeys(f"{base}:sums")) == {b"r1", b"r2"}
  assert check_index(redis_url, prefix="legacy") == 2
  await mem.close()
