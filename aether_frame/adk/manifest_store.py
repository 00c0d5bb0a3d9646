"""Writes each pack's manifest, and its replayable inputs, through the app's ArtifactService.

ADK versions an artifact per save, so one stable filename gives a versioned
history per session: File locally, GCS in production (``GcsArtifactService``),
no storage code here. The inputs (items, policy, history hash chunks) are
content-addressed blobs written once per user, in a scope of their own so the
plugin's ``list_artifacts`` never sees them. A store that fails or hangs does
not stop the agent: the write goes to a local spool, flushed in order later.
If the spool refuses it too, the manifest is held in memory (bounded) and
retried on the next call; what is dropped is counted and logged as an error.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from google.genai import types

from ..audit import inputs as replay_inputs
from ..audit.spool import Spool, SpoolEntryError, default_spool_dir, entry_blobs, make_entry
from ..audit.terminal import shown
from ..core import manifest as manifest_doc
from ..core.errors import AetherFrameError
from ..log_limit import RateLimitedLog

logger = logging.getLogger(__name__)

MANIFEST_FILENAME = "context_pack/manifest.json"
MANIFEST_MIME = "application/json"
BLOB_APP = "context-pack-blobs"
"""The artifact scope of input blobs: ``app_name=BLOB_APP, user_id=<user>, session_id=<app>``.

Reserved: ADK accepts it as an app name (hyphens are allowed), so the writer
refuses to store manifests for an app of that name (rename the app, or pass
``ManifestWriter(blob_app=...)``). So the plugin's ``list_artifacts`` never
sees a blob, and in GCS every blob sits under
``context-pack-blobs/<user>/<app>/``: one prefix for a lifecycle rule of its
own, one prefix per user for deletion on request."""
BLOB_PREFIX = "context_pack/blobs/"
BLOB_REFRESH_SECONDS = 30 * 86400.0
"""A blob whose newest copy is older than this is written again when next used,
so an age-based lifecycle rule on blobs never removes one a recent manifest needs."""
DEFAULT_TIMEOUT = 5.0
DEFAULT_MAX_HELD = 64
"""Manifests kept in memory while both the store and the spool refuse them;
each holds its document and shares the session's input blobs with the encoder."""
SUBTREE_TIME = "aether_frame_subtree_time"
"""Custom metadata of a history chunk: the oldest newest-copy time (Unix seconds) of
every blob under it when it was written. Copies only get newer, so while this is
younger than ``refresh_after`` the whole subtree is present and fresh."""
_KNOWN_MAX = 200_000
_KNOWN_TTL = 6 * 3600.0
"""Re-check blob existence after this long, so a lifecycle deletion is noticed."""


def blob_filename(key: str) -> str:
  return f"{BLOB_PREFIX}{key}.json"


def blob_scope(app: str, user: str, blob_app: str = BLOB_APP) -> dict[str, str]:
  """Where a user's input blobs live (``user`` is a reserved session segment in ADK's flat stores)."""
  return {"app_name": blob_app, "user_id": user, "session_id": app if app != "user" else "_user"}


def store_uri(service: Any) -> str:
  """Where a service stores, as ``aether-frame flush --to`` takes it."""
  bucket = getattr(service, "bucket_name", None)
  if bucket:
    return f"gs://{bucket}"
  root = getattr(service, "root_dir", None)
  if root is not None:
    return str(Path(root))
  return f"{type(service).__name__}@{id(service):x}"


LINGER_SECONDS = 150.0
"""How long an upload cancelled with its event loop may still land: google-cloud-storage
retries a request for up to 120 s."""


def caller_invocation(ic: Any) -> Any:
  """The invocation an ``AgentTool`` child's manifests belong to: its caller's (through any
  nesting), found through the ``ForwardingArtifactService`` ADK gives the child. The child
  runs in a throwaway session of its own, and its forwarding service saves into the caller's
  session whatever app, user and session it is told: the input blobs landed there as session
  artifacts (outside the blob scope replay reads), and a new wrapper per call defeated the
  blob cache. So manifests and blobs go to the caller's own store, in the caller's session."""
  for _ in range(16):  # AgentTools nest; bounded all the same
    service = getattr(ic, "artifact_service", None)
    parent = getattr(service, "_invocation_context", None) if type(service).__name__ == "ForwardingArtifactService" else None
    if parent is None:
      break
    ic = parent
  return ic


