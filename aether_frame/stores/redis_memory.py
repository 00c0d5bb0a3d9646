"""ADK memory service on Redis with BM25 ranking shared by all workers.

The inverted index (postings, document lengths, document count) lives in
Redis, scoped per app and user, so a memory written by one worker ranks the
same way on every other. Terms come from aether_frame.retrieval.text.tokenize,
the tokenizer every aether-frame lexical index uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from collections.abc import Sequence
from datetime import datetime
from datetime import timezone
import hashlib
import json
from typing import Any
from typing import TYPE_CHECKING

from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from pydantic import ValidationError
from typing_extensions import override

from ..retrieval.text import cjk_unigrams, content_hash, tokenize
from . import _redis_util as ru
from ._memory_lua import MEMORY_SOURCES
from .errors import CorruptDataError
from .errors import RedisStoreError

if TYPE_CHECKING:
  from google.adk.events.event import Event
  from google.adk.sessions.session import Session

UNKNOWN_SESSION_ID = "__unknown_session_id__"  # same marker as ADK's services
SCORE_KEY = "bm25_score"  # custom_metadata key carrying the search score
_BATCH = 200  # documents per script call, to keep Redis responsive
# Postings per script call: with huge documents 200 of them can take a script
# for seconds (other clients get BUSY, and a script that wrote cannot be
# killed). A single larger document still goes alone, atomically.
_BATCH_POSTINGS = 20_000
_MAX_RETRIES = 20


def entry_text(content: Any) -> str:
  """The searchable text of a Content: its non-thought text parts."""
  if content is None or not content.parts:
    return ""
  parts = [
      p.text.strip()
      for p in content.parts
      if p.text and not getattr(p, "thought", False) and p.text.strip()
  ]
  return " ".join(parts)


_ALIAS_SEPARATOR = "\x1f"
"""Joins an event id and its session id into the key of a second session's copy of that event
(``_memory_lua.ADD``): an id holding it could take the place of another session's copy."""


class _IndexKeys:
  """Keys of one (app, user) index, all under the user's hash tag."""

  def __init__(self, prefix: str, app_name: str, user_id: str) -> None:
    base = ru.user_tag(prefix, app_name, user_id) + ":mem"
    self.base = base
    self.fixed = [
        f"{base}:docs",
        f"{base}:lens",
        f"{base}:ts",
        f"{base}:terms",
        f"{base}:stats",
        f"{base}:deleted",
        f"{base}:alias",
        f"{base}:sums",
    ]

  def term(self, encoded_term: str) -> str:
    return f"{self.base}:t:{encoded_term}"


