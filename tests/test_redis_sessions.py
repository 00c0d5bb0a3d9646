"""RedisSessionService against a real redis-server.

The contract tests run one scenario on ADK's own services and on ours and
require equal observations; the rest check what ADK's services cannot show:
tenant isolation, corrupt data, TTLs, Cluster slots, concurrent writers and
Redis crashes.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import multiprocessing
import os
import threading
import time
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
import pytest
import redis
import redis.asyncio as redis_asyncio
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.asyncio.retry import Retry
from redis.crc import key_slot

from aether_frame.stores import CorruptDataError
from aether_frame.stores import DuplicateEventIdError
from aether_frame.stores import RedisSessionService
from aether_frame.stores import StoreUnavailableError
from tests.fixtures.redis_server import aof_redis_server  # noqa: F401
from tests.fixtures.redis_server import cluster_redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_url  # noqa: F401
from tests.fixtures.redis_server import RedisServer

APP = "app"


def ev(
    eid: str,
    text: str = "",
    *,
    ts: float | None = None,
    delta: dict[str, Any] | None = None,
    partial: bool | None = None,
    author: str = "user",
) -> Event:
  kwargs: dict[str, Any] = {}
  if ts is not None:
    kwargs["timestamp"] = ts
  return Event(
      id=eid,
      invocation_id="inv",
      author=author,
      content=types.Content(role="user", parts=[types.Part(text=text or eid)]),
      actions=EventActions(state_delta=dict(delta or {})),
      partial=partial,
      **kwargs,
  )


def view(events: list[Event]) -> list[tuple[Any, ...]]:
  """What a reader can observe of events, independent of the service."""
  return [
      (e.id, e.author, e.content.parts[0].text, e.timestamp,
       dict(e.actions.state_delta))
      for e in events
  ]


def fail(exc: BaseException) -> str:
  return type(exc).__name__


# --------------------------------------------------------------------------
# Contract: each scenario runs on a reference ADK service and on ours.


async def sc_create_with_and_without_id(svc) -> dict[str, Any]:
  s = await svc.create_session(app_name=APP, user_id="u", session_id=" sid ")
  g = await svc.get_session(app_name=APP, user_id="u", session_id="sid")
  try:
    await svc.create_session(app_name=APP, user_id="u", session_id="sid")
    dup = "none"
  except AlreadyExistsError as e:
    dup = fail(e)
  a = await svc.create_session(app_name=APP, user_id="u")
  b = await svc.create_session(app_name=APP, user_id="u", session_id="  ")
  got_a = await svc.get_session(app_name=APP, user_id="u", session_id=a.id)
  return {
      "id": s.id,
      "get": (g.id, g.app_name, g.user_id, g.state, g.events),
      "fresh_time": s.last_update_time > 1e9,
      "dup": dup,
      "generated": (len(a.id) >= 16, a.id != b.id, got_a.id == a.id),
  }


async def sc_state_prefixes(svc) -> dict[str, Any]:
  s = await svc.create_session(
      app_name=APP,
      user_id="u",
      session_id="s1",
      state={"k": 1, "app:a": 2, "user:u": 3, "temp:t": 4},
  )
  other_session = await svc.create_session(
      app_name=APP, user_id="u", session_id="s2"
  )
  other_user = await svc.create_session(
      app_name=APP, user_id="v", session_id="s3"
  )
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  return {
      "created": s.state,
      "stored": g.state,
      "same_user": other_session.state,
      "other_user": other_user.state,
      "user_state": await svc.get_user_state(app_name=APP, user_id="u"),
      "user_state_v": await svc.get_user_state(app_name=APP, user_id="v"),
  }


async def sc_append_state_deltas(svc) -> dict[str, Any]:
  s = await svc.create_session(
      app_name=APP, user_id="u", session_id="s1", state={"k": 0}
  )
  e1 = ev("e1", ts=1001.5, delta={
      "k": 1, "temp:t": "x", "app:a": [1, 2], "user:u": {"n": 1}, "f": 0.1 + 0.2,
  })
  returned = await svc.append_event(s, e1)
  in_memory = (dict(s.state), view(s.events), s.last_update_time)
  await svc.append_event(s, ev("e2", ts=1002.25, delta={"user:u": None}))
  peer = await svc.create_session(app_name=APP, user_id="u", session_id="s2")
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  return {
      "returned": view([returned]),
      "in_memory": in_memory,
      "after_two": (dict(s.state), s.last_update_time, len(s.events)),
      "stored": (g.state, view(g.events), g.last_update_time),
      "peer_state": peer.state,
      "user_state": await svc.get_user_state(app_name=APP, user_id="u"),
  }


async def _ten_events(svc):
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  for i in range(10):
    await svc.append_event(s, ev(f"e{i}", ts=1000.0 + i))
  return s


async def sc_num_recent_events(svc) -> dict[str, Any]:
  await _ten_events(svc)
  out = {}
  for k in (None, 0, 1, 3, 10, 20):
    g = await svc.get_session(
        app_name=APP, user_id="u", session_id="s1",
        config=GetSessionConfig(num_recent_events=k),
    )
    out[k] = [e.id for e in g.events]
  return out


async def sc_after_timestamp(svc) -> dict[str, Any]:
  await _ten_events(svc)
  out = {}
  for after, k in ((1005.0, None), (1004.5, None), (1009.0, None),
                   (2000.0, None), (1000.0, None), (1003.0, 2), (1008.0, 5)):
    g = await svc.get_session(
        app_name=APP, user_id="u", session_id="s1",
        config=GetSessionConfig(after_timestamp=after, num_recent_events=k),
    )
    out[(after, k)] = [e.id for e in g.events]
  return out


async def sc_list_sessions(svc) -> dict[str, Any]:
  for sid in ("a", "b", "c"):
    await svc.create_session(
        app_name=APP, user_id="u1", session_id=sid, state={"sid": sid}
    )
  await svc.create_session(
      app_name=APP, user_id="u2", session_id="d", state={"user:x": 1}
  )
  await svc.create_session(app_name="other", user_id="u1", session_id="z")
  # Appends reorder by last update time: a is touched last.
  b = await svc.get_session(app_name=APP, user_id="u1", session_id="b")
  await svc.append_event(b, ev("eb", ts=time.time() + 10, delta={"app:g": 1}))
  a = await svc.get_session(app_name=APP, user_id="u1", session_id="a")
  await svc.append_event(a, ev("ea", ts=time.time() + 20))

  def brief(resp):
    return [(s.user_id, s.id, s.state, s.events) for s in resp.sessions]

  return {
      "u1": brief(await svc.list_sessions(app_name=APP, user_id="u1")),
      "all": brief(await svc.list_sessions(app_name=APP)),
      "nobody": brief(await svc.list_sessions(app_name=APP, user_id="zz")),
      "no_app": brief(await svc.list_sessions(app_name="missing")),
  }


async def sc_delete(svc) -> dict[str, Any]:
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  await svc.append_event(s, ev("e1", delta={"user:keep": 1}))
  await svc.create_session(app_name=APP, user_id="u", session_id="s2")
  await svc.delete_session(app_name=APP, user_id="wrong", session_id="s1")
  still = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  await svc.delete_session(app_name=APP, user_id="u", session_id="s1")
  await svc.delete_session(app_name=APP, user_id="u", session_id="never")
  gone = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  listed = await svc.list_sessions(app_name=APP, user_id="u")
  try:
    await svc.append_event(s, ev("e2"))
    after_delete = "appended"
  except SessionNotFoundError as e:
    after_delete = fail(e)
  recreated = await svc.create_session(
      app_name=APP, user_id="u", session_id="s1"
  )
  return {
      "wrong_user_delete_kept": still is not None,
      "gone": gone,
      "listed": [x.id for x in listed.sessions],
      "append_after_delete": after_delete,
      "recreated": (recreated.state, recreated.events),
  }


async def sc_partial_event(svc) -> dict[str, Any]:
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  p = ev("p1", delta={"k": 1}, partial=True)
  returned = await svc.append_event(s, p)
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  return {
      "returned_same": returned is p,
      "in_memory": (len(s.events), dict(s.state)),
      "stored": (view(g.events), g.state),
  }


async def sc_stale_append(svc) -> dict[str, Any]:
  await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  first = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  second = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  await svc.append_event(first, ev("e1", delta={"k": 1}))
  try:
    await svc.append_event(second, ev("e2", delta={"k": 2, "user:x": 2}))
    outcome = "appended"
  except StaleSessionError as e:
    outcome = fail(e)
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  fresh = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  await svc.append_event(fresh, ev("e3"))
  g2 = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  return {
      "outcome": outcome,
      "stored": ([e.id for e in g.events], g.state),
      "second_copy": [e.id for e in second.events],
      "after_reload": [e.id for e in g2.events],
  }


async def sc_missing_session(svc) -> dict[str, Any]:
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  ghost = s.model_copy(update={"id": "ghost"})
  try:
    await svc.append_event(ghost, ev("e1", delta={"user:x": 1}))
    outcome = "appended"
  except SessionNotFoundError as e:
    outcome = fail(e)
  return {
      "outcome": outcome,
      "user_state": await svc.get_user_state(app_name=APP, user_id="u"),
      "wrong_user": await svc.get_session(
          app_name=APP, user_id="x", session_id="s1"),
      "wrong_app": await svc.get_session(
          app_name="x", user_id="u", session_id="s1"),
      "wrong_id": await svc.get_session(
          app_name=APP, user_id="u", session_id="s2"),
  }


# (scenario, reference service, checks that keep the scenario honest)
SCENARIOS = [
    (sc_create_with_and_without_id, "in_memory",
     lambda o: o["dup"] == "AlreadyExistsError" and o["id"] == "sid"),
    (sc_state_prefixes, "in_memory",
     lambda o: o["stored"] == {"k": 1, "app:a": 2, "user:u": 3}
     and o["other_user"] == {"app:a": 2}),
    (sc_append_state_deltas, "in_memory",
     lambda o: o["in_memory"][0]["temp:t"] == "x"
     and "temp:t" not in o["stored"][0] and o["stored"][2] == 1002.25),
    (sc_num_recent_events, "in_memory",
     lambda o: o[3] == ["e7", "e8", "e9"] and o[0] == [] and len(o[20]) == 10),
    (sc_after_timestamp, "in_memory",
     lambda o: o[(1005.0, None)] == ["e5", "e6", "e7", "e8", "e9"]
     and o[(1003.0, 2)] == ["e8", "e9"]),
    (sc_list_sessions, "in_memory",
     lambda o: [x[1] for x in o["u1"]] == ["c", "b", "a"]
     and o["all"][0][1] in ("c", "d") and o["u1"][0][3] == []),
    (sc_delete, "in_memory",
     lambda o: o["gone"] is None and o["listed"] == ["s2"]
     and o["wrong_user_delete_kept"]),
    (sc_partial_event, "in_memory",
     lambda o: o["returned_same"] and o["stored"] == ([], {})),
    # InMemorySessionService has no stale detection; SQLite is the reference.
    (sc_stale_append, "sqlite",
     lambda o: o["outcome"] == "StaleSessionError"
     and o["stored"] == (["e1"], {"k": 1})),
    (sc_missing_session, "in_memory",
     lambda o: o["outcome"] == "SessionNotFoundError"
     and o["user_state"] == {} and o["wrong_user"] is None),
]


@pytest.fixture
async def make_service(redis_url, tmp_path):
  made = []

  async def make(kind: str):
    if kind == "in_memory":
      svc = InMemorySessionService()
    elif kind == "sqlite":
      svc = SqliteSessionService(str(tmp_path / f"s{len(made)}.db"))
    else:
      svc = RedisSessionService(redis_url, key_prefix=f"c{len(made)}")
    made.append(svc)
    return svc

  yield make
  for svc in made:
    if hasattr(svc, "close"):
      await svc.close()


@pytest.mark.parametrize(
    "scenario,reference,check",
    SCENARIOS,
    ids=[s[0].__name__.removeprefix("sc_") for s in SCENARIOS],
)
async def test_contract_matches_adk(make_service, scenario, reference, check):
  expected = await scenario(await make_service(reference))
  assert check(expected), f"reference {reference} changed behaviour: {expected}"
  got = await scenario(await make_service("redis"))
  assert got == expected


async def test_sqlite_and_in_memory_agree_with_us_on_stale_free_runs(
    make_service,
):
  # The stale scenario minus the racing copy: all three services agree.
  async def run(svc):
    await svc.create_session(app_name=APP, user_id="u", session_id="s1")
    s = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
    for i in range(3):
      await svc.append_event(s, ev(f"e{i}", delta={"k": i}))
    g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
    return [e.id for e in g.events], g.state

  results = [await run(await make_service(k))
             for k in ("in_memory", "sqlite", "redis")]
  assert results[0] == results[1] == results[2] == (["e0", "e1", "e2"],
                                                     {"k": 2})


# --------------------------------------------------------------------------
# Behaviour ADK's services do not cover.


@pytest.fixture
async def svc(redis_url):
  service = RedisSessionService(redis_url)
  yield service
  await service.close()


def sync_client(url: str) -> redis.Redis:
  return redis.Redis.from_url(url)


async def eventually(condition, what: str, timeout: float = 10.0) -> None:
  """Polls ``condition`` (a TTL running out) with a bound, instead of sleeping a guess."""
  deadline = time.monotonic() + timeout
  while not condition():
    assert time.monotonic() < deadline, what
    await asyncio.sleep(0.005)


async def test_tenant_isolation_with_colliding_ids(svc, redis_url):
  # ':' inside ids must not let (a:b, c) and (a, b:c) share keys.
  one = await svc.create_session(
      app_name="a:b", user_id="c", session_id="x", state={"who": 1}
  )
  two = await svc.create_session(
      app_name="a", user_id="b:c", session_id="x", state={"who": 2}
  )
  await svc.append_event(one, ev("e1", delta={"user:n": "one"}))
  got1 = await svc.get_session(app_name="a:b", user_id="c", session_id="x")
  got2 = await svc.get_session(app_name="a", user_id="b:c", session_id="x")
  assert (got1.state, got2.state) == (
      {"who": 1, "user:n": "one"}, {"who": 2})
  assert [e.id for e in got2.events] == []
  for app, user in (("a:b", "b:c"), ("a", "c"), ("a:b:c", ""), ("{a", "b}")):
    assert await svc.get_session(
        app_name=app, user_id=user, session_id="x") is None
  listed = await svc.list_sessions(app_name="a", user_id="c")
  assert listed.sessions == []
  # A session object re-labelled to another user cannot write there.
  forged = got1.model_copy(update={"user_id": "intruder"})
  with pytest.raises(SessionNotFoundError):
    await svc.append_event(forged, ev("e2"))
  assert await svc.get_user_state(app_name="a:b", user_id="intruder") == {}


async def test_works_with_a_decode_responses_client(redis_url):
  client = redis_asyncio.Redis.from_url(redis_url, decode_responses=True)
  svc = RedisSessionService(client)
  s = await svc.create_session(
      app_name=APP, user_id="u", state={"app:a": "é", "user:b": [1]})
  await svc.append_event(s, ev("e1", text="naïve ☃", delta={"k": {"x": 1}}))
  g = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
  assert g.state == {"app:a": "é", "user:b": [1], "k": {"x": 1}}
  assert g.events[0].content.parts[0].text == "naïve ☃"
  listed = await svc.list_sessions(app_name=APP)
  assert [x.id for x in listed.sessions] == [s.id]
  assert await svc.get_user_state(app_name=APP, user_id="u") == {"b": [1]}
  await svc.close()
  assert await client.ping()  # a caller's client is not closed for them
  await client.aclose()


def test_constructor_rejects_what_it_cannot_use(redis_url):
  with pytest.raises(TypeError, match="async"):
    RedisSessionService(redis.Redis.from_url(redis_url))
  with pytest.raises(ValueError, match="redis://"):
    RedisSessionService("http://127.0.0.1:6379")
  with pytest.raises(ValueError, match="brace"):
    RedisSessionService(redis_url, key_prefix="a{b}")
  with pytest.raises(ValueError) as refused:  # the error names the URL, not its password
    RedisSessionService("redis+sentinel://:S3cretPassw0rd@127.0.0.1:26379/0")
  assert "S3cret" not in str(refused.value) and "redis+sentinel://:***@127.0.0.1:26379/0" in str(refused.value)
  with pytest.raises(ValueError, match="ttl_seconds"):
    RedisSessionService(redis_url, ttl_seconds=0)


async def test_keys_share_one_slot_and_delete_removes_all(svc, redis_url):
  s = await svc.create_session(
      app_name="shop", user_id="ann", session_id="s{1}", state={"user:x": 1}
  )
  await svc.append_event(s, ev("e1", delta={"k": 1}))
  r = sync_client(redis_url)
  session_keys = [k for k in r.keys("*") if b"session:" in k]
  assert len(session_keys) == 3  # hash, events stream, event ids
  user_keys = [k for k in r.keys("*") if b"{shop:ann}" in k]
  assert len({key_slot(k) for k in user_keys}) == 1
  assert all(b"s%7B1%7D" in k for k in session_keys)
  await svc.delete_session(app_name="shop", user_id="ann", session_id="s{1}")
  assert [k for k in r.keys("*") if b"session:" in k] == []
  assert r.zcard(b"aether:{shop:ann}:sessions") == 0
  assert r.hgetall(b"aether:{shop:ann}:user_state") == {b"x": b"1"}
  r.close()


async def test_no_expiry_by_default_and_ttl_refreshed(redis_url):
  r = sync_client(redis_url)
  plain = RedisSessionService(redis_url, key_prefix="plain")
  s = await plain.create_session(
      app_name=APP, user_id="u", state={"app:a": 1, "user:b": 2}
  )
  await plain.append_event(s, ev("e1", delta={"user:b": 3}))
  assert [r.pttl(k) for k in r.keys("plain:*")] == [-1] * 7

  ttl = RedisSessionService(redis_url, key_prefix="ttl", ttl_seconds=100)
  s = await ttl.create_session(
      app_name=APP, user_id="u", state={"app:a": 1, "user:b": 1})
  await ttl.append_event(s, ev("e1"))
  keys = r.keys("ttl:*")
  assert len(keys) == 7
  assert all(90_000 < r.pttl(k) <= 100_000 for k in keys)
  for k in keys:
    r.pexpire(k, 5_000)
  await ttl.append_event(s, ev("e2"))
  assert all(90_000 < r.pttl(k) <= 100_000 for k in keys), "TTL not refreshed"

  short = RedisSessionService(redis_url, key_prefix="short", ttl_seconds=1.5)
  s = await short.create_session(app_name=APP, user_id="u", session_id="s")
  short_keys = r.keys("short:*")
  # A fractional TTL is kept in milliseconds, not rounded to 1 s or 2 s.
  assert short_keys and all(1000 < r.pttl(k) <= 1500 for k in short_keys)
  await eventually(lambda: not r.exists(*short_keys), "the short TTL never ran out")
  assert await short.get_session(app_name=APP, user_id="u", session_id="s") is None
  for service in (plain, ttl, short):
    await service.close()
  r.close()


async def test_corrupt_data_raises_naming_the_key(svc, redis_url):
  r = sync_client(redis_url)

  async def fresh(sid):
    s = await svc.create_session(app_name=APP, user_id="u", session_id=sid)
    await svc.append_event(s, ev(f"{sid}-e1", delta={"k": 1}))
    return s

  def get(sid):
    return svc.get_session(app_name=APP, user_id="u", session_id=sid)

  await fresh("bad-event")
  r.xadd(b"aether:{app:u}:session:bad-event:events", {b"e": b"{not json",
                                                       b"t": b"2e9"})
  r.hincrby(b"aether:{app:u}:session:bad-event", b"ver", 1)
  with pytest.raises(CorruptDataError,
                     match="session:bad-event:events.*not parse"):
    await get("bad-event")

  s = await fresh("evicted")
  r.delete(b"aether:{app:u}:session:evicted:events")
  with pytest.raises(CorruptDataError,
                     match="session:evicted:events.*0 events.*1 appends"):
    await get("evicted")
  with pytest.raises(CorruptDataError, match="session:evicted:events"):
    await svc.append_event(s, ev("evicted-e2"))

  await fresh("bad-state")
  r.hset(b"aether:{app:u}:session:bad-state", b"s:k", b"{oops")
  with pytest.raises(CorruptDataError, match="session:bad-state'.*'k'"):
    await get("bad-state")

  s = await fresh("no-version")
  r.hdel(b"aether:{app:u}:session:no-version", b"ver")
  with pytest.raises(CorruptDataError, match="session:no-version"):
    await get("no-version")
  with pytest.raises(CorruptDataError, match="session:no-version"):
    await svc.append_event(s, ev("no-version-e2"))
  assert r.xlen(b"aether:{app:u}:session:no-version:events") == 1

  s = await fresh("orphan")
  r.delete(b"aether:{app:u}:session:orphan")
  with pytest.raises(CorruptDataError, match="session:orphan"):
    await get("orphan")  # events exist: never report "no such session"
  with pytest.raises(CorruptDataError, match="session:orphan"):
    await svc.create_session(app_name=APP, user_id="u", session_id="orphan")

  s = await fresh("wrong-type")
  r.delete(b"aether:{app:u}:user_state")
  r.set(b"aether:{app:u}:user_state", b"a string")
  with pytest.raises(CorruptDataError, match="user_state"):
    await svc.append_event(s, ev("wt-e2", delta={"k": 2}))
  r.delete(b"aether:{app:u}:user_state")
  # Nothing of the refused append was written.
  g = await get("wrong-type")
  assert [e.id for e in g.events] == ["wrong-type-e1"] and g.state == {"k": 1}
  r.close()


async def test_redelivered_event_is_idempotent(svc):
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  retry_copy = copy.deepcopy(s)
  e = ev("e1", delta={"k": 1, "user:n": 1})
  await svc.append_event(s, e)
  # Same event again from the copy that never saw the reply: no duplicate.
  await svc.append_event(retry_copy, copy.deepcopy(e))
  assert [x.id for x in retry_copy.events] == ["e1"]
  assert retry_copy._storage_update_marker == s._storage_update_marker == "1"
  await svc.append_event(s, e)  # and again from the original: still one
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  assert [x.id for x in g.events] == ["e1"]
  with pytest.raises(DuplicateEventIdError, match="e1"):
    await svc.append_event(g, ev("e1", text="different"))
  await svc.append_event(g, ev("e2"))
  with pytest.raises(StaleSessionError):
    await svc.append_event(retry_copy, copy.deepcopy(e))
  # A copy without a version marker falls back to timestamps, like SQLite.
  unmarked = (await svc.get_session(
      app_name=APP, user_id="u", session_id="s1")).model_copy()
  unmarked._storage_update_marker = None
  await svc.append_event(unmarked, ev("e3", ts=unmarked.last_update_time + 1))
  with pytest.raises(StaleSessionError):
    older = unmarked.model_copy(update={"last_update_time": 1.0})
    older._storage_update_marker = None
    await svc.append_event(older, ev("e4"))


async def test_concurrent_appends_to_one_session_object_all_land_as_in_adk(svc):
  """ADK's live mode appends from two tasks at once to invocation_context.session: every
  append after the first sent the same version marker and was refused as stale."""
  results = {}
  for name, service in (("redis", svc), ("memory", InMemorySessionService())):
    session = await service.create_session(app_name=APP, user_id="u", session_id="live")
    events = [ev(f"e{i}", delta={"n": i}) for i in range(6)]
    out = await asyncio.gather(*(service.append_event(session, e) for e in events), return_exceptions=True)
    assert [type(r).__name__ for r in out] == ["Event"] * 6, out
    stored = await service.get_session(app_name=APP, user_id="u", session_id="live")
    results[name] = ([e.id for e in session.events], [e.id for e in stored.events], stored.state)
  assert results["redis"] == results["memory"] == ([f"e{i}" for i in range(6)],) * 2 + ({"n": 5},)
  # Two copies of the session still conflict: the second is stale, as before.
  a = await svc.get_session(app_name=APP, user_id="u", session_id="live")
  b = await svc.get_session(app_name=APP, user_id="u", session_id="live")
  out = await asyncio.gather(svc.append_event(a, ev("x1")), svc.append_event(b, ev("x2")), return_exceptions=True)
  assert sorted(type(r).__name__ for r in out) == ["Event", "StaleSessionError"]
  assert not svc._turns._locks  # each lock is dropped once nobody holds it


@pytest.mark.parametrize("after", [float("inf"), 1e300, 1e17])
async def test_an_after_timestamp_past_every_event_returns_none_as_in_adk(svc, after):
  """It was RedisStoreError "Invalid stream ID": the cutoff did not fit a stream id."""
  memory = InMemorySessionService()
  seen = []
  for service in (svc, memory):
    s = await service.create_session(app_name=APP, user_id="u", session_id="s")
    for i in range(3):
      await service.append_event(s, ev(f"e{i}", ts=1000.0 + i))
    got = await service.get_session(app_name=APP, user_id="u", session_id="s",
                                    config=GetSessionConfig(after_timestamp=after))
    seen.append([e.id for e in got.events])
  assert seen == [[], []]
  with pytest.raises(ValueError, match="after_timestamp is NaN"):
    await svc.get_session(app_name=APP, user_id="u", session_id="s", config=GetSessionConfig(after_timestamp=float("nan")))


@pytest.mark.parametrize("ts", [1e17, float("inf"), float("nan")])
async def test_an_event_timestamp_no_stream_id_holds_is_refused_by_name_and_writes_nothing(svc, ts):
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
  with pytest.raises(ValueError, match=r"append_event: event 'far' has timestamp .*nothing was written"):
    await svc.append_event(s, ev("far", ts=ts, delta={"x": 1}))
  got = await svc.get_session(app_name=APP, user_id="u", session_id="s")
  assert got.events == [] and got.state == {} and s.events == []


async def test_stale_copy_resending_anothers_event_is_stale(svc):
  await svc.create_session(app_name=APP, user_id="u", session_id="s1")
  stale = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  fresh = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  await svc.append_event(fresh, ev("e1", delta={"x": 1}))
  lost_reply = copy.deepcopy(fresh)  # at version 1, like a writer whose
  e2 = ev("e2")                      # append of e2 got no reply
  await svc.append_event(fresh, copy.deepcopy(e2))
  # The copy that missed e1 must not be caught up by re-sending e2.
  with pytest.raises(StaleSessionError):
    await svc.append_event(stale, copy.deepcopy(e2))
  assert stale._storage_update_marker == "0" and stale.events == []
  with pytest.raises(StaleSessionError):
    await svc.append_event(stale, ev("e3", delta={"x": 2}))
  # The writer that stored e2 and the one that lost the reply may resend it.
  await svc.append_event(fresh, copy.deepcopy(e2))
  await svc.append_event(lost_reply, copy.deepcopy(e2))
  assert [e.id for e in lost_reply.events] == ["e1", "e2"]
  assert lost_reply._storage_update_marker == "2"
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s1")
  assert [e.id for e in g.events] == ["e1", "e2"]
  assert g.state == {"x": 1} and g._storage_update_marker == "2"


async def test_expired_sessions_leave_the_user_index(redis_url):
  r = sync_client(redis_url)
  index = b"aether:{app:u}:sessions"
  # The session kept alive keeps the index key alive too; creates alone must
  # still keep it from growing with every expired session.
  svc = RedisSessionService(redis_url, ttl_seconds=100)
  live = await svc.create_session(app_name=APP, user_id="u", session_id="live")
  for i in range(20):
    await svc.create_session(app_name=APP, user_id="u", session_id=f"s{i:02}")
    await svc.append_event(live, ev(f"e{i}"))
    keys = r.keys(f"aether:{{app:u}}:session:s{i:02}*")
    for key in keys:
      r.pexpire(key, 1)  # expires now instead of in 100 s
    await eventually(lambda: not r.exists(*keys), "a 1 ms TTL never ran out")
    assert r.zcard(index) <= 3
  listed = await svc.list_sessions(app_name=APP, user_id="u")
  assert [x.id for x in listed.sessions] == ["live"]
  assert r.zrange(index, 0, -1) == [b"live"]
  await svc._prune(APP, "u", ["live"])  # re-checked: a live id stays
  assert r.zrange(index, 0, -1) == [b"live"]
  await svc.close()
  r.close()


def _open_fds() -> int:
  return len(os.listdir("/proc/self/fd"))


def _clients_named(port: int, name: str) -> int:
  r = redis.Redis(host="127.0.0.1", port=port)
  try:
    return sum(1 for c in r.client_list() if c.get("name") == name)
  finally:
    r.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("cluster", [False, True], ids=["single", "cluster"])
def test_a_new_loop_per_call_does_not_leak_clients(request, cluster):
  # ADK's sync Runner.run() runs every call in asyncio.run(); each closed
  # loop leaves a client the service must drop along with its sockets.
  server = request.getfixturevalue(
      "cluster_redis_server" if cluster else "redis_server")
  server.flush()
  url = f"redis://127.0.0.1:{server.port}/0?client_name=per-loop"
  svc = RedisSessionService(url, cluster=cluster)

  async def call(i):
    # Concurrent calls, so each loop's client opens several connections.
    await asyncio.gather(*(
        svc.create_session(app_name=APP, user_id="u", session_id=f"{i}-{j}")
        for j in range(3)))

  asyncio.run(call(0))
  gc.collect()
  fds, clients = _open_fds(), _clients_named(server.port, "per-loop")
  assert clients >= 3
  for i in range(1, 13):
    asyncio.run(call(i))
    assert len(svc._conn._per_loop) == 1
    assert _clients_named(server.port, "per-loop") <= clients
  gc.collect()
  assert _open_fds() <= fds
  asyncio.run(svc.close())  # on a new loop: still drops the last loop's
  assert _clients_named(server.port, "per-loop") == 0
  assert svc._conn._per_loop == {}


async def test_num_recent_events_cost_does_not_grow_with_history(svc, redis_url):
  # Counted by the server, not timed: the commands it ran (a script's own
  # included) and the bytes it sent for the last 20 events are the same for a
  # session of 20 events and one of 2,000.
  r = sync_client(redis_url)

  def counters():
    # This probe's INFO and a reconnect's CLIENT/HELLO are no part of a read.
    calls = {c: v["calls"] for c, v in r.info("commandstats").items()
             if c != "cmdstat_info" and not c.startswith(("cmdstat_client", "cmdstat_hello"))}
    return r.info("stats")["total_net_output_bytes"], calls

  async def read(sid, k):
    sent0, calls0 = counters()
    g = await svc.get_session(
        app_name=APP, user_id="u", session_id=sid,
        config=GetSessionConfig(num_recent_events=k),
    )
    sent1, calls1 = counters()
    ran = {c: n - calls0.get(c, 0) for c, n in calls1.items()
           if n != calls0.get(c, 0)}
    return [e.id for e in g.events], sent1 - sent0, ran

  async def build(sid, n):
    s = await svc.create_session(app_name=APP, user_id="u", session_id=sid)
    payload = "x" * 400
    for i in range(n):
      await svc.append_event(s, ev(f"{sid}-{i}", text=payload))

  await build("small", 20)
  await build("big", 2000)
  await read("small", 20)  # loads the script: not part of a read's cost
  small_ids, small_sent, small_ran = await read("small", 20)
  big_ids, big_sent, big_ran = await read("big", 20)
  all_ids, all_sent, _ = await read("big", None)
  assert small_ids == [f"small-{i}" for i in range(20)]
  assert big_ids == [f"big-{i}" for i in range(1980, 2000)]
  assert len(all_ids) == 2000
  assert big_ran == small_ran and sum(big_ran.values()) >= 2, big_ran
  assert small_sent > 20 * 400 and big_sent <= 1.05 * small_sent, (small_sent, big_sent)
  assert all_sent > 50 * big_sent  # the measure does see a read that grows
  r.close()


async def test_cluster_mode_keeps_each_script_in_one_slot(
    cluster_redis_server,
):
  cluster_redis_server.flush()
  client = RedisCluster(host="127.0.0.1", port=cluster_redis_server.port)
  svc = RedisSessionService(client)
  s = await svc.create_session(
      app_name=APP, user_id="u", state={"app:a": 1, "user:b": 2, "c": 3}
  )
  await svc.append_event(s, ev("e1", delta={"app:a": 5, "user:b": 6, "c": 7}))
  stale = (await svc.get_session(
      app_name=APP, user_id="u", session_id=s.id)).model_copy()
  stale._storage_update_marker = "0"
  with pytest.raises(StaleSessionError):
    await svc.append_event(stale, ev("e2", delta={"app:a": 99}))
  other = await svc.create_session(app_name=APP, user_id="v")
  g = await svc.get_session(app_name=APP, user_id="u", session_id=s.id)
  assert g.state == {"app:a": 5, "user:b": 6, "c": 7}
  assert [e.id for e in g.events] == ["e1"]
  listed = await svc.list_sessions(app_name=APP)
  assert sorted(x.id for x in listed.sessions) == sorted([s.id, other.id])
  assert other.state == {"app:a": 5}
  await svc.delete_session(app_name=APP, user_id="u", session_id=s.id)
  assert await svc.get_session(
      app_name=APP, user_id="u", session_id=s.id) is None
  await client.aclose()


async def test_cluster_appends_refresh_the_ttl_of_app_keys(
    cluster_redis_server,
):
  # App keys sit in another slot than the session; an append without an
  # `app:` delta must still keep them from expiring under an active session.
  cluster_redis_server.flush()
  client = RedisCluster(host="127.0.0.1", port=cluster_redis_server.port)
  svc = RedisSessionService(client, ttl_seconds=100)
  s = await svc.create_session(
      app_name=APP, user_id="u", state={"app:a": 1, "user:b": 2})
  r = redis.Redis(host="127.0.0.1", port=cluster_redis_server.port)
  for key in r.keys("*"):
    r.pexpire(key, 5_000)
  await svc.append_event(s, ev("e1", delta={"k": 1}))
  ttls = {key: r.pttl(key) for key in r.keys("*")}
  assert len(ttls) == 7
  assert all(90_000 < t <= 100_000 for t in ttls.values()), ttls
  listed = await svc.list_sessions(app_name=APP)
  assert [(x.id, x.state) for x in listed.sessions] == [
      (s.id, {"app:a": 1, "user:b": 2, "k": 1})]
  r.close()
  await client.aclose()


# --------------------------------------------------------------------------
# Concurrency: real processes, real connections.


def _writer_process(url, proc, sessions, appends, out):
  async def run():
    svc = RedisSessionService(url)
    cache = {}
    acked, stale = [], 0
    for j in range(appends):
      sid = sessions[(proc + j) % len(sessions)]
      event_id = f"p{proc}-{j}"
      while True:
        s = cache.get(sid)
        if s is None:
          s = await svc.get_session(
              app_name=APP, user_id="u", session_id=sid,
              config=GetSessionConfig(num_recent_events=0),
          )
          cache[sid] = s
        try:
          await svc.append_event(s, ev(
              event_id, delta={f"p{proc}": j, "user:total_writes": event_id}))
          acked.append((sid, event_id))
          break
        except StaleSessionError:
          stale += 1
          cache.pop(sid)
    await svc.close()
    return acked, stale

  out.put((proc,) + asyncio.run(run()))


def test_eight_processes_lose_nothing(redis_server):
  redis_server.flush()
  sessions = [f"s{i}" for i in range(8)]

  async def setup():
    svc = RedisSessionService(redis_server.url)
    for sid in sessions:
      await svc.create_session(app_name=APP, user_id="u", session_id=sid)
    await svc.close()

  asyncio.run(setup())
  ctx = multiprocessing.get_context("fork")
  out = ctx.Queue()
  procs = [
      ctx.Process(target=_writer_process,
                  args=(redis_server.url, p, sessions, 500, out))
      for p in range(8)
  ]
  for p in procs:
    p.start()
  try:
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
      p.join(timeout=30)
      assert p.exitcode == 0
  finally:
    for p in procs:  # a hung or failed writer must not outlive the test
      if p.is_alive():
        p.kill()
        p.join()
  acked = {}
  total_stale = 0
  for proc, proc_acked, stale in results:
    assert len(proc_acked) == 500
    total_stale += stale
    for sid, eid in proc_acked:
      acked.setdefault(sid, []).append(eid)

  async def check():
    svc = RedisSessionService(redis_server.url)
    for sid in sessions:
      g = await svc.get_session(app_name=APP, user_id="u", session_id=sid)
      ids = [e.id for e in g.events]
      assert len(ids) == len(set(ids)) == len(acked[sid])
      assert set(ids) == set(acked[sid])
      assert g._storage_update_marker == str(len(ids))
      for proc in range(8):
        # Each process's own events are stored in the order it wrote them.
        mine = [int(i.split("-")[1]) for i in ids if i.startswith(f"p{proc}-")]
        assert mine == sorted(mine)
        if mine:
          assert g.state[f"p{proc}"] == mine[-1]
    await svc.close()

  asyncio.run(check())
  assert sum(len(v) for v in acked.values()) == 4000
  assert total_stale > 0, "writers never raced; the test proves nothing"


async def test_two_racing_writers_get_stale_or_serialise(redis_url):
  a = RedisSessionService(redis_url)
  b = RedisSessionService(redis_url)  # its own connection
  await a.create_session(app_name=APP, user_id="u", session_id="s")
  ok, stale = [], 0
  for rnd in range(150):
    sa = await a.get_session(app_name=APP, user_id="u", session_id="s",
                             config=GetSessionConfig(num_recent_events=0))
    sb = await b.get_session(app_name=APP, user_id="u", session_id="s",
                             config=GetSessionConfig(num_recent_events=0))
    results = await asyncio.gather(
        a.append_event(sa, ev(f"a{rnd}", delta={"last": f"a{rnd}"})),
        b.append_event(sb, ev(f"b{rnd}", delta={"last": f"b{rnd}"})),
        return_exceptions=True,
    )
    for r in results:
      if isinstance(r, StaleSessionError):
        stale += 1
      elif isinstance(r, Event):
        ok.append(r.id)
      else:
        raise r
    assert sum(isinstance(r, Event) for r in results) == 1
  g = await a.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in g.events] == ok
  assert g.state["last"] == ok[-1]
  assert stale == 150
  await a.close()
  await b.close()


# --------------------------------------------------------------------------
# Faults: kill -9 with appendfsync always, dropped connections.


def fast_fail_client(url: str) -> redis_asyncio.Redis:
  """No reconnect loop inside redis-py, so the store's error surfaces."""
  return redis_asyncio.Redis.from_url(
      url, retry=Retry(NoBackoff(), 0), socket_timeout=5,
      socket_connect_timeout=1,
  )


