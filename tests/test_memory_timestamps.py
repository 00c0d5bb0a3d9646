"""Memory timestamps and working-note ids are the same in every process.

Packs must be byte-identical across machines: any TZ, any PYTHONHASHSEED.
ADK's ``memory_utils.format_timestamp`` writes the writer's local time
without a zone, and the pack read such strings in the reader's local time,
so a worker in Los Angeles put memories seven hours off a worker in UTC
(other dates, other pack ids). Note ids came from ``time.time_ns`` and
``uuid4``, so runs with ADK's id and clock providers pinned still differed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
import subprocess
import sys

from google.adk.memory import _utils as memory_utils
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.genai import types
import pytest

from aether_frame.adk.sources import _parse_ts, memory_items
from aether_frame.core.render import item_line
from aether_frame.stores import WorkingMemory
from tests.fixtures.redis_server import redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_url  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
T = 1750000000.0  # 2025-06-15 15:06:40Z, 08:06:40 in Los Angeles
FOLD = 1730626200.0  # 2024-11-03 09:30Z: 01:30 PST, the second 01:30 in Los Angeles
ZONES = ("UTC", "America/Los_Angeles")

# Writes (mode "write") or reads (mode "read") one store under key prefix
# argv[3]; ADK's id and clock providers pinned as for a reproducible run.
SCRIPT = r'''
import asyncio, itertools, json, sys
from google.adk.events.event import Event
from google.adk.memory import _utils as memory_utils
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.platform import time as ptime, uuid as puuid
from google.genai import types
import redis
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.sources import memory_items
from aether_frame.core.render import item_line
from aether_frame.stores import RedisMemoryService, WorkingMemory
from tests.adk_support import APP, USER, agent, make_runner, new_session, payload_of, say

mode, url, prefix = sys.argv[1:4]
T, FOLD = %r, %r
_ids = itertools.count()
puuid.set_id_provider(lambda: f"id-{next(_ids):06d}")
ptime.set_time_provider(lambda: T)


def content(text):
  return types.Content(role="user", parts=[types.Part(text=text)])


async def write():
  mem = RedisMemoryService(url, key_prefix=prefix)
  await mem.add_events_to_memory(app_name=APP, user_id=USER, session_id="old", events=[
      Event(id="e1", invocation_id="i1", author="user", timestamp=T, content=content("vendor alpha pricing is 10 dollars")),
      Event(id="e2", invocation_id="i2", author="user", timestamp=FOLD, content=content("vendor beta pricing is 12 dollars")),
  ])
  # As the old code stored it: the writer's local time without a zone.
  await mem.add_memory(app_name=APP, user_id=USER, memories=[MemoryEntry(
      id="legacy", content=content("vendor gamma pricing unknown"), author="user",
      timestamp=memory_utils.format_timestamp(FOLD + 3600), custom_metadata={"event_timestamp": FOLD + 3600})])
  wm = WorkingMemory(url, key_prefix=prefix, ttl_seconds=None)
  ids = [(await wm.add_note(APP, USER, "s1", "collect", t)).id
         for t in ["alpha quoted a discount", "beta has no SLA", "gamma is EU only"]]
  # A note as the old code stored it, read back by the new one.
  key = wm._step_key(APP, USER, "s1", "collect")
  r = redis.Redis.from_url(url)
  doc = json.loads(r.hget(key, ids[-1]))
  doc["timestamp"] = memory_utils.format_timestamp(T)
  r.hset(key, ids[-1], json.dumps(doc))
  r.close()
  await mem.close()
  await wm.close()
  return {"note_ids": ids}


async def read():
  mem = RedisMemoryService(url, key_prefix=prefix)
  wm = WorkingMemory(url, key_prefix=prefix, ttl_seconds=None)
  hits = (await mem.search_memory(app_name=APP, user_id=USER, query="vendor pricing")).memories
  notes = await wm.list_notes(APP, USER, "s1", "collect")
  lines = [item_line(i) for i in memory_items(hits) + memory_items(notes, kind="working")]
  llm_agent, model = agent()
  plugin = ContextPackPlugin(window=6000, working_memory=wm)
  runner = make_runner(llm_agent, [plugin], memory_service=mem)
  plan = {"goal": "Research vendors", "step": "Collect facts", "step_id": "collect"}
  await new_session(runner, state={"plan": plan}, session_id="s1")
  await say(runner, "s1", "what is vendor pricing")
  await mem.close()
  await wm.close()
  return {"lines": lines, "pack": payload_of(model.received[-1]), "note_ids": [n.id for n in notes]}


print(json.dumps(asyncio.run(write() if mode == "write" else read())))
''' % (T, FOLD)


def run_in(tz: str, *args: str) -> dict:
  env = dict(os.environ, TZ=tz, PYTHONPATH=str(ROOT), PYTHONHASHSEED="0")
  proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_stores_give_the_same_pack_in_every_time_zone(redis_url):
  written = {tz: run_in(tz, "write", redis_url, f"w{n}") for n, tz in enumerate(ZONES)}
  reads = {(w, r): run_in(r, "read", redis_url, f"w{n}")
           for n, w in enumerate(ZONES) for r in ZONES}
  first = reads[ZONES[0], ZONES[0]]
  for key, got in reads.items():
    assert got["lines"] == first["lines"], key
    assert got["pack"] == first["pack"], key
  # The true UTC times, the DST-fold ones included.
  lines = "\n".join(first["lines"])
  assert "(2025-06-15 15:06Z, user) vendor alpha pricing is 10 dollars" in lines
  assert "(2024-11-03 09:30Z, user) vendor beta pricing is 12 dollars" in lines
  assert "(2024-11-03 10:30Z, user) vendor gamma pricing unknown" in lines
  assert lines.count("(2025-06-15 15:06Z, working)") == 3
  assert "2025-06-15 15:06Z" in first["pack"] and "2024-11-03 09:30Z" in first["pack"]
  # Pinned providers: both writers made the same note ids.
  assert written[ZONES[0]]["note_ids"] == written[ZONES[1]]["note_ids"] == first["note_ids"]


def test_stores_write_utc_with_an_offset():
  from aether_frame.stores.redis_memory import utc_timestamp

  assert utc_timestamp(T) == "2025-06-15T15:06:40+00:00"
  assert _parse_ts(utc_timestamp(FOLD + 0.25)) == FOLD + 0.25


def test_event_timestamp_wins_over_the_string():
  def entry(ts_string, meta):
    return MemoryEntry(content=types.Content(parts=[types.Part(text="x")]), id="m",
                       timestamp=ts_string, custom_metadata=meta)

  # A zone-less string written in another zone is overruled by the exact time.
  [item] = memory_items([entry("2025-06-15T01:06:40", {"event_timestamp": T})])
  assert item.provenance.timestamp == T
  assert "(2025-06-15 15:06Z," in item_line(item)
  # Unusable numbers fall back to the string.
  for bad in (True, math.nan, math.inf, 1e300, "1750000000"):
    [item] = memory_items([entry("2025-06-15T15:06:40Z", {"event_timestamp": bad})])
    assert item.provenance.timestamp == T, bad
  [item] = memory_items([entry(None, {"event_timestamp": -0.0})])
  assert math.copysign(1.0, item.provenance.timestamp) == 1.0


@pytest.mark.parametrize("text", [
    "2025-06-15T15:06:40Z", "2025-06-15T15:06:40+00:00", "2025-06-15T08:06:40-07:00",
    "2025-06-15T17:06:40.000+02:00",
])
def test_strings_with_a_zone_are_exact(text):
  assert _parse_ts(text) == T


def test_zone_less_strings_are_local_time():
  # ADK's writers mean local time; read in the writer's zone, they are right.
  code = ("from google.adk.memory import _utils as u; from aether_frame.adk.sources import _parse_ts;"
          f"print(_parse_ts('2025-06-15T08:06:40'), _parse_ts(u.format_timestamp({T!r})))")
  env = dict(os.environ, TZ="America/Los_Angeles", PYTHONPATH=str(ROOT))
  out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=True).stdout.split()
  assert out == [repr(T), repr(T)]


def _pinned_run(url: str, prefix: str, clock) -> list[str]:
  """One run with ADK's id and clock providers pinned: the note ids it lists."""
  async def go():
    ids = iter(range(10**6))
    platform_uuid.set_id_provider(lambda: f"id-{next(ids):06d}")
    platform_time.set_time_provider(clock)
    try:
      wm = WorkingMemory(url, key_prefix=prefix, ttl_seconds=None)
      made = [(await wm.add_note("app", "u", "s", "step", f"note {i}")).id for i in range(5)]
      listed = await wm.list_notes("app", "u", "s", "step")
      await wm.close()
    finally:
      platform_uuid.reset_id_provider()
      platform_time.reset_time_provider()
    assert [n.id for n in listed] == made  # creation order, ties included
    assert [n.content.parts[0].text for n in listed] == [f"note {i}" for i in range(5)]
    return made
  return asyncio.run(go())


