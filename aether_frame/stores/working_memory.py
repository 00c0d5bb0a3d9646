"""Step-scoped working memory: short-lived notes in Redis.

Agents jot notes while a step runs; they expire on their own (TTL) unless the
step completes and `checkpoint` moves them into long-term memory. Notes are
keyed by app, user, session and step, so any worker can read or checkpoint
them. A checkpoint writes to long-term memory first and deletes exactly the
notes it wrote afterwards, so a crash in between re-sends (idempotently by
note id) rather than loses notes.
"""

from __future__ import annotations

import threading
from typing import Any

from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.genai import types
from pydantic import ValidationError

from . import _redis_util as ru
from ._memory_lua import NOTE_SOURCES
from .errors import CorruptDataError
from .redis_memory import utc_timestamp

NOTE_KIND = "working_note"


class _NoteIds:
  """Note ids that sort in creation order among notes stamped alike.

  list_notes breaks timestamp ties by id, and ties are common (a fixed ADK
  time provider, coarse clocks); random ids would list such notes in random
  order. Time and uniqueness come from ADK's platform providers, so pinning
  them (ADK's hook for reproducible runs) pins the ids too. The tie counter
  belongs to one store and restarts at every new clock reading, so a new
  store (a new run) gives the ids the last one gave.
  """

  def __init__(self) -> None:
    self._lock = threading.Lock()
    self._last_ns = -1
    self._seq = 0

  def __call__(self, now: float) -> str:
    ns = max(int(now * 1_000_000_000), 0)
    with self._lock:
      self._seq = self._seq + 1 if ns == self._last_ns else 0
      self._last_ns = ns
      seq = self._seq
    return f"note-{ns:020d}-{seq:06d}-{platform_uuid.new_uuid()}"


def _note_time(note: MemoryEntry) -> float:
  return float(note.custom_metadata.get("event_timestamp", 0.0))


class WorkingMemory(ru.RedisStoreBase):
  """Notes per (app, user, session, step) that expire after `ttl_seconds`
  (refreshed by every add_note to the step; None keeps them)."""

  def __init__(
      self,
      redis_client_or_url: Any,
      *,
      ttl_seconds: float | None = 3600,
      key_prefix: str = ru.DEFAULT_PREFIX,
      cluster: bool | None = None,
  ) -> None:
    self._conn = ru.Connection(
        redis_client_or_url, NOTE_SOURCES, cluster=cluster)
    self._prefix = ru.check_prefix(key_prefix)
    self._ttl = ru.ttl_ms(ttl_seconds)
    self._note_id = _NoteIds()

  def _steps_key(self, app_name: str, user_id: str, session_id: str) -> str:
    tag = ru.user_tag(self._prefix, app_name, user_id)
    return f"{tag}:wm:{ru.enc(session_id)}:steps"

  def _step_key(
      self, app_name: str, user_id: str, session_id: str, step_id: str
  ) -> str:
    tag = ru.user_tag(self._prefix, app_name, user_id)
    return f"{tag}:wm:{ru.enc(session_id)}:step:{ru.enc(step_id)}"

  async def add_note(
      self,
      app_name: str,
      user_id: str,
      session_id: str,
      step_id: str,
      text: str,
      author: str | None = None,
  ) -> MemoryEntry:
    """Stores a note and returns it as the MemoryEntry list_notes yields."""
    now = platform_time.get_time()
    note = MemoryEntry(
        id=self._note_id(now),
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        author=author,
        timestamp=utc_timestamp(now),
        custom_metadata={
            "kind": NOTE_KIND,
            "session_id": session_id,
            "step_id": step_id,
            "event_timestamp": now,
        },
    )
    step_key = self._step_key(app_name, user_id, session_id, step_id)
    await self._scripts.run(
        "add",
        [step_key, self._steps_key(app_name, user_id, session_id)],
        [self._ttl, step_id, note.id, note.model_dump_json(exclude_none=True)],
        operation="add_note",
    )
    return note

  async def list_notes(
      self,
      app_name: str,
      user_id: str,
      session_id: str,
      step_id: str | None = None,
  ) -> list[MemoryEntry]:
    """Live notes of one step (or of every step), oldest first."""
    if step_id is None:
      steps_key = self._steps_key(app_name, user_id, session_id)
      members = await ru.guarded(
          "list_notes", steps_key, self._client.smembers(steps_key)
      )
      steps = sorted(ru.text(m) for m in members)
    else:
      steps = [step_id]
    step_keys = [
        self._step_key(app_name, user_id, session_id, s) for s in steps
    ]
    if not step_keys:
      return []
    pipe = self._client.pipeline(transaction=False)
    for key in step_keys:
      pipe.hgetall(key)
    replies = await ru.guarded("list_notes", step_keys[0], pipe.execute())
    notes = []
    for key, hashed in zip(step_keys, replies):
      for note_id, raw in hashed.items():
        try:
          notes.append(MemoryEntry.model_validate_json(raw))
        except ValidationError as e:
          raise CorruptDataError(
              key, f"note {ru.text(note_id)!r} is not a MemoryEntry: {e}"
          ) from e
    notes.sort(key=lambda n: (_note_time(n), n.id or ""))
    return notes

  async def checkpoint(
      self,
      app_name: str,
      user_id: str,
      session_id: str,
      step_id: str,
      memory_service: BaseMemoryService,
  ) -> int:
    """Moves the step's notes into long-term memory; returns how many notes
    this call removed from working memory."""
    notes = await self.list_notes(app_name, user_id, session_id, step_id)
    if not notes:
      return 0
    try:
      await memory_service.add_memory(
          app_name=app_name, user_id=user_id, memories=notes
      )
    except NotImplementedError:
      # Services without direct writes (e.g. InMemoryMemoryService) take
      # events; the note id becomes the event id, so re-sends deduplicate.
      await memory_service.add_events_to_memory(
          app_name=app_name,
          user_id=user_id,
          session_id=session_id,
          events=[
              Event(
                  id=n.id,
                  invocation_id=step_id,
                  author=n.author or "agent",
                  timestamp=_note_time(n),
                  content=n.content,
              )
              for n in notes
          ],
      )
    step_key = self._step_key(app_name, user_id, session_id, step_id)
    removed = await self._scripts.run(
        "clear",
        [step_key, self._steps_key(app_name, user_id, session_id)],
        [step_id, *(n.id for n in notes)],
        operation="checkpoint",
    )
    return int(removed)