async def test_kill9_mid_run_loses_no_acknowledged_event(aof_redis_server):
  server: RedisServer = aof_redis_server
  client = fast_fail_client(server.url)
  svc = RedisSessionService(client)
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
  acked: list[str] = []
  errors: list[str] = []
  first_pid = server.pid
  reached = threading.Event()  # 120 events acknowledged (or the writer gave up)

  def killer():
    if reached.wait(timeout=120):
      server.kill9()
      time.sleep(0.2)  # down for a moment: the writer sees errors and retries
      server.start()

  thread = threading.Thread(target=killer)
  thread.start()
  try:
    for i in range(300):
      e = ev(f"e{i}", delta={"n": i, "user:n": i})
      deadline = time.monotonic() + 20
      while True:
        try:
          await svc.append_event(s, e)
          acked.append(e.id)
          break
        except StoreUnavailableError as err:
          assert "session:s" in str(err) and "retrying" in str(err)
          errors.append(str(err))
          assert time.monotonic() < deadline, "Redis never came back"
          await asyncio.sleep(0.02)
      if len(acked) == 120:
        reached.set()
  finally:
    reached.set()
    thread.join()
  assert server.pid != first_pid and errors, "Redis was not killed mid-run"
  # Read back through a fresh client after the restart.
  reader = RedisSessionService(server.url)
  g = await reader.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in g.events] == acked == [f"e{i}" for i in range(300)]
  assert g._storage_update_marker == "300"
  assert g.state == {"n": 299, "user:n": 299}
  await reader.close()
  await client.aclose()


