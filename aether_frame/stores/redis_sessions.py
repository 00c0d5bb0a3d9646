"""ADK session service on Redis for multi-worker deployments.

Any worker can pick up a session mid-run because all of it lives in Redis,
keyed by app, user and session id. Appends are O(1) (a stream entry plus a few
hash fields) instead of rewriting the whole session, and each append is one
Lua script, so an event, its state deltas and the version bump land together
or not at all. Behaviour mirrors ADK's SqliteSessionService.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from typing import Any
from typing import AsyncIterator
from typing import Optional

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.base_session_service import ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic import ValidationError
from typing_extensions import override

from . import _redis_util as ru
from ._session_lua import SOURCES
from .errors import CorruptDataError
from .errors import DuplicateEventIdError

logger = logging.getLogger(__name__)

_STATE = "s:"  # field prefix of session-scoped state in the session hash
# With a TTL, each create adds one index entry and re-checks this many of the
# oldest, so ids of expired sessions drain without any list_sessions call.
_PRUNE_OLDEST = 2
_RETRY_HINT = (
    "The event may or may not have been stored; retrying append_event with"
    " the same session and event is safe (appends are idempotent per event"
    " id)."
)


class _Keys:
  """All keys of one session; the user hash tag keeps them in one slot."""

  def __init__(self, prefix: str, app_name: str, user_id: str, sid: str):
    user = ru.user_tag(prefix, app_name, user_id)
    app = ru.app_tag(prefix, app_name)
    self.meta = f"{user}:session:{ru.enc(sid)}"
    self.events = f"{self.meta}:events"
    self.event_ids = f"{self.meta}:event_ids"
    self.user_state = f"{user}:user_state"
    self.user_index = f"{user}:sessions"
    self.app_state = f"{app}:app_state"
    self.app_users = f"{app}:users"

  def session_keys(self) -> list[str]:
    """Keys deleted with the session."""
    return [self.meta, self.events, self.event_ids]

  def script_keys(self, with_app: bool) -> list[str]:
    keys = [*self.session_keys(), self.user_state, self.user_index]
    if with_app:
      keys += [self.app_state, self.app_users]
    return keys


def _dump(value: Any) -> str:
  text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    # A lone surrogate (e.g. from os.fsdecode) has no UTF-8 form; \u escapes
    # keep it, as SQLite's json.dumps does.
    text = json.dumps(value, separators=(",", ":"))
  return text


def _load_state(
    flat: list[Any], key: str, strip: str = ""
) -> dict[str, Any]:
  """Decodes a hash of JSON values; bad JSON names the key and field."""
  state: dict[str, Any] = {}
  for field, raw in ru.pairs(flat):
    if strip:
      if not field.startswith(strip):
        continue
      field = field[len(strip) :]
    try:
      state[field] = json.loads(raw)
    except (ValueError, TypeError) as e:
      raise CorruptDataError(key, f"field {field!r} is not JSON: {e}") from e
  return state


def _merge(
    app_state: dict[str, Any],
    user_state: dict[str, Any],
    session_state: dict[str, Any],
) -> dict[str, Any]:
  """Same precedence as ADK's services: app:, then user: over session keys."""
  merged = dict(session_state)
  for key, value in app_state.items():
    merged[State.APP_PREFIX + key] = value
  for key, value in user_state.items():
    merged[State.USER_PREFIX + key] = value
  return merged


MAX_EVENT_TIMESTAMP = 9e12
"""Seconds (the year ~287,000): as stream-id milliseconds, exact in the scripts' doubles (< 2**53)."""


class _SessionTurns:
  """Appends to one session from this process take turns, as in DatabaseSessionService.

  ADK's live mode appends from two tasks at once to the same ``Session``
  object (user content while model events stream in). Each append sends the
  copy's version marker and advances it only when Redis answers, so without
  turns every append after the first was refused as stale. One lock per
  session and event loop (an ``asyncio.Lock`` belongs to one loop, and ADK's
  sync ``Runner.run`` starts a loop per call), dropped when nobody holds it.
  """

  def __init__(self) -> None:
    self._locks: dict[tuple, list] = {}  # key -> [lock, holders and waiters]

  @contextlib.asynccontextmanager
  async def hold(self, session_key: tuple[str, str, str]) -> AsyncIterator[None]:
    key = (id(asyncio.get_running_loop()), *session_key)
    entry = self._locks.get(key)
    if entry is None:
      entry = self._locks[key] = [asyncio.Lock(), 0]
    entry[1] += 1
    try:
      async with entry[0]:
        yield
    finally:
      entry[1] -= 1
      if entry[1] == 0:
        del self._locks[key]