async def _settled(awaitables) -> list:
  """``gather``, but a failure is raised only once every sibling has settled: no write
  is still in flight (in a worker thread) when the caller hears that the store failed."""
  results = await asyncio.gather(*awaitables, return_exceptions=True)
  for r in results:
    if isinstance(r, BaseException):
      raise r
  return results


def _subtree_time(versions: list, *, chunk: bool) -> Optional[float]:
  """How fresh a stored blob vouches its subtree to be; None if absent (or a chunk of an older writer)."""
  if not versions:
    return None
  newest = max(versions, key=lambda v: v.create_time)
  if not chunk:
    return newest.create_time
  try:
    t = float((newest.custom_metadata or {})[SUBTREE_TIME])
  except (KeyError, TypeError, ValueError):
    return None  # written before chunks carried it: walk the subtree once, then rewrite it with the time
  return min(t, newest.create_time) if math.isfinite(t) else None


class MissingBlobsError(AetherFrameError, LookupError):
  """A spooled manifest would point at input blobs its target store does not have."""


@dataclass
class FlushReport:
  flushed: int = 0
  already_stored: int = 0
  pending: int = 0
  errors: list[str] = field(default_factory=list)
  busy: bool = False
  """Another process (or a still-running upload) holds the spool; try again shortly."""
  held: int = 0
  """Manifests still in this process's memory: neither the store nor the spool took them."""


@dataclass
class _Held:
  """A manifest neither the store nor the spool took: kept for the next attempt."""

  service: Any
  entry: dict[str, Any]
  blobs: Mapping[str, bytes]
  reason: str
  task: Optional[asyncio.Task] = None
  """An upload that timed out and may still land."""


def _report_unstored(held: collections.deque) -> None:
  """At exit (or when the writer goes away): manifests still held are lost; say so."""
  if held:
    logger.error("%d context-pack manifest(s) held in memory were never stored (the artifact store and the spool "
                 "both failed); first: %s", len(held), _label(held[0].entry))


def _label(entry: dict[str, Any]) -> str:
  """A spooled call for a log line: client-chosen ids with line breaks would forge log records."""
  return "/".join(shown(entry[k]) for k in ("app", "user", "session")) + f" pack {shown(entry['manifest'].get('pack_id'))}"