async def test_kill9_never_leaves_a_half_written_event(aof_redis_server):
  server: RedisServer = aof_redis_server
  big = "y" * 300_000  # large AOF records: a kill can cut one in half
  for round_ in range(3):
    client = fast_fail_client(server.url)
    svc = RedisSessionService(client)
    sid = f"s{round_}"
    s = await svc.create_session(app_name=APP, user_id="u", session_id=sid)
    acked = 0
    reached = threading.Event()  # a few events in: kill while appends are in flight

    def killer():
      reached.wait(timeout=120)
      server.kill9()

    thread = threading.Thread(target=killer)
    thread.start()
    try:
      for i in range(10_000):
        await svc.append_event(
            s, ev(f"{sid}-{i}", text=big, delta={"n": i, "user:last": i}))
        acked += 1
        if acked == 3 + 2 * round_:
          reached.set()
    except StoreUnavailableError:
      pass
    finally:
      reached.set()
      thread.join()
    await client.aclose()
    server.start()
    r = sync_client(server.url)
    meta = r.hgetall(f"aether:{{app:u}}:session:{sid}".encode())
    stored = r.xlen(f"aether:{{app:u}}:session:{sid}:events".encode())
    ids = r.hlen(f"aether:{{app:u}}:session:{sid}:event_ids".encode())
    # An event is all there (entry, id, version, state) or not at all.
    assert stored in (acked, acked + 1) and acked > 0
    assert ids == stored == int(meta[b"ver"])
    assert int(meta[b"s:n"]) == stored - 1
    r.close()


