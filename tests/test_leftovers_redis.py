"""Leftovers of the Redis session service: the app's user set must not keep users with no session.

A real redis-server (a throwaway one on a free port); TTLs run out for real,
waited for with a bound.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from aether_frame.stores.redis_sessions import RedisSessionService
from tests.fixtures.redis_server import cluster_redis_server, redis_server, redis_url  # noqa: F401

APP = "app"
USERS = b"aether:{app}:users"


async def eventually(condition, what: str, timeout: float = 10.0) -> None:
  """Polls ``condition`` (a TTL running out) with a bound, instead of sleeping a guess."""
  deadline = time.monotonic() + timeout
  while not condition():
    assert time.monotonic() < deadline, what
    await asyncio.sleep(0.005)


def _expire_user(r: redis.Redis, user: str) -> list[bytes]:
  """Runs out every key of ``user`` now (the service's TTL would, later)."""
  keys = r.keys(f"aether:{{app:{user}}}:*")
  assert keys
  for key in keys:
    r.pexpire(key, 1)
  return keys


async def test_users_whose_sessions_all_expired_leave_the_app_user_set(redis_url):  # noqa: F811
  r = redis.Redis.from_url(redis_url)
  svc = RedisSessionService(redis_url, ttl_seconds=100)
  for user in ("gone1", "gone2", "live"):
    await svc.create_session(app_name=APP, user_id=user, session_id="s1")
  await svc.create_session(app_name=APP, user_id="gone2", session_id="s2")
  assert r.smembers(USERS) == {b"gone1", b"gone2", b"live"}
  for user in ("gone1", "gone2"):
    keys = _expire_user(r, user)
    await eventually(lambda: not r.exists(*keys), f"{user}'s 1 ms TTL never ran out")
  listed = await svc.list_sessions(app_name=APP)
  assert [(s.user_id, s.id) for s in listed.sessions] == [("live", "s1")]
  assert r.smembers(USERS) == {b"live"}  # was: the ghosts stayed, listed (and read) on every call, forever
  # A ghost that comes back is listed again.
  await svc.create_session(app_name=APP, user_id="gone1", session_id="s3")
  listed = await svc.list_sessions(app_name=APP)
  assert sorted((s.user_id, s.id) for s in listed.sessions) == [("gone1", "s3"), ("live", "s1")]
  assert r.smembers(USERS) == {b"gone1", b"live"}
  await svc.close()
  r.close()


async def test_a_user_whose_expired_sessions_are_still_indexed_leaves_too(redis_url):  # noqa: F811
  # Only the session keys run out; the user's index still names them until a read prunes it.
  r = redis.Redis.from_url(redis_url)
  svc = RedisSessionService(redis_url, ttl_seconds=100)
  await svc.create_session(app_name=APP, user_id="u", session_id="old")
  await svc.create_session(app_name=APP, user_id="keep", session_id="k")
  keys = r.keys("aether:{app:u}:session:*")
  for key in keys:
    r.pexpire(key, 1)
  await eventually(lambda: not r.exists(*keys), "a 1 ms TTL never ran out")
  assert r.zrange(b"aether:{app:u}:sessions", 0, -1) == [b"old"]
  listed = await svc.list_sessions(app_name=APP)
  assert [s.user_id for s in listed.sessions] == ["keep"]
  assert r.smembers(USERS) == {b"keep"}
  assert not r.exists(b"aether:{app:u}:sessions")
  await svc.close()
  r.close()


async def test_deleting_a_users_last_session_takes_the_user_out(redis_url):  # noqa: F811
  r = redis.Redis.from_url(redis_url)
  svc = RedisSessionService(redis_url)  # no TTL: only deletes end sessions
  await svc.create_session(app_name=APP, user_id="u", session_id="a")
  await svc.create_session(app_name=APP, user_id="u", session_id="b")
  await svc.create_session(app_name=APP, user_id="v", session_id="c")
  await svc.delete_session(app_name=APP, user_id="u", session_id="a")
  assert r.smembers(USERS) == {b"u", b"v"}  # one session of u is left
  await svc.delete_session(app_name=APP, user_id="u", session_id="b")
  assert r.smembers(USERS) == {b"v"}
  listed = await svc.list_sessions(app_name=APP)
  assert [(s.user_id, s.id) for s in listed.sessions] == [("v", "c")]
  await svc.close()
  r.close()


async def test_a_live_user_is_never_pruned(redis_url):  # noqa: F811
  # The prune re-checks inside the script: a user with any session stays,
  # even when asked to prune it (a create that landed after the read).
  r = redis.Redis.from_url(redis_url)
  svc = RedisSessionService(redis_url, ttl_seconds=100)
  await svc.create_session(app_name=APP, user_id="u", session_id="a")
  assert await svc._prune_users(APP, ["u", "nobody"]) == 0
  assert r.smembers(USERS) == {b"u"}
  await svc.close()
  r.close()


async def test_cluster_mode_prunes_expired_users_across_slots(cluster_redis_server):  # noqa: F811
  cluster_redis_server.flush()
  client = RedisCluster(host="127.0.0.1", port=cluster_redis_server.port)
  r = redis.Redis(host="127.0.0.1", port=cluster_redis_server.port)
  svc = RedisSessionService(client, ttl_seconds=100)
  await svc.create_session(app_name=APP, user_id="gone", session_id="s1")
  await svc.create_session(app_name=APP, user_id="live", session_id="s2")
  keys = _expire_user(r, "gone")
  await eventually(lambda: not r.exists(*keys), "a 1 ms TTL never ran out")
  assert r.smembers(USERS) == {b"gone", b"live"}
  listed = await svc.list_sessions(app_name=APP)
  assert [s.user_id for s in listed.sessions] == ["live"]
  assert r.smembers(USERS) == {b"live"}
  assert await svc._prune_users(APP, ["live"]) == 0  # its index is there: kept
  assert r.smembers(USERS) == {b"live"}
  r.close()
  await client.aclose()