class RedisSessionService(ru.RedisStoreBase, BaseSessionService):
  """A BaseSessionService whose sessions any worker can continue.

  Args:
    redis: a `redis://` / `rediss://` URL or a ready `redis.asyncio.Redis` /
      `redis.asyncio.RedisCluster` client. From a URL the service opens one
      client per event loop (ADK's sync Runner.run uses a loop per call) and
      `close()` closes it; a client passed in is never closed here.
    key_prefix: first segment of every key.
    ttl_seconds: None (default) keeps sessions forever; otherwise every key a
      write touches gets this TTL again.
    cluster: build a `RedisCluster` from the URL. With a client this is read
      from its type.
  """

  def __init__(
      self,
      redis: Any,
      *,
      key_prefix: str = ru.DEFAULT_PREFIX,
      ttl_seconds: float | None = None,
      cluster: bool | None = None,
  ) -> None:
    self._conn = ru.Connection(redis, SOURCES, cluster=cluster)
    self._cluster = self._conn.cluster
    self._prefix = ru.check_prefix(key_prefix)
    self._ttl = ru.ttl_ms(ttl_seconds)
    self._turns = _SessionTurns()

  def _keys(self, app_name: str, user_id: str, session_id: str) -> _Keys:
    return _Keys(self._prefix, app_name, user_id, session_id)

  @override
  async def create_session(
      self,
      *,
      app_name: str,
      user_id: str,
      state: Optional[dict[str, Any]] = None,
      session_id: Optional[str] = None,
  ) -> Session:
    session_id = session_id.strip() if session_id else None
    session_id = session_id or platform_uuid.new_uuid()
    keys = self._keys(app_name, user_id, session_id)
    deltas = _session_util.extract_json_safe_state_delta(state or {})
    now = repr(float(platform_time.get_time()))
    with_app = not self._cluster
    if self._cluster:
      # Index the user first so list_sessions(user_id=None) finds the session.
      await self._write_app(keys, user_id, {})
    if self._ttl != "0":
      # Before the create: if this fails, nothing was created and a retry is
      # safe.
      await self._prune_oldest(app_name, user_id)
    args = [
        session_id,
        app_name,
        user_id,
        now,
        platform_uuid.new_uuid(),  # nonce: recognises our own retried create
        self._ttl,
        *self._block(deltas["session"], _STATE),
        *self._block(deltas["user"]),
        *self._block(deltas["app"] if with_app else {}),
    ]
    res = await self._scripts.run(
        "create",
        keys.script_keys(with_app),
        args,
        operation="create_session",
    )
    if ru.text(res[0]) == "exists":
      raise AlreadyExistsError(f"Session with id {session_id} already exists.")
    ver, mtime, user_flat, app_flat = ru.text(res[1]), res[2], res[3], res[4]
    if self._cluster:
      # The user again, now that the session is indexed: a concurrent
      # _prune_users may have taken it out after the first add.
      app_flat = await self._write_app(keys, user_id, deltas["app"])
    session = Session(
        app_name=app_name,
        user_id=user_id,
        id=session_id,
        state=_merge(
            _load_state(app_flat, keys.app_state),
            _load_state(user_flat, keys.user_state),
            deltas["session"],
        ),
        events=[],
        last_update_time=float(ru.text(mtime)),
    )
    session._storage_update_marker = ver
    return session

  @override
  async def get_session(
      self,
      *,
      app_name: str,
      user_id: str,
      session_id: str,
      config: Optional[GetSessionConfig] = None,
  ) -> Optional[Session]:
    session_id = session_id.strip() if session_id else session_id
    if not session_id:
      return None
    keys = self._keys(app_name, user_id, session_id)
    k = "" if not config or config.num_recent_events is None else str(
        config.num_recent_events
    )
    after = ""
    if config and config.after_timestamp is not None:
      cutoff = float(config.after_timestamp)
      if math.isnan(cutoff):
        raise ValueError("get_session: config.after_timestamp is NaN")
      # A stream id holds milliseconds; past MAX_EVENT_TIMESTAMP (which no stored
      # event exceeds) the id would not parse: the answer is the same, no events.
      after = repr(min(cutoff, MAX_EVENT_TIMESTAMP))
    with_app = not self._cluster
    res = await self._scripts.run(
        "get", keys.script_keys(with_app), [k, after], operation="get_session"
    )
    if ru.text(res[0]) == "missing":
      return None
    meta_flat, event_rows, user_flat, app_flat = res[1], res[2], res[3], res[4]
    if self._cluster:
      app_flat = ru.hash_flat(await ru.guarded(
          "get_session", keys.app_state, self._client.hgetall(keys.app_state)
      ))
    meta = dict(ru.pairs(meta_flat))
    self._check_meta(meta, keys, app_name, user_id, session_id)
    events = []
    for raw in reversed(event_rows):
      try:
        events.append(Event.model_validate_json(raw))
      except ValidationError as e:
        raise CorruptDataError(
            keys.events, f"an event does not parse as an ADK Event: {e}"
        ) from e
    session = Session(
        app_name=app_name,
        user_id=user_id,
        id=session_id,
        state=_merge(
            _load_state(app_flat, keys.app_state),
            _load_state(user_flat, keys.user_state),
            _load_state(meta_flat, keys.meta, strip=_STATE),
        ),
        events=events,
        last_update_time=float(ru.text(meta["mtime"])),
    )
    session._storage_update_marker = ru.text(meta["ver"])
    return session

  @override
  async def list_sessions(
      self, *, app_name: str, user_id: Optional[str] = None
  ) -> ListSessionsResponse:
    app_key = ru.app_tag(self._prefix, app_name) + ":app_state"
    if user_id is not None:
      user_ids = [user_id]
    else:
      users_key = ru.app_tag(self._prefix, app_name) + ":users"
      members = await ru.guarded(
          "list_sessions", users_key, self._client.smembers(users_key)
      )
      user_ids = sorted(ru.text(u) for u in members)
    app_flat = await ru.guarded(
        "list_sessions", app_key, self._client.hgetall(app_key)
    )
    app_state = _load_state(ru.hash_flat(app_flat), app_key)
    sessions: list[Session] = []
    empty = []
    for uid in user_ids:
      found = await self._list_user(app_name, uid, app_state)
      sessions.extend(found)
      if not found:
        empty.append(uid)
    if user_id is None and empty:
      await self._prune_users(app_name, empty)
    sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
    return ListSessionsResponse(sessions=sessions)

  async def _list_user(
      self, app_name: str, user_id: str, app_state: dict[str, Any]
  ) -> list[Session]:
    """Sessions of one user: index, then every session hash in one pipeline."""
    stub = self._keys(app_name, user_id, "")
    ids = await ru.guarded(
        "list_sessions",
        stub.user_index,
        self._client.zrange(stub.user_index, 0, -1),
    )
    ids = [ru.text(i) for i in ids]
    pipe = self._client.pipeline(transaction=False)
    pipe.hgetall(stub.user_state)
    all_keys = [self._keys(app_name, user_id, sid) for sid in ids]
    for keys in all_keys:
      pipe.hgetall(keys.meta)
    replies = await ru.guarded("list_sessions", stub.user_index, pipe.execute())
    user_state = _load_state(ru.hash_flat(replies[0]), stub.user_state)
    gone = [
        sid for sid, meta_map in zip(ids, replies[1:]) if not meta_map
    ]
    if gone:
      await self._prune(app_name, user_id, gone)
    out = []
    for sid, keys, meta_map in zip(ids, all_keys, replies[1:]):
      if not meta_map:
        continue  # expired, or deleted since the index was read
      meta_flat = ru.hash_flat(meta_map)
      meta = dict(ru.pairs(meta_flat))
      self._check_meta(meta, keys, app_name, user_id, sid)
      session = Session(
          app_name=app_name,
          user_id=user_id,
          id=sid,
          state=_merge(
              app_state,
              user_state,
              _load_state(meta_flat, keys.meta, strip=_STATE),
          ),
          events=[],
          last_update_time=float(ru.text(meta["mtime"])),
      )
      session._storage_update_marker = ru.text(meta["ver"])
      out.append(session)
    return out

  @override
  async def delete_session(
      self, *, app_name: str, user_id: str, session_id: str
  ) -> None:
    session_id = session_id.strip() if session_id else session_id
    keys = self._keys(app_name, user_id, session_id)
    # The last session of a user takes the user out of the app's set (in
    # Cluster mode that set is in another slot: list_sessions prunes it).
    await self._scripts.run(
        "delete",
        keys.script_keys(not self._cluster),
        [session_id, user_id],
        operation="delete_session",
    )

  @override
  async def get_user_state(
      self, *, app_name: str, user_id: str
  ) -> dict[str, Any]:
    key = self._keys(app_name, user_id, "").user_state
    flat = await ru.guarded(
        "get_user_state", key, self._client.hgetall(key)
    )
    return _load_state(ru.hash_flat(flat), key)

  @override
  async def append_event(self, session: Session, event: Event) -> Event:
    if event.partial:
      return event
    async with self._turns.hold((session.app_name, session.user_id, session.id)):
      return await self._append(session, event)

  async def _append(self, session: Session, event: Event) -> Event:
    if not (math.isfinite(event.timestamp) and event.timestamp <= MAX_EVENT_TIMESTAMP):
      raise ValueError(
          f"append_event: event {event.id!r} has timestamp {event.timestamp!r}; a Redis session"
          f" takes finite timestamps up to {MAX_EVENT_TIMESTAMP:.0f} s (nothing was written)")
    # Temp state reaches the caller's session (and is trimmed from the event)
    # only once the append succeeds, as in InMemorySessionService: a refused
    # append leaves both untouched.
    stored = event
    deltas: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    if event.actions and event.actions.state_delta:
      delta = event.actions.state_delta
      deltas = _session_util.extract_json_safe_state_delta(delta)
      kept = {k: v for k, v in delta.items()
              if not k.startswith(State.TEMP_PREFIX)}
      if len(kept) != len(delta):
        stored = event.model_copy(update={
            "actions": event.actions.model_copy(update={"state_delta": kept})
        })
    keys = self._keys(session.app_name, session.user_id, session.id)
    with_app = not self._cluster
    args = [
        session.id,
        event.id or "",
        stored.model_dump_json(exclude_none=True),
        repr(float(event.timestamp)),
        session._storage_update_marker or "",
        repr(float(session.last_update_time)),
        self._ttl,
        *self._block(deltas["session"], _STATE),
        *self._block(deltas["user"]),
        *self._block(deltas["app"] if with_app else {}),
    ]
    res = await self._scripts.run(
        "append",
        keys.script_keys(with_app),
        args,
        operation="append_event",
        hint=_RETRY_HINT,
    )
    status = ru.text(res[0])
    if status == "missing":
      raise SessionNotFoundError(f"Session {session.id} not found.")
    if status == "stale":
      raise StaleSessionError(
          f"Session {session.id} at {keys.meta!r} is at version"
          f" {ru.text(res[1])} in storage but this copy is at version"
          f" {session._storage_update_marker} (last_update_time"
          f" {session.last_update_time}); another writer appended first"
          " (or the session was deleted and re-created)."
          " Reload the session with get_session and retry."
      )
    if status == "dupid":
      raise DuplicateEventIdError(
          f"Event id {event.id!r} is already stored in session {session.id}"
          f" ({keys.event_ids!r}) with different content.",
          key=keys.event_ids,
      )
    if status == "dup" and ru.text(res[3]) == "seen":
      # This copy already has the event (maybe filtered out of its events):
      # nothing to do, and in Cluster mode its app: delta must not be written
      # again over newer values.
      return event
    if self._cluster and (deltas["app"] or self._ttl != "0"):
      # The session script cannot reach the app's slot, so app keys get
      # their TTL refreshed here, or they expire under an active session.
      await self._write_app(keys, session.user_id, deltas["app"])
    session.last_update_time = event.timestamp
    session._storage_update_marker = ru.text(res[1])
    if status == "dup" and any(e.id == event.id for e in session.events):
      return event
    self._apply_temp_state(session, event)
    event = self._trim_temp_delta_state(event)
    return self._commit_event_to_session(session, event)

  async def _prune_oldest(self, app_name: str, user_id: str) -> None:
    """Drops the oldest index entries if their sessions expired."""
    index = self._keys(app_name, user_id, "").user_index
    ids = await ru.guarded(
        "create_session",
        index,
        self._client.zrange(index, 0, _PRUNE_OLDEST - 1),
    )
    if ids:
      await self._prune(app_name, user_id, [ru.text(i) for i in ids])

  async def _prune_users(self, app_name: str, user_ids: list[str]) -> int:
    """Takes users with no session left out of the app's user set.

    The set is only ever added to by creates, while sessions expire one key
    at a time; without this it kept every user the app ever had, each read
    again by every list_sessions. Returns how many were taken out.
    """
    app = self._keys(app_name, "", "")
    indexes = [self._keys(app_name, u, "").user_index for u in user_ids]
    if not self._cluster:
      return int(await self._scripts.run(
          "prune_users", [app.app_users, *indexes], user_ids,
          operation="app user set cleanup",
      ))
    # Cluster: the set and each index sit in different slots, so no script
    # sees both. Take the user out, then look again: a create adds its user
    # after its session is indexed (see create_session), so either that add
    # comes after this removal or this second look sees the index.
    removed = 0
    for uid, index in zip(user_ids, indexes):
      op = "app user set cleanup"
      if await ru.guarded(op, index, self._client.exists(index)):
        continue
      n = await ru.guarded(op, app.app_users, self._client.srem(app.app_users, uid))
      if await ru.guarded(op, index, self._client.exists(index)):
        await self._write_app(self._keys(app_name, uid, ""), uid, {})
        continue
      removed += n
    return removed

  async def _prune(self, app_name: str, user_id: str, ids: list[str]) -> None:
    """Expiry removes a session's keys but not its id in the user index;
    the script re-checks each session, so a re-created one keeps its id."""
    index = self._keys(app_name, user_id, "").user_index
    metas = [self._keys(app_name, user_id, sid).meta for sid in ids]
    await self._scripts.run(
        "prune", [index, *metas], ids, operation="session index cleanup"
    )

  async def _write_app(
      self, keys: _Keys, user_id: str | None, app_delta: dict[str, Any]
  ) -> list[Any]:
    """Cluster mode: app-wide keys sit in another slot, so they are written
    by a second script (not atomic with the session write). `user_id` None
    adds no user ("" is a user id like any other)."""
    return await self._scripts.run(
        "app_write",
        [keys.app_state, keys.app_users],
        [
            self._ttl,
            "0" if user_id is None else "1",
            user_id or "",
            *self._block(app_delta),
        ],
        operation="app state write",
    )

  @staticmethod
  def _block(delta: dict[str, Any], prefix: str = "") -> list[str]:
    return ru.flatten((prefix + k, _dump(v)) for k, v in delta.items())

  @staticmethod
  def _check_meta(
      meta: dict[str, Any],
      keys: _Keys,
      app_name: str,
      user_id: str,
      session_id: str,
  ) -> None:
    """A session hash must carry its identity and version; anything else is
    corruption, not absence."""
    for field in ("ver", "mtime", "app", "user", "id"):
      if field not in meta:
        raise CorruptDataError(keys.meta, f"missing field {field!r}")
    try:
      float(ru.text(meta["mtime"]))
      int(ru.text(meta["ver"]))
    except ValueError as e:
      raise CorruptDataError(
          keys.meta, f"field mtime or ver is not a number: {e}"
      ) from e
    stored = (ru.text(meta["app"]), ru.text(meta["user"]), ru.text(meta["id"]))
    if stored != (app_name, user_id, session_id):
      raise CorruptDataError(
          keys.meta,
          f"hash belongs to {stored}, not {(app_name, user_id, session_id)}",
      )
