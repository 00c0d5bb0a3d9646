"""Differential, stateful tests: RedisSessionService against ADK's own.

Hypothesis generates a sequence of session-service calls (creates with and
without ids and with app:/user:/temp: state, appends of all kinds of events,
filtered gets, lists, deletes, stale and re-delivered appends) and runs it on
ADK's InMemorySessionService and on ours; every observable result must match.

Reference rules where ADK's in-memory service is not the contract:
- Stale copies: InMemorySessionService has no stale detection, so a copy that
  missed an append (or outlived its session) is expected to get
  StaleSessionError, as from ADK's SqliteSessionService/DatabaseSessionService,
  and the call is not run on the in-memory reference.
- `after_timestamp` with out-of-order event timestamps: GetSessionConfig
  documents "events with timestamp >= the given time" (what SQLite and
  DatabaseSessionService do); the in-memory service instead cuts at the last
  older event. Events keep append order, as in memory.
- A different event under a stored event id: in memory stores both, SQLite
  raises; ours raises DuplicateEventIdError, so those are never generated here.
  An equal one is re-delivered: in memory (and in ours) an idempotent no-op.
  A re-delivery from the copy just before that append is a retry after a
  lost reply, which in memory cannot happen (test_redis_sessions covers it).

The fixed scenarios at the end pin each difference these tests found.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
from typing import Any
import uuid

from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from aether_frame.stores import RedisSessionService
from tests.fixtures.redis_server import cluster_redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_server  # noqa: F401

APPS = ["app", "app:2", "ä{p}"]
USERS = ["u1", "u2", "a:b", "", "ü %41"]
SIDS = ["s1", "s2", " s1 ", "s:{1}", "", None]  # ""/None: service picks
KEYS = ["k", "x", "s:k", "app:a", "app:b", "user:u", "user:v", "temp:t",
        "temp:u"]

_prefixes = itertools.count()

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=6,
)
state_st = st.dictionaries(st.sampled_from(KEYS), json_value, max_size=4)

content_st = st.one_of(
    st.none(),
    st.builds(lambda t: ("text", t), st.text(max_size=30)),
    st.just(("large", None)),
    st.builds(lambda a: ("call", a),
              st.dictionaries(st.text(max_size=4), json_value, max_size=3)),
    st.builds(lambda r: ("response", r),
              st.dictionaries(st.text(max_size=4), json_value, max_size=3)),
)

event_st = st.fixed_dictionaries({
    "content": content_st,
    "delta": state_st,
    "artifacts": st.dictionaries(st.sampled_from(["a.txt", "b/ü.png"]),
                                 st.integers(0, 5), max_size=2),
    "partial": st.sampled_from([None, None, False, True]),
    # Clock move before the event: forward, tie, or backwards.
    "ts": st.sampled_from([1.0, 1.0, 0.25, 0.0, -3.5]),
    "author": st.sampled_from(["user", "agent", "ägent"]),
    "escalate": st.sampled_from([None, True]),
    "extra": st.fixed_dictionaries({}, optional={
        "branch": st.sampled_from(["a", "a.b"]),
        "custom_metadata": st.dictionaries(st.text(max_size=3), json_value,
                                           max_size=2),
        "long_running_tool_ids": st.sets(st.sampled_from(["x", "y", "z"])),
        "error_code": st.just("E42"),
        "turn_complete": st.booleans(),
        "output": json_value,
    }),
})

# Mostly one app and user, so that copies of one session meet often.
app_st = st.sampled_from(["app"] * 4 + APPS)
user_st = st.sampled_from(["u1"] * 4 + USERS)
sid_st = st.sampled_from(["s1"] * 2 + SIDS)
handle_st = st.integers(0, 50)

_OPS = {
    "create": st.tuples(st.just("create"), app_st, user_st, sid_st, state_st),
    "append": st.tuples(st.just("append"), handle_st, event_st),
    "redeliver": st.tuples(st.just("redeliver"), handle_st,
                           st.integers(0, 50)),
    "get": st.tuples(st.just("get"), handle_st,
                     st.one_of(st.none(), st.integers(0, 4)),
                     st.one_of(st.none(), st.integers(-3, 6))),
    "list": st.tuples(st.just("list"), app_st,
                      st.one_of(st.none(), user_st)),
    "delete": st.tuples(st.just("delete"), handle_st),
    "get_raw": st.tuples(st.just("get_raw"), app_st, user_st,
                         sid_st.filter(bool)),
    "delete_raw": st.tuples(st.just("delete_raw"), app_st, user_st,
                            sid_st.filter(bool)),
    "user_state": st.tuples(st.just("user_state"), app_st, user_st),
}
# Weighted: appends and fresh copies dominate, deletes are rare.
op_st = st.sampled_from(
    ["create"] * 3 + ["append"] * 8 + ["redeliver"] * 2 + ["get"] * 3
    + ["list", "delete", "get_raw", "delete_raw", "user_state"]
).flatmap(_OPS.__getitem__)


def make_event(spec: dict[str, Any], eid: str, ts: float) -> Event:
  content = None
  kind, arg = spec["content"] or (None, None)
  if kind == "text":
    content = types.Content(role="user", parts=[types.Part(text=arg)])
  elif kind == "large":
    content = types.Content(
        role="model", parts=[types.Part(text="ü☃𝄞 " * 20_000)])
  elif kind == "call":
    content = types.Content(role="model", parts=[types.Part(
        function_call=types.FunctionCall(id="fc", name="tool", args=arg))])
  elif kind == "response":
    content = types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(
            id="fc", name="tool", response=arg))])
  return Event(
      id=eid,
      invocation_id="inv",
      author=spec["author"],
      content=content,
      partial=spec["partial"],
      timestamp=ts,
      actions=EventActions(
          state_delta=copy.deepcopy(spec["delta"]),
          artifact_delta=dict(spec["artifacts"]),
          escalate=spec["escalate"],
      ),
      **copy.deepcopy(spec["extra"]),
  )


def event_view(e: Event) -> dict[str, Any]:
  return e.model_dump()


def session_view(s) -> Any:
  if s is None:
    return None
  return (
      s.app_name,
      s.user_id,
      s.id,
      s.state,
      [event_view(e) for e in s.events],
      s.last_update_time,
  )


def outcome(fn):
  """Runs a call, returning ("ok", value) or ("raised", exception name)."""

  async def run():
    try:
      return ("ok", await fn())
    except Exception as e:  # noqa: BLE001 - the exception type is compared
      return ("raised", type(e).__name__)

  return run()


def named_id_provider(name: str):
  """An id provider whose first id is `name`: both services then give a
  created session the same id (ours also draws a nonce, hence the rest)."""
  first = [name]
  return lambda: first.pop() if first else str(uuid.uuid4())


class Model:
  """What the test knows independently of the services: session versions."""

  def __init__(self) -> None:
    self.version: dict[tuple[str, str, str], int] = {}
    self.incarnation: dict[tuple[str, str, str], int] = {}
    self.events: dict[tuple[str, str, str], list[Event]] = {}


async def run_ops(ours: RedisSessionService, ops: list[tuple[Any, ...]]):
  """Runs `ops` on a fresh InMemorySessionService and on `ours` (then closed)
  under one fake clock, asserting after every call that both agree."""
  clock = [1_700_000_000.0]
  platform_time.set_time_provider(lambda: clock[0])

  def move(by: float) -> None:
    # Each move but "tie" also adds 2**-10 s (exact in binary), so a reading
    # never comes back to an earlier one's value: a copy of a deleted session
    # that matches the re-created one in version *and* update time could not
    # be told apart (nor by DatabaseSessionService, whose marker is the time).
    clock[0] += by + (2**-10 if by else 0.0)
  ref = InMemorySessionService()
  # handles: (key, incarnation, version seen, ref copy, our copy)
  handles: list[list[Any]] = []
  model = Model()
  event_n = itertools.count()
  try:
    for step, op in enumerate(ops):
      where = f"step {step}: {op!r}"
      kind = op[0]
      if kind == "create":
        _, app, user, sid, state = op
        move(1.0)
        got = []
        for svc in (ref, ours):
          platform_uuid.set_id_provider(named_id_provider(f"gen-{step}"))
          try:
            got.append(await outcome(lambda: svc.create_session(
                app_name=app, user_id=user, session_id=sid,
                state=copy.deepcopy(state))))
          finally:
            platform_uuid.reset_id_provider()
        views = [(r[0], session_view(r[1]) if r[0] == "ok" else r[1])
                 for r in got]
        assert views[1] == views[0], where
        if got[0][0] == "ok":
          key = (app, user, got[0][1].id)
          model.incarnation[key] = model.incarnation.get(key, 0) + 1
          model.version[key] = 0
          model.events[key] = []
          handles.append([key, model.incarnation[key], 0, got[0][1],
                          got[1][1]])
      elif kind in ("append", "redeliver"):
        if not handles:
          continue
        h = handles[op[1] % len(handles)]
        key, inc, seen, rs, os_ = h
        if kind == "append":
          spec = op[2]
          move(spec["ts"])
          eid = f"e{next(event_n)}"
          evs = [make_event(spec, eid, clock[0]) for _ in range(2)]
        else:
          stored = model.events.get(key) or []
          if not stored:
            continue
          old = stored[op[2] % len(stored)]
          evs = [old.model_copy(deep=True) for _ in range(2)]
        exists = key in model.version
        current = (exists and model.incarnation[key] == inc
                   and model.version[key] == seen)
        if exists and not current and not evs[0].partial:
          if kind == "redeliver" and model.incarnation[key] == inc and (
              seen == model.version[key] - 1 == op[2] % len(stored)):
            continue  # a retry after a lost reply: see test_redis_sessions
          # Stale copy: SQLite's contract; the in-memory reference accepts it.
          before = copy.deepcopy(session_view(os_))
          res = await outcome(lambda: ours.append_event(os_, evs[1]))
          assert res == ("raised", StaleSessionError.__name__), where
          assert session_view(os_) == before, where
          continue
        r_res = await outcome(lambda: ref.append_event(rs, evs[0]))
        o_res = await outcome(lambda: ours.append_event(os_, evs[1]))
        r_view = (r_res[0], event_view(r_res[1]) if r_res[0] == "ok"
                  else r_res[1])
        o_view = (o_res[0], event_view(o_res[1]) if o_res[0] == "ok"
                  else o_res[1])
        assert o_view == r_view, where
        assert session_view(os_) == session_view(rs), where
        if (r_res[0] == "ok" and not evs[0].partial
            and kind == "append"):
          model.version[key] += 1
          model.events[key].append(evs[0].model_copy(deep=True))
          h[2] = model.version[key]
      elif kind == "get":
        if not handles:
          continue
        h = handles[op[1] % len(handles)]
        app, user, sid = h[0]
        k, after = op[2], op[3]
        config = None
        if k is not None or after is not None:
          config = GetSessionConfig(
              num_recent_events=k,
              after_timestamp=None if after is None else clock[0] - after)
        r = await ref.get_session(app_name=app, user_id=user, session_id=sid)
        o = await ours.get_session(
            app_name=app, user_id=user, session_id=sid, config=config)
        expected = session_view(r)
        if r is not None and config is not None:
          evs = list(r.events)
          if config.after_timestamp is not None:
            evs = [e for e in evs if e.timestamp >= config.after_timestamp]
          if k is not None:
            evs = evs[-k:] if k else []
          r = r.model_copy(update={"events": evs})
          expected = session_view(r)
        assert session_view(o) == expected, where
        if o is not None:
          # A fresh copy: current for appends.
          handles.append([h[0], model.incarnation[h[0]],
                          model.version[h[0]], r, o])
      elif kind == "list":
        _, app, user = op
        r = await ref.list_sessions(app_name=app, user_id=user)
        o = await ours.list_sessions(app_name=app, user_id=user)
        assert [session_view(s) for s in o.sessions] == [
            session_view(s) for s in r.sessions], where
        for rs, os_ in zip(r.sessions, o.sessions):
          key = (app, rs.user_id, rs.id)
          handles.append([key, model.incarnation[key], model.version[key],
                          rs, os_])
      elif kind == "delete":
        if not handles:
          continue
        key = handles[op[1] % len(handles)][0]
        app, user, sid = key
        for svc in (ref, ours):
          await svc.delete_session(app_name=app, user_id=user, session_id=sid)
        model.version.pop(key, None)
      elif kind == "get_raw":
        _, app, user, sid = op
        r = await ref.get_session(app_name=app, user_id=user, session_id=sid)
        o = await ours.get_session(app_name=app, user_id=user, session_id=sid)
        assert session_view(o) == session_view(r), where
      elif kind == "delete_raw":
        _, app, user, sid = op
        for svc in (ref, ours):
          await svc.delete_session(app_name=app, user_id=user, session_id=sid)
        model.version.pop((app, user, sid.strip()), None)
      elif kind == "user_state":
        _, app, user = op
        assert await ours.get_user_state(app_name=app, user_id=user) == (
            await ref.get_user_state(app_name=app, user_id=user)), where
  finally:
    platform_time.reset_time_provider()
    await ours.close()


_N = int(os.environ.get("DIFF_EXAMPLES", "300"))
ops_st = st.builds(lambda first, rest: [first, *rest], _OPS["create"],
                   st.lists(op_st, max_size=40))


@settings(max_examples=_N, deadline=None)
@given(ops=ops_st)
def test_random_operations_match_in_memory(redis_server, ops):  # noqa: F811
  prefix = f"diff{next(_prefixes)}"
  asyncio.run(run_ops(RedisSessionService(
      redis_server.url, key_prefix=prefix), ops))


@settings(max_examples=_N // 3, deadline=None)
@given(ops=ops_st)
def test_random_operations_match_in_memory_with_ttl(
    redis_server, ops  # noqa: F811
):
  prefix = f"diff{next(_prefixes)}"
  asyncio.run(run_ops(RedisSessionService(
      redis_server.url, key_prefix=prefix, ttl_seconds=3600), ops))


@settings(max_examples=_N // 3, deadline=None)
@given(ops=ops_st)
def test_random_operations_match_in_memory_on_cluster(
    cluster_redis_server, ops  # noqa: F811
):
  prefix = f"diff{next(_prefixes)}"
  asyncio.run(run_ops(RedisSessionService(
      cluster_redis_server.url, key_prefix=prefix, cluster=True), ops))


# --------------------------------------------------------------------------
# Each difference the properties found, as a fixed scenario run on an ADK
# reference service and on ours.


def ev(eid: str, ts: float, delta: dict[str, Any] | None = None) -> Event:
  return Event(
      id=eid,
      invocation_id="inv",
      author="user",
      timestamp=ts,
      content=types.Content(role="user", parts=[types.Part(text=eid)]),
      actions=EventActions(state_delta=dict(delta or {})),
  )


@pytest.fixture
async def services(request, redis_server):  # noqa: F811
  """make(kind) -> a fresh service: "memory", "sqlite", "redis", "cluster"."""
  made = []
  tmp_path = request.getfixturevalue("tmp_path")
  async def make(kind: str):
    if kind == "memory":
      svc = InMemorySessionService()
    elif kind == "sqlite":
      svc = SqliteSessionService(str(tmp_path / f"s{len(made)}.db"))
    elif kind == "cluster":
      server = request.getfixturevalue("cluster_redis_server")
      server.flush()
      svc = RedisSessionService(server.url, cluster=True)
    else:
      svc = RedisSessionService(
          redis_server.url, key_prefix=f"fixed{next(_prefixes)}")
    made.append(svc)
    return svc

  yield make
  for svc in made:
    if hasattr(svc, "close"):
      await svc.close()


async def sc_copy_of_recreated_session(svc) -> Any:
  old = await svc.create_session(app_name="app", user_id="u", session_id="s")
  await svc.delete_session(app_name="app", user_id="u", session_id="s")
  await svc.create_session(
      app_name="app", user_id="u", session_id="s", state={"k": "new"})
  res = await outcome(lambda: svc.append_event(old, ev("e1", 1e9, {"k": 1})))
  g = await svc.get_session(app_name="app", user_id="u", session_id="s")
  return res[0] == "ok" or res[1], g.state, [e.id for e in g.events]


async def test_copy_of_a_deleted_and_recreated_session_is_stale(services):
  # The version marker restarts at 0 on re-create, so the old copy's "0"
  # matched the new session: its append landed there. SQLite (timestamp
  # marker) and DatabaseSessionService refuse it.
  expected = await sc_copy_of_recreated_session(await services("sqlite"))
  assert expected == ("StaleSessionError", {"k": "new"}, [])
  assert await sc_copy_of_recreated_session(await services("redis")) == (
      expected)


async def sc_resend_older_event(svc) -> Any:
  s = await svc.create_session(app_name="app", user_id="u", session_id="s")
  e1 = ev("e1", 1001.0, {"k": 1})
  await svc.append_event(s, e1)
  await svc.append_event(s, ev("e2", 1002.0, {"k": 2}))
  reloaded = await svc.get_session(app_name="app", user_id="u", session_id="s")
  out = []
  for copy_ in (s, reloaded):
    res = await outcome(lambda: svc.append_event(copy_, copy.deepcopy(e1)))
    out.append((res[0] == "ok" or res[1], session_view(copy_)))
  g = await svc.get_session(app_name="app", user_id="u", session_id="s")
  return out, session_view(g)


async def test_current_copy_resending_an_older_event_is_acknowledged(
    services,
):
  # A current copy re-sending a stored event that is not the last one got
  # StaleSessionError, and so did every reloaded copy: "reload and retry"
  # could never succeed. In memory it is an idempotent no-op.
  expected = await sc_resend_older_event(await services("memory"))
  assert [o[0] for o in expected[0]] == [True, True]
  assert await sc_resend_older_event(await services("redis")) == expected


async def sc_resend_to_copy_without_events(svc) -> Any:
  s = await svc.create_session(app_name="app", user_id="u", session_id="s")
  e1 = ev("e1", 1001.0, {"n": [1]})
  await svc.append_event(s, e1)
  listed = (await svc.list_sessions(app_name="app", user_id="u")).sessions[0]
  recent = await svc.get_session(
      app_name="app", user_id="u", session_id="s",
      config=GetSessionConfig(num_recent_events=0))
  out = []
  for copy_ in (listed, recent):
    copy_.state["n"] = "edited locally"
    res = await outcome(lambda: svc.append_event(copy_, copy.deepcopy(e1)))
    out.append((res[0], session_view(copy_)))
  return out


async def test_redelivery_to_a_copy_with_filtered_events_adds_nothing(
    services,
):
  # A current copy without the event in its (filtered) events got it
  # appended, and its state delta applied, a second time.
  expected = await sc_resend_to_copy_without_events(await services("memory"))
  assert all(o[1][4] == [] for o in expected)
  assert await sc_resend_to_copy_without_events(
      await services("redis")) == expected


async def sc_refused_append(svc) -> Any:
  s = await svc.create_session(app_name="app", user_id="u", session_id="s")
  await svc.delete_session(app_name="app", user_id="u", session_id="s")
  e = ev("e1", 1001.0, {"temp:t": 1, "k": 2})
  res = await outcome(lambda: svc.append_event(s, e))
  return res, dict(s.state), dict(e.actions.state_delta)


async def test_refused_append_leaves_session_and_event_untouched(services):
  # temp: state reached the caller's session, and was trimmed from the
  # event, before the append was refused.
  expected = await sc_refused_append(await services("memory"))
  assert expected == (("raised", "SessionNotFoundError"), {},
                      {"temp:t": 1, "k": 2})
  assert await sc_refused_append(await services("redis")) == expected


async def sc_list_empty_user_id(svc) -> Any:
  await svc.create_session(app_name="app", user_id="", session_id="s")
  await svc.create_session(app_name="app", user_id="v", session_id="t")
  listed = await svc.list_sessions(app_name="app")
  return [(x.user_id, x.id) for x in listed.sessions]


async def test_cluster_lists_sessions_of_the_empty_user_id(services):
  # Cluster mode used user_id "" to mean "no user" when indexing app users.
  expected = await sc_list_empty_user_id(await services("memory"))
  assert expected == [("", "s"), ("v", "t")]
  assert await sc_list_empty_user_id(await services("cluster")) == expected


async def sc_resend_keeps_newer_app_state(svc) -> Any:
  s = await svc.create_session(app_name="app", user_id="u", session_id="s")
  t = await svc.create_session(app_name="app", user_id="v", session_id="t")
  e1 = ev("e1", 1001.0, {"app:mode": "old"})
  await svc.append_event(s, e1)
  await svc.append_event(t, ev("e2", 1002.0, {"app:mode": "new"}))
  await svc.append_event(s, copy.deepcopy(e1))
  g = await svc.get_session(app_name="app", user_id="u", session_id="s")
  return g.state, [e.id for e in g.events]


async def test_cluster_redelivery_does_not_rewrite_app_state(services):
  # Cluster mode re-wrote an acknowledged duplicate's app: delta over newer
  # values written by other sessions.
  expected = await sc_resend_keeps_newer_app_state(await services("memory"))
  assert expected == ({"app:mode": "new"}, ["e1"])
  assert await sc_resend_keeps_newer_app_state(
      await services("cluster")) == expected


async def sc_lone_surrogate_state(svc) -> Any:
  # e.g. os.fsdecode() of a non-UTF-8 file name
  state = {"path": "f\udcff.txt", "user:p": "\ud800", "app:p": ["\udc80"]}
  s = await svc.create_session(
      app_name="app", user_id="u", session_id="s", state=state)
  g = await svc.get_session(app_name="app", user_id="u", session_id="s")
  return s.state, g.state


async def test_lone_surrogates_in_state_values_round_trip(services):
  # json.dumps(ensure_ascii=False) left them raw, and UTF-8 cannot encode
  # them: create_session raised UnicodeEncodeError. SQLite escapes them.
  expected = await sc_lone_surrogate_state(await services("sqlite"))
  assert expected[1]["path"] == "f\udcff.txt"
  assert await sc_lone_surrogate_state(await services("memory")) == expected
  assert await sc_lone_surrogate_state(await services("redis")) == expected


async def sc_old_copy_resends_new_sessions_event(svc) -> Any:
  old = await svc.create_session(app_name="app", user_id="u", session_id="s")
  await svc.delete_session(app_name="app", user_id="u", session_id="s")
  new = await svc.create_session(
      app_name="app", user_id="u", session_id="s", state={"k": "new"})
  e1 = ev("e1", new.last_update_time + 1)
  await svc.append_event(new, e1)
  res = await outcome(lambda: svc.append_event(old, copy.deepcopy(e1)))
  return res[0] == "ok" or res[1], [e.id for e in old.events]


async def test_copy_of_a_deleted_session_is_not_caught_up_by_a_resend(
    services,
):
  # The lost-reply rule (marker just before the append) let a copy of the
  # deleted session re-send an event of the new one and become "current".
  expected = await sc_old_copy_resends_new_sessions_event(
      await services("sqlite"))
  assert expected == ("StaleSessionError", [])
  assert await sc_old_copy_resends_new_sessions_event(
      await services("redis")) == expected