@pytest.mark.parametrize("clock", ["fixed", "advancing"])
def test_note_ids_follow_adks_pinned_providers(redis_url, clock):
  def make():
    ticks = iter(range(10**6))
    return (lambda: T) if clock == "fixed" else (lambda: T + 7.25 * next(ticks))
  first = _pinned_run(redis_url, "run1", make())
  second = _pinned_run(redis_url, "run2", make())
  assert first == second
  assert len(set(first)) == 5 and first == sorted(first)
  assert all(i.endswith(f"-id-{n:06d}") for n, i in enumerate(first))


def test_notes_stamped_alike_keep_their_order_and_stay_unique(redis_url):
  async def go():
    platform_time.set_time_provider(lambda: T)
    try:
      wm = WorkingMemory(redis_url, ttl_seconds=None)
      made = [(await wm.add_note("app", "u", "s", "step", f"n{i}")).id for i in range(12)]
      listed = await wm.list_notes("app", "u", "s", "step")
      await wm.close()
    finally:
      platform_time.reset_time_provider()
    assert [n.id for n in listed] == made and len(set(made)) == 12
    assert all(n.timestamp == "2025-06-15T15:06:40+00:00" for n in listed)
    assert all(n.custom_metadata["event_timestamp"] == T for n in listed)
  asyncio.run(go())