async def test_a_server_that_stops_answering_is_a_clear_error_not_a_hang(aof_redis_server):
  """A paused server (a partition, a frozen primary) held append_event for ~40 s, or for good."""
  server: RedisServer = aof_redis_server
  svc = RedisSessionService(server.url)  # the defaults: StoreUnavailableError after SOCKET_TIMEOUT_S
  quick = RedisSessionService(server.url + "?socket_timeout=0.5")  # the URL's own setting wins
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
  server.pause()
  try:
    with pytest.raises(StoreUnavailableError, match="Timeout reading") as err:
      # 20 s: 4x the timeout. Retrying each timed-out reply 6 more times held the caller ~40 s
      # (and with redis-py before 8, which waits for a reply forever, for good).
      await asyncio.wait_for(svc.append_event(s, ev("e1")), timeout=20)
    assert "may or may not have been stored" in str(err.value)
    with pytest.raises(StoreUnavailableError, match="Timeout reading"):
      await asyncio.wait_for(quick.get_session(app_name=APP, user_id="u", session_id="s"), timeout=60)
  finally:
    server.resume()
  # As the error says: the appends may have run once the server woke; resending each is safe.
  await svc.append_event(s, ev("e1"))
  fresh = await svc.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in fresh.events if e.id == "e1"] == ["e1"]
  await svc.close()
  await quick.close()