class RedisMemoryService(ru.RedisStoreBase, BaseMemoryService):
  """BM25-ranked long-term memory in Redis, one index per app and user.

  Args:
    redis: a `redis://` / `rediss://` URL or a ready redis.asyncio client.
    key_prefix: first segment of every key.
    max_results: memories returned by search_memory.
    k1, b: BM25 parameters.
  """

  def __init__(
      self,
      redis: Any,
      *,
      key_prefix: str = ru.DEFAULT_PREFIX,
      max_results: int = 10,
      k1: float = 1.2,
      b: float = 0.75,
      cluster: bool | None = None,
  ) -> None:
    self._conn = ru.Connection(redis, MEMORY_SOURCES, cluster=cluster)
    self._prefix = ru.check_prefix(key_prefix)
    self.max_results = max_results
    self.k1 = k1
    self.b = b

  @override
  async def add_session_to_memory(self, session: Session) -> None:
    await self.add_events_to_memory(
        app_name=session.app_name,
        user_id=session.user_id,
        events=session.events,
        session_id=session.id,
    )

  @override
  async def add_events_to_memory(
      self,
      *,
      app_name: str,
      user_id: str,
      events: Sequence[Event],
      session_id: str | None = None,
      custom_metadata: Mapping[str, object] | None = None,
  ) -> None:
    entries = []
    for event in events:
      if not entry_text(event.content):
        continue
      meta = dict(custom_metadata or {})
      meta.update({
          "session_id": session_id or UNKNOWN_SESSION_ID,
          "event_id": event.id,
          "invocation_id": event.invocation_id,
          "event_timestamp": event.timestamp,
      })
      entries.append((
          MemoryEntry(
              id=event.id or _content_id(event.author, event.timestamp, event.content),
              content=event.content.model_copy(deep=True),
              author=event.author,
              timestamp=utc_timestamp(event.timestamp),
              custom_metadata=meta,
          ),
          float(event.timestamp),
      ))
    if not session_id and entries:
      await self._keep_stored_sessions(app_name, user_id, entries)
    await self._index(app_name, user_id, entries, mode="events")

  async def _keep_stored_sessions(
      self,
      app_name: str,
      user_id: str,
      entries: list[tuple[MemoryEntry, float]],
  ) -> None:
    """An event re-added without its session keeps the session it is stored
    under; ADK's own service would keep two copies, one of them unscoped.
    (New content still replaces old: only the provenance is carried over.)"""
    docs_key = _IndexKeys(self._prefix, app_name, user_id).fixed[0]
    stored = await ru.guarded(
        "add_events_to_memory",
        docs_key,
        self._client.hmget(docs_key, [e.id for e, _ in entries]),
    )
    for (entry, _), raw in zip(entries, stored):
      if raw is None:
        continue
      try:
        sid = json.loads(ru.text(raw)).get("custom_metadata", {}).get("session_id")
      except (ValueError, AttributeError):
        continue  # a corrupt copy is replaced, not trusted
      if isinstance(sid, str) and sid != UNKNOWN_SESSION_ID:
        entry.custom_metadata["session_id"] = sid

  @override
  async def add_memory(
      self,
      *,
      app_name: str,
      user_id: str,
      memories: Sequence[MemoryEntry],
      custom_metadata: Mapping[str, object] | None = None,
  ) -> None:
    """Explicit writes; an entry without id gets one derived from its
    content, so re-adding the same entry does not duplicate it."""
    entries = []
    for memory in memories:
      meta = dict(custom_metadata or {})
      meta.update(memory.custom_metadata)
      entry = memory.model_copy(update={"custom_metadata": meta}, deep=True)
      if not entry.id:
        entry.id = _content_id(entry.author, entry.timestamp, entry.content)
      entries.append((entry, _unix_time(entry)))
    await self._index(app_name, user_id, entries, mode="explicit")

  @override
  async def search_memory(
      self, *, app_name: str, user_id: str, query: str
  ) -> SearchMemoryResponse:
    terms = list(dict.fromkeys(tokenize(query or "")))
    if not terms:
      return SearchMemoryResponse()
    keys = _IndexKeys(self._prefix, app_name, user_id)
    rows = await self._scripts.run(
        "search",
        keys.fixed + [keys.term(ru.enc(t)) for t in terms],
        [repr(self.k1), repr(self.b), str(self.max_results)],
        operation="search_memory",
    )
    memories = []
    for i in range(0, len(rows), 3):
      memory_id, score, raw = ru.text(rows[i]), rows[i + 1], rows[i + 2]
      try:
        entry = MemoryEntry.model_validate_json(raw)
      except ValidationError as e:
        raise CorruptDataError(
            keys.fixed[0], f"memory {memory_id!r} is not a MemoryEntry: {e}"
        ) from e
      entry.custom_metadata[SCORE_KEY] = float(ru.text(score))
      memories.append(entry)
    return SearchMemoryResponse(memories=memories)

  @override
  async def delete_memory(
      self,
      *,
      app_name: str,
      user_id: str,
      memory_id: str | None = None,
  ) -> None:
    """Removes the memory from the index and stops event ingestion from
    bringing it back."""
    if not memory_id:
      return
    keys = _IndexKeys(self._prefix, app_name, user_id)
    terms: list[str] = []
    for _ in range(_MAX_RETRIES):
      res = await self._scripts.run(
          "delete",
          keys.fixed + [keys.term(t) for t in terms],
          [memory_id, str(len(terms)), *terms],
          operation="delete_memory",
      )
      if ru.text(res[0]) == "ok":
        return
      terms = sorted(set(terms) | {ru.text(t) for t in res[1:]})
    raise RedisStoreError(
        f"delete_memory on {keys.fixed[0]!r} kept racing concurrent writers",
        key=keys.fixed[0],
    )

  async def count(self, *, app_name: str, user_id: str) -> int:
    """Number of memories indexed for (app, user)."""
    key = _IndexKeys(self._prefix, app_name, user_id).fixed[4]
    n = await ru.guarded("count", key, self._client.hget(key, "n"))
    return int(ru.text(n) or 0)

  async def _index(
      self,
      app_name: str,
      user_id: str,
      entries: list[tuple[MemoryEntry, float]],
      *,
      mode: str,
  ) -> None:
    """Upserts entries (last wins per id) in batches, each batch atomic.

    Every entry is serialised before the first batch is sent: one that cannot
    be (metadata JSON refuses) fails the call with nothing written, not after
    the batches before it. A batch that Redis loses mid-call (the server gone)
    leaves the earlier batches stored, each whole: a retry completes the rest.
    """
    by_id = {entry.id: (entry, ts) for entry, ts in entries}
    keys = _IndexKeys(self._prefix, app_name, user_id)
    jsons: dict[str, str] = {}
    for memory_id, (entry, _) in by_id.items():
      if _ALIAS_SEPARATOR in memory_id:
        raise ValueError(f"memory id {memory_id!r} holds the unit separator \\x1f, which this store keeps "
                         "for another session's copy of an event id (nothing was written)")
      try:
        jsons[memory_id] = entry.model_dump_json(exclude_none=True)
      except (ValueError, TypeError) as e:  # pydantic's serialisation errors are ValueErrors
        raise ValueError(f"memory {memory_id!r} cannot be stored as JSON (nothing was written): {e}") from e
    sums = {memory_id: content_hash(text) for memory_id, text in jsons.items()}
    # The after_agent_callback pattern re-adds the whole session every turn: only
    # what changed is tokenised and sent (the script would skip the rest anyway).
    unchanged = await self._stored_sums(keys, sums)
    by_id = {k: v for k, v in by_id.items() if k not in unchanged}
    batch: list[tuple[str, MemoryEntry, float, Counter[str]]] = []
    postings = 0
    for memory_id, (entry, ts) in by_id.items():
      tf = Counter(ru.enc(t) for t in document_terms(entry_text(entry.content)))
      if batch and (
          len(batch) >= _BATCH or postings + len(tf) > _BATCH_POSTINGS
      ):
        await self._index_batch(keys, batch, mode, jsons, sums)
        batch, postings = [], 0
      batch.append((memory_id, entry, ts, tf))
      postings += len(tf)
    if batch:
      await self._index_batch(keys, batch, mode, jsons, sums)

  async def _stored_sums(self, keys: _IndexKeys, sums: Mapping[str, str]) -> set[str]:
    """Ids stored with the digest given (unchanged since stored).

    A stored length is asked for too: a worker of an earlier version deletes a
    memory without its digest, and the digest alone would keep it out for good.
    """
    ids = list(sums)
    same: set[str] = set()
    for at in range(0, len(ids), 1000):
      part = ids[at:at + 1000]
      pipe = self._client.pipeline(transaction=False)
      pipe.hmget(keys.fixed[7], part)
      pipe.hmget(keys.fixed[1], part)
      got, lens = await ru.guarded("add to memory", keys.fixed[7], pipe.execute())
      same.update(i for i, g, n in zip(part, got, lens) if g is not None and n is not None and ru.text(g) == sums[i])
    return same

  async def _index_batch(
      self,
      keys: _IndexKeys,
      docs: list[tuple[str, MemoryEntry, float, Counter[str]]],
      mode: str,
      jsons: Mapping[str, str],
      sums: Mapping[str, str],
  ) -> None:
    names: dict[str, int] = {}
    for _, _, _, tf in docs:
      for term in tf:
        names.setdefault(term, len(names) + 1)
    extra: set[str] = set()
    for _ in range(_MAX_RETRIES):
      all_names = list(names) + sorted(extra - names.keys())
      args: list[str] = [mode, str(len(all_names)), *all_names, str(len(docs))]
      for memory_id, entry, ts, tf in docs:
        sid = entry.custom_metadata.get("session_id") if mode == "events" else None
        args += [
            memory_id,
            sid if isinstance(sid, str) and sid != UNKNOWN_SESSION_ID else "",
            jsons[memory_id],
            sums[memory_id],
            repr(ts),
            str(sum(tf.values())),
            " ".join(tf),
            str(len(tf)),
        ]
        for term, count in tf.items():
          args += [str(names[term]), str(count)]
      res = await self._scripts.run(
          "add",
          keys.fixed + [keys.term(t) for t in all_names],
          args,
          operation="add to memory",
      )
      if ru.text(res[0]) == "ok":
        return
      extra |= {ru.text(t) for t in res[1:]}
    raise RedisStoreError(
        f"memory write on {keys.fixed[0]!r} kept racing concurrent writers",
        key=keys.fixed[0],
    )


def document_terms(text: str) -> list[str]:
  """A memory's index terms: ``tokenize``'s, plus the single characters of its CJK runs,
  so a one-character query (雨, 猫, 집) finds the memories that say it."""
  return tokenize(text) + cjk_unigrams(text)


def utc_timestamp(ts: float) -> str:
  """``ts`` as ISO 8601 in UTC with its offset, read alike in every zone.

  ADK's ``memory_utils.format_timestamp`` writes the writer's local time
  without a zone, which a worker in another zone reads hours off.
  """
  return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _unix_time(entry: MemoryEntry) -> float:
  """Recency for tie-breaks: provenance timestamp, else the ISO timestamp
  (a zone-less one, as ADK writes them, in this process's local time)."""
  ts = entry.custom_metadata.get("event_timestamp")
  if isinstance(ts, (int, float)):
    return float(ts)
  if entry.timestamp:
    try:
      return datetime.fromisoformat(entry.timestamp).timestamp()
    except ValueError:
      pass
  return 0.0


def _content_id(author: Any, timestamp: Any, content: Any) -> str:
  """Stable id for content without one, so retries upsert, not duplicate."""
  body = content.model_dump_json(exclude_none=True) if content else ""
  payload = json.dumps([author, timestamp, body])
  return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]