class ManifestWriter:
  """Saves manifests; with no artifact service it logs once and keeps running.

  ``service``: store manifests and blobs in this artifact service (e.g. a
  ``GcsArtifactService`` on a dedicated bucket with its own lifecycle) instead
  of the app's. ``spool_dir=False`` turns the spool off (store errors then
  propagate). ``timeout`` bounds one store attempt: google-cloud-storage
  retries a dead endpoint for up to 120 s, which must not stall a model call.
  ``max_held``: manifests kept in memory while the spool is unwritable too;
  beyond it the oldest is dropped, counted in ``stats["lost"]`` and logged.
  """

  def __init__(
      self,
      filename: str = MANIFEST_FILENAME,
      *,
      service: Any = None,
      store_inputs: bool = True,
      chunk_size: int = replay_inputs.DEFAULT_CHUNK_SIZE,
      blob_app: str = BLOB_APP,
      refresh_after: float = BLOB_REFRESH_SECONDS,
      spool_dir: Union[str, Path, None, bool] = None,
      timeout: float = DEFAULT_TIMEOUT,
      max_held: int = DEFAULT_MAX_HELD,
  ):
    if not isinstance(filename, str) or not filename.strip("/ "):
      raise ValueError(f"filename must name an artifact, got {filename!r}")
    for field_name, value in (("max_held", max_held), ("chunk_size", chunk_size)):
      if not isinstance(value, int) or isinstance(value, bool) or value < (1 if field_name == "max_held" else 2):
        raise ValueError(f"{field_name} must be an int >= {1 if field_name == 'max_held' else 2}, got {value!r}")
    for field_name, value, least in (("timeout", timeout, "positive"), ("refresh_after", refresh_after, "non-negative")):
      if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0
          or (value == 0 and least == "positive")):
        raise ValueError(f"{field_name} must be a {least} number of seconds, got {value!r}")
    if not isinstance(store_inputs, bool):
      raise TypeError(f"store_inputs must be True or False, got {store_inputs!r}")
    if not isinstance(blob_app, str) or not blob_app.strip():
      raise ValueError(f"blob_app must be a non-empty app name, got {blob_app!r}")
    self.filename = filename
    self.service = service
    self.store_inputs = store_inputs
    self.chunk_size = chunk_size
    self._encoder = replay_inputs.InputEncoder(chunk_size)
    self.blob_app = blob_app
    self.refresh_after = refresh_after
    self.spool = None if spool_dir is False else Spool(default_spool_dir() if spool_dir in (None, True) else spool_dir)
    self.timeout = timeout
    self._log = RateLimitedLog(logger)
    self._spool_unusable: Optional[str] = None
    """Why the spool cannot be used at all (its lock cannot be opened), as of the last flush."""
    self.last_document: Optional[dict[str, Any]] = None
    self.last_write: dict[str, Any] = {}
    self.stats = {"stored": 0, "spooled": 0, "flushed": 0, "blobs_written": 0, "blob_bytes": 0, "manifest_bytes": 0,
                  "held": 0, "lost": 0}
    """Counters, but ``held``: how many manifests are in memory now."""
    self.max_held = max_held
    self._held: collections.deque[_Held] = collections.deque()
    self._retrying = False
    weakref.finalize(self, _report_unstored, self._held)
    self._known: dict[tuple[str, ...], dict[str, float]] = {}
    """store + blob scope → blob key → its subtree time (``_subtree_time``), for keys known to be
    there; checked again at most every _KNOWN_TTL."""
    self._known_since = time.monotonic()
    self._orphans: dict[str, asyncio.Task] = {}
    self._lingering: dict[str, float] = {}
    """Spool entries whose timed-out upload was cancelled with its event loop, and when: the
    upload itself may still run in a worker thread, so the spool's lock stays held (see ``_adopt``)."""
    self._dropped: set[asyncio.Task] = set()
    """Uploads of manifests dropped from the held buffer that are still running."""
    self._flush_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
    """One per event loop: an asyncio lock shared by two loops (sync ``Runner.run`` in
    several threads) left a waiter asleep for good and broke every later flush."""
    self._flushing = threading.Lock()
    """Held, never waited on, while a flush runs: a loop in another thread finds it busy."""

  # ---------------------------------------------------------------- document
  def prepare(self, body: dict[str, Any], runtime: dict[str, Any], compile_input: Optional[Callable] = None,
              stream: Any = None) -> tuple[dict[str, Any], Mapping[str, bytes]]:
    """The finalized document and the input blobs it references (``stream``: one per session and agent)."""
    blobs: dict[str, bytes] = {}
    if self.store_inputs and compile_input is not None:
      try:
        enc = self._encoder.encode(compile_input(), stream=stream)
        body = {**body, replay_inputs.INPUTS_KEY: enc.section}
        blobs = enc.blobs
      except Exception as e:  # the manifest still matters without its inputs
        self._warn("inputs", "replay inputs could not be encoded; manifest stored without them: %r", e)
        runtime = {**runtime, "inputs_error": f"{type(e).__name__}: {e}"[:500]}
    return manifest_doc.finalize(body, runtime), blobs

  def forget_stream(self, stream: Any) -> None:
    """Drops the input encoder's memo of ``stream`` (its history items and their JSON)."""
    self._encoder.forget(stream)

  def document(self, body: dict[str, Any], runtime: dict[str, Any], compile_input: Optional[Callable] = None) -> dict[str, Any]:
    return self.prepare(body, runtime, compile_input)[0]

  # ------------------------------------------------------------------- write
  async def write(self, ctx, body: dict[str, Any], runtime: dict[str, Any], compile_input: Optional[Callable] = None,
                  stream: Optional[tuple] = None) -> Optional[int]:
    """Stores the manifest; returns its version, or None if spooled or not stored.

    ``stream``: the caller's compiler key (``ContextPackPlugin._key``), so lanes of
    one agent keep their own input memo; by default (session, agent).
    """
    ic = ctx.get_invocation_context()
    if stream is None:
      stream = (ic.app_name, ic.user_id, ic.session.id, body.get("agent"))
    doc, blobs = self.prepare(body, runtime, compile_input, stream=stream)
    self.last_document = doc
    owner = caller_invocation(ic)
    service = self.service or owner.artifact_service
    if self.service is not None or owner is not ic:
      # A store of our own (not one of the session's artifacts, so no artifact_delta), or an
      # AgentTool's child: straight into the caller's session, in the real store.
      ctx = None
    if service is None:
      self._warn("no-service", "no artifact service configured; context-pack manifests are not stored")
      return None
    if owner.app_name == self.blob_app:
      raise ValueError(
          f"app name {owner.app_name!r} is the scope the manifest store keeps input blobs in: its sessions "
          f"would list blobs as artifacts and share their lifecycle rule; rename the app, or pass "
          f"ManifestWriter(blob_app=...) another name")
    entry = make_entry(
        store=store_uri(service), app=owner.app_name, user=owner.user_id, session=owner.session.id,
        filename=self.filename, blob_app=self.blob_app, manifest=doc, blobs={},
    )
    if self.spool is None:
      return await self._store(service, entry, ctx=ctx, blobs=blobs)
    self._release_lingering()
    for name in [n for n, t in self._orphans.items() if t.done() and not (self.spool.root / n).exists()]:
      del self._orphans[name]  # settled, and its entry was flushed elsewhere (e.g. the CLI)
    if self._held:
      await self._retry_held()
      if any(h.entry["store"] == entry["store"] for h in self._held):  # after them, in call order
        self._hold(_Held(service, entry, blobs, "earlier manifests are still held in memory"))
        return None
    if self._spool_unusable is not None or self._waiting(entry["store"]):
      await self._flush_first(service)  # (an unusable spool is tried again: it may be fixed)
      if self._waiting(entry["store"]):
        self._to_spool(service, entry, blobs, "earlier manifests are still waiting in the spool")
        return None
    task = asyncio.ensure_future(self._store(service, entry, ctx=ctx, blobs=blobs))
    done, _ = await asyncio.wait({task}, timeout=self.timeout)
    if task in done and task.exception() is None:
      return task.result()
    if task in done:
      reason = f"{type(task.exception()).__name__}: {task.exception()}"
    else:
      reason = f"no answer within {self.timeout:g}s"
    path = self._to_spool(service, entry, blobs, reason, task=None if task in done else task)
    if path is not None and task not in done:
      self._adopt(path, task)
    return None

  async def _flush_first(self, service) -> None:
    """Flushes the spool before a write, bounded by ``timeout``, and says what came of it."""
    try:  # bounded: after a long outage the backlog is not this call's to wait for
      report = await self.flush(service, budget=self.timeout)
    except Exception as e:
      self._warn("flush:" + type(e).__name__, "flushing the spool %s failed: %r", self.spool.root, e)
      return
    if report.flushed:
      self._warn("flushed", "the artifact store took %d spooled context-pack manifests from %s; %d still waiting",
                 report.flushed, self.spool.root, report.pending, level=logging.INFO)
    if not report.pending:
      for prefix in ("spool:", "flush:", "unusable", "flushed"):  # the backlog is gone: a later one is reported at once
        self._log.forget(prefix)
    elif report.errors and not report.busy and self._spool_unusable is None:  # (an unusable one said so itself)
      self._warn("flush:" + report.errors[0], "the spool %s could not be flushed (%s); %d manifests wait in it, and "
                 "new ones wait behind them", self.spool.root, report.errors[0], report.pending)

  def _waiting(self, store: str) -> bool:
    """Whether spooled entries for ``store`` are waiting, so a new manifest goes after them (call order).

    Not while the spool cannot be used at all (a read-only disk): its entries
    cannot be flushed then, and every new manifest held behind them would be lost.
    """
    return self._spool_unusable is None and bool(self._pending(store))

  def _adopt(self, path: Path, task: asyncio.Task) -> None:
    """An upload that timed out may still land: hold the spool lock until it settles.

    If it lands, its entry goes from the spool then and there (while the lock
    is still held): left for this writer's next flush, an ``aether-frame flush``
    run meanwhile would store it a second time.
    """
    self._orphans[path.name] = task
    if not self.spool.acquire():
      return

    def settled(t: asyncio.Task) -> None:
      if t.cancelled():
        # Its event loop closed under it (``asyncio.run`` ending: the CLI's flush, a sync
        # ``Runner.run``). The upload may still run in ADK's worker thread, and land after
        # another process's flush sent it again: the lock stays held until this process
        # exits (after that thread), or ``LINGER_SECONDS`` pass (``_release_lingering``).
        self._lingering[path.name] = time.monotonic()
        return
      try:
        if t.exception() is None:
          self.spool.remove(path)
          self._orphans.pop(path.name, None)
      except Exception as e:  # the entry stays; the next flush finds the upload landed, or dedupes it
        logger.debug("aether-frame: could not remove the landed spool entry %s: %r", path, e)
      finally:
        self.spool.release()

    task.add_done_callback(settled)

  def _release_lingering(self) -> None:
    """Lets go of the lock held for cancelled uploads once they cannot land any more."""
    now = time.monotonic()
    for name, since in list(self._lingering.items()):
      if now - since >= LINGER_SECONDS:
        del self._lingering[name]
        self.spool.release()

  def _to_spool(self, service, entry: dict[str, Any], blobs: Mapping[str, bytes], reason: str,
                task: Optional[asyncio.Task] = None) -> Optional[Path]:
    """Spools the manifest; held in memory instead (None) if the spool refuses it too."""
    try:
      path = self._spool_add(entry, blobs, reason)
    except Exception as e:
      self._hold(_Held(service, entry, blobs, reason, task), spool_error=e)
      return None
    self._warn("spool:" + reason.split(":")[0], "context-pack manifest not stored yet (%s); spooled to %s, the run continues",
               reason, self.spool.root)
    return path

  def _spool_add(self, entry: dict[str, Any], blobs: Mapping[str, bytes], reason: str) -> Path:
    """Writes the entry with every blob it references, even those its store already has.

    ``flush --to`` may send the entry to another store, which has none of them.
    """
    path = self.spool.add({**entry, "blobs": {k: blobs[k].decode("utf-8") for k in blobs}, "reason": reason[:500]})
    self.stats["spooled"] += 1
    return path

  def _pending(self, store: str) -> list[Path]:
    """The spool's waiting entries for ``store``; none if it cannot be read (nothing of it can be flushed then)."""
    try:
      return self.spool.pending(store)
    except OSError as e:
      self._warn("spool-read:" + type(e).__name__, "the spool %s cannot be read (%r); its entries wait for `aether-frame flush`",
                 self.spool.root, e)
      return []

  def _hold(self, held: _Held, spool_error: Optional[BaseException] = None) -> None:
    """Keeps a manifest neither the store nor the spool took, for the next call; drops the oldest beyond ``max_held``.

    Its blobs are the encoder's own bytes (shared with the session's later
    calls), not a copy, so holding a long session's manifests costs little.
    """
    self._held.append(held)
    if spool_error is not None:
      self._warn(f"held:{type(spool_error).__name__}", "context-pack manifest for %s not stored yet (%s), and the "
                 "spool %s failed too (%r); kept in memory (up to %d) and retried on the next call",
                 _label(held.entry), held.reason, self.spool.root, spool_error, self.max_held, level=logging.ERROR)
    while len(self._held) > self.max_held:
      dropped = self._held.popleft()
      if dropped.task is not None and not dropped.task.done():
        # Its upload is still running and may land: lost only if it fails.
        self._dropped.add(dropped.task)
        dropped.task.add_done_callback(lambda t, e=dropped.entry: self._settle_dropped(t, e))
        continue
      self._count_lost(dropped.entry)
    self.stats["held"] = len(self._held)

  def _settle_dropped(self, task: asyncio.Task, entry: dict[str, Any]) -> None:
    self._dropped.discard(task)
    if task.cancelled() or task.exception() is not None:
      self._count_lost(entry)

  def _count_lost(self, entry: dict[str, Any]) -> None:
    self.stats["lost"] += 1
    self._warn("lost", "context-pack manifest for %s lost: %d manifests are held in memory while the artifact store and "
               "the spool %s both fail; %d lost so far", _label(entry), self.max_held, self.spool.root,
               self.stats["lost"], level=logging.ERROR)

  async def _retry_held(self) -> None:
    """Held manifests, oldest first: into the spool if it takes them again, else straight to their store.

    A store write waits for the spooled entries of that store (call order),
    and at most one attempt per call may take ``timeout``. One retry at a
    time: a concurrent call finds it running and holds its own manifest.
    """
    if self._retrying:
      return
    self._retrying = True
    try:
      await self._retry_held_once()
    finally:
      self._retrying = False
    self.stats["held"] = len(self._held)
    if not self._held:
      self._log.forget("held:")  # a later outage is reported at once

  async def _retry_held_once(self) -> None:
    while self._held:
      h = self._held[0]
      if h.task is not None and h.task.done():
        landed = not h.task.cancelled() and h.task.exception() is None
        h.task = None
        if landed:  # an upload that timed out got there after all
          self._held.popleft()
          continue
      try:
        path = self._spool_add(h.entry, h.blobs, h.reason)
      except Exception:
        break
      self._held.popleft()
      if h.task is not None:
        self._adopt(path, h.task)
    while self._held:
      h = self._held[0]
      if h.task is not None or self._dropped or self._waiting(h.entry["store"]):
        break  # an earlier manifest's upload may still land: after it, in call order
      task = asyncio.ensure_future(self._store(h.service, h.entry, dedupe=True, blobs=h.blobs))
      done, _ = await asyncio.wait({task}, timeout=self.timeout)
      if task not in done:
        h.task = task
        break
      if task.exception() is not None:
        break
      if self._held and self._held[0] is h:  # (not dropped meanwhile by a full buffer)
        self._held.popleft()

  async def _store(self, service, entry: dict[str, Any], *, ctx=None, dedupe: bool = False,
                   blobs: Optional[Mapping[str, bytes]] = None, check_refs: bool = False) -> int:
    """Blobs first (a manifest never points at a missing blob), then the manifest.

    ``check_refs``: the entry goes to another store than it was spooled for;
    refuse it if it references a blob that neither it nor that store has.
    """
    app, user = entry["app"], entry["user"]
    if blobs is None:
      blobs = entry_blobs(entry)
      _check_spooled_blobs(blobs)
    scope = blob_scope(app, user, entry.get("blob_app", self.blob_app))
    if check_refs:
      absent = await self._absent_blobs(service, scope, entry["manifest"], blobs)
      if absent:
        raise MissingBlobsError(
            f"references {len(absent)} input blob{'s' if len(absent) != 1 else ''} missing from both the entry and "
            f"{store_uri(service)} (first: {absent[0]}); flush it to {entry['store']}, which has them")
    try:  # the keys the manifest names; a section it cannot read: every blob the entry holds
      roots = replay_inputs.root_keys(entry["manifest"][replay_inputs.INPUTS_KEY])
    except (KeyError, TypeError, ValueError):
      roots = None
    blob_stats = await self._put_blobs(service, scope, blobs, store_uri(service), roots)
    data = manifest_doc.dumps(entry["manifest"])
    kw = dict(app_name=app, user_id=user, session_id=entry["session"], filename=entry["filename"])
    if dedupe:
      versions = await service.list_versions(**kw)
      if versions:
        latest = await service.load_artifact(**kw, version=max(versions))
        # Byte for byte, not by checksum: the checksum covers the body only, and
        # two calls can share a body (a retried model call) while their runtime
        # differs; an earlier attempt that landed late is the very same bytes.
        if latest is not None and latest.inline_data is not None and latest.inline_data.data == data:
          return -1 - max(versions)  # already there (an earlier attempt landed after all)
    part = types.Part(inline_data=types.Blob(mime_type=MANIFEST_MIME, data=data))
    if ctx is not None:
      version = await ctx.save_artifact(entry["filename"], part)
    else:
      version = await service.save_artifact(**kw, artifact=part)
    self.stats["stored"] += 1
    self.stats["manifest_bytes"] += len(data)
    self.last_write = {"version": version, "manifest_bytes": len(data), **blob_stats}
    return version

  @staticmethod
  async def _absent_blobs(service, scope: dict[str, str], manifest: dict[str, Any], carried: Mapping[str, bytes]) -> list[str]:
    """Blobs ``manifest`` references that are neither in ``carried`` nor in ``service``.

    Entries spooled by earlier versions left out blobs their own store had.
    Chunks are read (the history tree is walked through them), leaves only listed.
    """
    section = manifest.get(replay_inputs.INPUTS_KEY)
    if section is None:
      return []
    have = dict(carried)
    absent: list[str] = []

    async def load(keys: list[str]) -> None:
      parts = await asyncio.gather(*(service.load_artifact(**scope, filename=blob_filename(k)) for k in keys))
      for k, part in zip(keys, parts):
        if part is not None and part.inline_data is not None and part.inline_data.data is not None:
          have[k] = replay_inputs.unpack_blob(part.inline_data.data, k)
        else:
          absent.append(k)

    await load([k for k in dict.fromkeys(replay_inputs.first_keys(section)) if k not in have])
    while need := [k for k in replay_inputs.missing_chunks(section, have) if k not in absent]:
      await load(need)
    if absent:
      return absent
    leaves = [k for k in dict.fromkeys(replay_inputs.history_keys(section, have)) if k not in have]
    found = await asyncio.gather(*(service.list_artifact_versions(**scope, filename=blob_filename(k)) for k in leaves))
    return [k for k, versions in zip(leaves, found) if not versions]

  async def _put_blobs(self, service, scope: dict[str, str], blobs: Mapping[str, bytes], store: str,
                       roots: Optional[list[str]] = None) -> dict[str, int]:
    """Writes the blobs a manifest references that the store lacks (or holds only in copies about to age out).

    ``roots``: the keys the manifest names itself (``inputs.root_keys``); by
    default every key in ``blobs``. The history is a hash tree, and a chunk is
    written only after everything under it, with the oldest newest-copy time
    of its whole subtree in its metadata (``SUBTREE_TIME``). So one fresh chunk
    vouches for every blob below it: a worker that has never seen a
    10,000-turn session checks a few dozen keys, not 11,000.
    """
    if sum(map(len, self._known.values())) > _KNOWN_MAX or time.monotonic() - self._known_since > _KNOWN_TTL:
      self._known.clear()
      self._known_since = time.monotonic()
    where = (store, scope["app_name"], scope["user_id"], scope["session_id"])
    known = self._known.setdefault(where, {})
    keys = [k for k in (blobs if roots is None else dict.fromkeys(roots)) if k in blobs]
    tally = {"blobs_written": 0, "blob_bytes": 0, "blobs_checked": 0}
    await self._sync_blobs(service, scope, blobs, keys, known, time.time() - self.refresh_after, tally)
    self.stats["blobs_written"] += tally["blobs_written"]
    self.stats["blob_bytes"] += tally["blob_bytes"]
    return {**tally, "blobs_referenced": len(blobs)}

  async def _sync_blobs(self, service, scope: dict[str, str], blobs: Mapping[str, bytes], keys: list[str],
                        known: dict[str, float], stale_before: float, tally: dict[str, int]) -> dict[str, Optional[float]]:
    """Makes ``keys`` present and fresh, children before parents; returns each key's subtree
    time (None: a chunk that cannot vouch for its subtree, see below)."""
    out: dict[str, Optional[float]] = {}
    todo = []
    for k in keys:
      t = known.get(k)
      if t is not None and t >= stale_before:
        out[k] = t
      else:
        todo.append(k)
    if not todo:
      return out
    found = await _settled(service.list_artifact_versions(**scope, filename=blob_filename(k)) for k in todo)
    tally["blobs_checked"] += len(todo)
    redo: dict[str, Optional[list[str]]] = {}
    for k, versions in zip(todo, found):
      children = replay_inputs.chunk_children(blobs[k])
      t = _subtree_time(versions, chunk=children is not None)
      if t is not None and t >= stale_before:
        out[k] = known[k] = t
      else:
        redo[k] = children
    if not redo:
      return out
    # Below a chunk being written, copies older than half the refresh age are
    # written again too: else the chunk's time would be its oldest child's, and
    # it would go stale (and be rewritten) again a moment later.
    below = [c for children in redo.values() if children for c in children if c in blobs]
    times = await self._sync_blobs(service, scope, blobs, list(dict.fromkeys(below)), known,
                                   time.time() - self.refresh_after / 2, tally)
    now = time.time()
    writes = []
    for k, children in redo.items():
      data, mime = replay_inputs.pack_blob(blobs[k])
      kw = {}
      t: Optional[float] = now
      if children is not None:
        # A child the writer does not hold (an entry spooled by an older version
        # left out what its store had) was not checked: the chunk does not vouch.
        sub = [times.get(c) for c in children]
        t = None if None in sub else min([*sub, now])
        if t is not None:
          kw["custom_metadata"] = {SUBTREE_TIME: repr(t)}
      writes.append(service.save_artifact(
          **scope, filename=blob_filename(k), artifact=types.Part(inline_data=types.Blob(mime_type=mime, data=data)), **kw))
      out[k] = t
      tally["blob_bytes"] += len(data)
    await _settled(writes)
    known.update((k, t) for k in redo if (t := out[k]) is not None)
    tally["blobs_written"] += len(redo)
    return out

  # ------------------------------------------------------------------- flush
  async def flush(self, service, *, wait: float = 0.0, store: Optional[str] = None,
                  budget: Optional[float] = None) -> FlushReport:
    """Uploads this store's spooled writes, oldest first; stops at the first failure.

    ``wait`` gives a still-running earlier attempt that long to finish;
    ``store`` picks entries spooled for another store URI (``flush --to``);
    ``budget``: seconds the whole flush may take (a model call flushing before
    its own write stops there and spools its manifest after the rest).
    """
    report = FlushReport()
    deadline = None if budget is None else time.monotonic() + budget
    if self.spool is None:
      return report
    target = store_uri(service)
    store = store or target
    loop = asyncio.get_running_loop()
    lock = self._flush_locks.get(loop)
    if lock is None:
      lock = self._flush_locks[loop] = asyncio.Lock()
    async with lock:
      if not self._flushing.acquire(blocking=False):
        report.busy = True
        report.pending = len(self._pending(store))
        report.errors.append("another thread of this process is flushing this spool")
        return report
      try:
        return await self._flush_locked(service, report, wait=wait, store=store, target=target, deadline=deadline)
      finally:
        self._flushing.release()

  async def _flush_locked(self, service, report: FlushReport, *, wait: float, store: str, target: str,
                          deadline: Optional[float]) -> FlushReport:
    if self._held:
      await self._retry_held()
    self._release_lingering()
    report.held = len(self._held)
    try:  # an unwritable spool: say so, in the report, instead of raising out of the agent's call
      if self.spool.acquire():
        self.spool.release()
    except OSError as e:
      report.errors.append(f"spool {self.spool.root} cannot be used: {type(e).__name__}: {e}")
      report.pending = len(self._pending(store))
      if self._spool_unusable is None and report.pending:
        self._warn("unusable", "the spool %s cannot be used (%s: %s): its %d manifests wait for it to be fixed (then "
                   "`aether-frame flush`); new manifests go straight to the artifact store meanwhile, so their "
                   "versions come before those", self.spool.root, type(e).__name__, e, report.pending,
                   level=logging.ERROR)
      self._spool_unusable = f"{type(e).__name__}: {e}"
      return report
    self._spool_unusable = None
    with self.spool.lock() as mine:
      if not mine:
        report.pending = len(self.spool.pending(store))
        report.errors.append("another process holds this spool (flushing, or waiting on an upload)")
        report.busy = True
        return report
      for path in self.spool.pending(store):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
          break
        if not path.exists():  # a late upload landed meanwhile and took its entry
          report.already_stored += 1
          continue
        if path.name in self._lingering:  # cancelled with its loop, and may still land
          report.busy = True
          break
        orphan = self._orphans.get(path.name)
        if orphan is not None:
          if not orphan.done() and wait > 0 and orphan.get_loop() is asyncio.get_running_loop():
            await asyncio.wait({orphan}, timeout=wait)
          if not orphan.done():
            report.busy = True
            break  # an earlier attempt may still land; sending again could duplicate it
          self._orphans.pop(path.name, None)  # (its own callback may have settled it already)
          if not orphan.cancelled() and orphan.exception() is None:
            if path.exists():
              self.spool.remove(path)  # it landed after all
            report.already_stored += 1
            continue
        try:
          entry = self.spool.read(path)
          task = asyncio.ensure_future(self._store(service, entry, dedupe=True, check_refs=store != target))
          limit = max(self.timeout, wait) if left is None else min(max(self.timeout, wait), left)
          done, _ = await asyncio.wait({task}, timeout=limit)
          if task not in done:
            self._adopt(path, task)
            report.errors.append(f"{path.name}: no answer within {limit:g}s")
            break
          version = task.result()
        except (SpoolEntryError, CorruptBlobError) as e:
          # It can never be sent, and every entry after it would wait behind it for good.
          report.errors.append(self._set_aside(path, e))
          continue
        except Exception as e:
          report.errors.append(f"{path.name}: {type(e).__name__}: {e}")
          break
        self.spool.remove(path)
        if version < 0:
          report.already_stored += 1
        else:
          report.flushed += 1
          self.stats["flushed"] += 1
      report.pending = len(self.spool.pending(store))
      if report.flushed or report.already_stored:  # only then can blobs have lost their last entry
        self.spool.collect()
    return report

  def _set_aside(self, path: Path, error: Exception) -> str:
    """Moves a damaged entry out of the flush's way; says where, in the log and the report."""
    try:
      moved = self.spool.set_aside(path)
    except OSError as e:
      raise OSError(f"{path}: damaged ({error}), and it could not be moved aside: {e}") from e
    logger.error("spool entry %s is damaged and can never be sent (%s); moved to %s, the entries after it are "
                 "flushed", path.name, error, moved)
    return f"{path.name}: damaged ({type(error).__name__}: {error}); moved to {moved}"

  def _warn(self, key: str, msg: str, *args, level: int = logging.WARNING) -> None:
    """Logs now, then at most every 10 minutes while ``key``'s condition recurs (``log_limit``)."""
    self._log.log(key, level, msg, *args)


class CorruptBlobError(AetherFrameError, ValueError):
  """A spooled blob does not hash to its key."""


def _check_spooled_blobs(blobs: Mapping[str, bytes]) -> None:
  """Refuses a spooled blob that does not hash to its key (a damaged ``spool/blobs`` file).

  Uploaded, it would sit in the store under that key for good: blobs are
  written once and shared by every later manifest that references them.
  """
  for key, data in blobs.items():
    if replay_inputs.blob_key(data) != key:
      raise CorruptBlobError(f"spooled input blob {key} hashes to {replay_inputs.blob_key(data)} (corrupt or tampered); "
                             f"not uploaded")