async def test_connection_drop_is_a_clear_error_and_writes_nothing(
    aof_redis_server,
):
  server: RedisServer = aof_redis_server
  client = fast_fail_client(server.url)
  svc = RedisSessionService(client)
  s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
  await svc.append_event(s, ev("e0", delta={"k": 0}))
  before = (len(s.events), dict(s.state), s._storage_update_marker)
  server.kill9()
  e1 = ev("e1", delta={"k": 1, "user:x": 1})
  with pytest.raises(StoreUnavailableError) as info:
    await svc.append_event(s, e1)
  msg = str(info.value)
  assert "append_event" in msg and "aether:{app:u}:session:s" in msg
  assert isinstance(info.value, ConnectionError)
  assert (len(s.events), dict(s.state), s._storage_update_marker) == before
  with pytest.raises(StoreUnavailableError, match="get_session"):
    await svc.get_session(app_name=APP, user_id="u", session_id="s")
  server.start()
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in g.events] == ["e0"] and g.state == {"k": 0}
  await svc.append_event(s, e1)  # the retry succeeds exactly once
  g = await svc.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in g.events] == ["e0", "e1"]
  assert g.state == {"k": 1, "user:x": 1}
  await client.aclose()

  # With redis-py's default retries a killed connection is re-opened.
  svc2 = RedisSessionService(server.url)
  g = await svc2.get_session(app_name=APP, user_id="u", session_id="s")
  r = sync_client(server.url)
  assert r.client_kill_filter(_type="normal", skipme=True) >= 1
  await svc2.append_event(g, ev("e2"))
  g = await svc2.get_session(app_name=APP, user_id="u", session_id="s")
  assert [e.id for e in g.events] == ["e0", "e1", "e2"]
  r.close()
  await svc2.close()


async def test_a_url_scheme_in_capitals_is_accepted(redis_url):
  """URL schemes are case-insensitive (RFC 3986); ``Redis://`` was refused."""
  svc = RedisSessionService(redis_url.replace("redis://", "Redis://", 1))
  try:
    s = await svc.create_session(app_name="a", user_id="u")
    assert (await svc.get_session(app_name="a", user_id="u", session_id=s.id)).id == s.id
  finally:
    await svc.close()