def test_old_zone_less_notes_still_read(redis_url):
  """A note stored before the fix (local time, no zone) is still a valid MemoryEntry."""
  import redis

  async def go():
    wm = WorkingMemory(redis_url, ttl_seconds=None)
    note = await wm.add_note("app", "u", "s", "step", "old note")
    r = redis.Redis.from_url(redis_url)
    key = wm._step_key("app", "u", "s", "step")
    doc = json.loads(r.hget(key, note.id))
    doc["timestamp"] = memory_utils.format_timestamp(doc["custom_metadata"]["event_timestamp"])
    r.hset(key, note.id, json.dumps(doc))
    r.close()
    [got] = await wm.list_notes("app", "u", "s", "step")
    await wm.close()
    assert got.timestamp == doc["timestamp"]
    [item] = memory_items([got], kind="working")
    assert item.provenance.timestamp == note.custom_metadata["event_timestamp"]
  asyncio.run(go())


@pytest.mark.parametrize("stamp", [T * 1000, float("nan"), float("inf"), -1e13, 10**400])
def test_a_timestamp_no_date_can_be_rendered_for_is_undated(stamp):
  from aether_frame.adk.sources import event_time

  assert event_time(stamp) is None
  assert _parse_ts(stamp) is None
  assert event_time(T) == T and event_time(int(T)) == T


async def test_a_history_event_stamped_in_milliseconds_is_undated_and_the_session_still_packs():
  """One event whose timestamp is not a date (milliseconds, from a migrated store or a client that
  sets ``Event.timestamp``) faulted every call of its session: ``year 58881 is out of range``."""
  from google.adk.events import Event

  from aether_frame import ContextPackPlugin
  from aether_frame.adk.state_schema import LAST_FAULT_KEY
  from tests.adk_support import USER, agent, make_runner, new_session, say

  llm_agent, model = agent()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(llm_agent, [plugin])
  session = await new_session(runner)
  imported = Event(author="user", invocation_id="imported", timestamp=T * 1000,
                   content=types.Content(role="user", parts=[types.Part(text="an earlier question")]))
  await runner.session_service.append_event(session, imported)
  for text in ("hello", "again"):
    await say(runner, session.id, text)
  stored = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session.id)
  assert plugin.faults == 0 and LAST_FAULT_KEY not in stored.state
  sent = [p.text for c in model.received[-1].contents for p in c.parts or ()]
  assert "an earlier question" in sent  # the imported turn is in the tail
  assert all("CONTEXT PACK v1" in "".join(p.text or "" for p in r.contents[-1].parts) for r in model.received)
