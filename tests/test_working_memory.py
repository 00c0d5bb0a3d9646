"""WorkingMemory: step notes with a TTL, checkpointed into long-term memory."""

from __future__ import annotations

import asyncio
from datetime import datetime

from google.adk.memory.in_memory_memory_service import InMemoryMemoryService
import pytest
import redis

from aether_frame.stores import RedisMemoryService
from aether_frame.stores import WorkingMemory
from tests.fixtures.redis_server import redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_url  # noqa: F401

APP, USER, SID = "app", "u", "s1"


def texts(notes):
  return [n.content.parts[0].text for n in notes]


@pytest.fixture
async def wm(redis_url):
  w = WorkingMemory(redis_url, ttl_seconds=60)
  yield w
  await w.close()


async def test_notes_are_scoped_ordered_and_stamped(wm):
  await wm.add_note(APP, USER, SID, "plan", "first", author="planner")
  await wm.add_note(APP, USER, SID, "act", "second")
  await wm.add_note(APP, USER, SID, "plan", "third")
  await wm.add_note(APP, USER, "other-session", "plan", "elsewhere")
  await wm.add_note(APP, "other-user", SID, "plan", "not yours")
  notes = await wm.list_notes(APP, USER, SID)
  assert texts(notes) == ["first", "second", "third"]
  assert texts(await wm.list_notes(APP, USER, SID, "plan")) == [
      "first", "third"]
  assert await wm.list_notes(APP, USER, SID, "missing") == []
  first = notes[0]
  assert first.author == "planner" and first.id
  assert datetime.fromisoformat(first.timestamp)  # set, ISO 8601
  assert first.custom_metadata["step_id"] == "plan"
  assert first.custom_metadata["session_id"] == SID


async def test_ttl_applies_and_is_refreshed(redis_url):
  r = redis.Redis.from_url(redis_url)
  w = WorkingMemory(redis_url, ttl_seconds=30)
  await w.add_note(APP, USER, SID, "s", "a")
  keys = r.keys("*:wm:*")
  assert len(keys) == 2 and all(25_000 < r.pttl(k) <= 30_000 for k in keys)
  for k in keys:
    r.pexpire(k, 1000)
  await w.add_note(APP, USER, SID, "s", "b")
  assert all(25_000 < r.pttl(k) <= 30_000 for k in keys)

  short = WorkingMemory(redis_url, ttl_seconds=1.5)
  await short.add_note(APP, USER, "brief", "s", "gone soon")
  brief = r.keys("*:wm:brief:*")
  # A fractional TTL is kept in milliseconds, not rounded to 1 s or 2 s (1.5 s leaves a
  # loaded machine a second of slack between the write and these reads).
  assert len(brief) == 2 and all(1000 < r.pttl(k) <= 1500 for k in brief)
  assert texts(await short.list_notes(APP, USER, "brief")) == ["gone soon"]
  for _ in range(2000):  # bounded (10 s): the TTL runs out in 1.5 s
    if not r.exists(*brief):
      break
    await asyncio.sleep(0.005)
  assert not r.exists(*brief), "the short TTL never ran out"
  assert await short.list_notes(APP, USER, "brief") == []
  await w.close()
  await short.close()
  r.close()


async def test_checkpoint_moves_notes_into_redis_memory(redis_url, wm):
  memory = RedisMemoryService(redis_url)
  await wm.add_note(APP, USER, SID, "research", "The cellar key is blue")
  await wm.add_note(APP, USER, SID, "research", "The attic key is red")
  await wm.add_note(APP, USER, SID, "other", "Unrelated scratch")
  moved = await wm.checkpoint(APP, USER, SID, "research", memory)
  assert moved == 2
  assert await wm.list_notes(APP, USER, SID, "research") == []
  assert texts(await wm.list_notes(APP, USER, SID)) == ["Unrelated scratch"]
  found = await memory.search_memory(app_name=APP, user_id=USER,
                                     query="cellar key")
  assert texts(found.memories)[0] == "The cellar key is blue"
  assert found.memories[0].custom_metadata["step_id"] == "research"
  assert await wm.checkpoint(APP, USER, SID, "research", memory) == 0
  r = redis.Redis.from_url(redis_url)
  assert r.smembers(f"aether:{{{APP}:{USER}}}:wm:{SID}:steps") == {b"other"}
  r.close()
  await memory.close()


async def test_concurrent_checkpoints_move_each_note_once(redis_url):
  memory = RedisMemoryService(redis_url)
  workers = [WorkingMemory(redis_url) for _ in range(3)]
  for i in range(20):
    await workers[0].add_note(APP, USER, SID, "step", f"fact number {i}")
  counts = await asyncio.gather(*(
      w.checkpoint(APP, USER, SID, "step", memory) for w in workers))
  assert sum(counts) == 20
  assert await memory.count(app_name=APP, user_id=USER) == 20
  for w in workers:
    await w.close()
  await memory.close()


async def test_checkpoint_into_adk_in_memory_service(wm):
  memory = InMemoryMemoryService()  # no add_memory: events path
  await wm.add_note(APP, USER, SID, "s", "Remember the blue door")
  assert await wm.checkpoint(APP, USER, SID, "s", memory) == 1
  assert await wm.list_notes(APP, USER, SID) == []
  found = await memory.search_memory(app_name=APP, user_id=USER,
                                     query="blue door")
  assert texts(found.memories) == ["Remember the blue door"]


class _FailingMemory(InMemoryMemoryService):
  async def add_events_to_memory(self, **kwargs):
    raise RuntimeError("memory backend down")


class _NoteDuringCheckpoint(RedisMemoryService):
  """Adds a note while the checkpoint is in flight."""

  def __init__(self, url, wm):
    super().__init__(url)
    self.wm = wm

  async def add_memory(self, **kwargs):
    await self.wm.add_note(APP, USER, SID, "s", "arrived mid-checkpoint")
    await super().add_memory(**kwargs)


async def test_checkpoint_loses_no_note_on_failure_or_race(redis_url, wm):
  await wm.add_note(APP, USER, SID, "s", "keep me")
  with pytest.raises(RuntimeError, match="backend down"):
    await wm.checkpoint(APP, USER, SID, "s", _FailingMemory())
  assert texts(await wm.list_notes(APP, USER, SID, "s")) == ["keep me"]

  racing = _NoteDuringCheckpoint(redis_url, wm)
  assert await wm.checkpoint(APP, USER, SID, "s", racing) == 1
  assert texts(await wm.list_notes(APP, USER, SID, "s")) == [
      "arrived mid-checkpoint"]
  await racing.close()
