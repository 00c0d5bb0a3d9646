"""Spool on failure: refused and hanging stores, flushed in order by the next call."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Optional

from google.adk.artifacts import FileArtifactService, InMemoryArtifactService
from pydantic import PrivateAttr

from aether_frame.adk.manifest_store import MANIFEST_FILENAME
from aether_frame.audit.spool import Spool
from aether_frame.cli import main
from tests.fixtures.audit_session import APP, USER, make_run, recording_writer, say, start_session, turns


class FlakyStore(InMemoryArtifactService):
  """An in-memory store that refuses every call while ``down`` (a permission error, say), or hangs saves."""

  down: bool = False
  _hang: Optional[asyncio.Event] = PrivateAttr(default=None)

  async def save_artifact(self, **kw):
    if self.down:
      raise PermissionError("403 caller does not have storage.objects.create access")
    if self._hang is not None:
      await self._hang.wait()
    return await super().save_artifact(**kw)

  async def list_versions(self, **kw):
    if self.down:
      raise PermissionError("403 caller does not have storage.objects.list access")
    return await super().list_versions(**kw)


async def _versions(svc, sid: str) -> list[dict]:
  kw = dict(app_name=APP, user_id=USER, session_id=sid, filename=MANIFEST_FILENAME)
  out = []
  for v in sorted(await svc.list_versions(**kw)):
    out.append(json.loads((await svc.load_artifact(**kw, version=v)).inline_data.data))
  return out


async def test_refused_writes_are_spooled_and_the_next_call_flushes_them_first(tmp_path):
  svc = FlakyStore()
  writer = recording_writer(spool_dir=tmp_path / "spool", timeout=2.0)
  runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  sid = await start_session(runner)
  texts = turns(6, tools=False)
  await say(runner, sid, texts[0])
  svc.down = True
  for t in texts[1:4]:
    await say(runner, sid, t)
  assert len(writer.spool.pending()) == 3 and writer.stats["spooled"] == 3 and plugin.faults == 0
  entry = Spool.read(writer.spool.pending()[0])
  assert entry["blobs"] and "403" in entry["reason"]  # inputs travel with the manifest
  svc.down = False
  for t in texts[4:]:
    await say(runner, sid, t)
  assert writer.spool.pending() == []
  stored = await _versions(svc, sid)
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]
  assert len(stored) == 6


async def _hanging(tmp_path):
  """A store whose saves hang until ``svc._hang`` is set, a writer with a 0.2 s timeout, one call made."""
  svc = FlakyStore()
  svc._hang = asyncio.Event()
  writer = recording_writer(spool_dir=tmp_path / "spool", timeout=0.2)
  runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  sid = await start_session(runner)
  await say(runner, sid, "first question about pricing")
  return svc, writer, runner, model, sid


async def test_a_hanging_store_times_out_and_its_late_write_is_not_duplicated(tmp_path):
  svc, writer, runner, model, sid = await _hanging(tmp_path)
  await say(runner, sid, "second question about latency")
  assert len(writer.spool.pending()) == 2 and len(model.received) == 2
  rep = await writer.flush(svc)
  assert rep.busy and rep.flushed == 0  # the first upload may still land: do not send it again
  svc._hang.set()  # the store comes back; the hung upload completes on its own
  rep = await writer.flush(svc, wait=5)
  assert (rep.already_stored, rep.flushed, rep.pending) == (1, 1, 0)
  stored = await _versions(svc, sid)
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]


def test_flush_command_sends_entries_to_another_store(tmp_path, capsys):
  svc = FlakyStore()
  svc.down = True
  spool = tmp_path / "spool"

  async def scenario():
    runner, _, _ = make_run(svc, writer=recording_writer(spool_dir=spool), include_artifacts=False, tools=False)
    sid = await start_session(runner)
    for t in turns(2, tools=False):
      await say(runner, sid, t)
    return sid

  sid = asyncio.run(scenario())
  assert main(["flush", "--spool", str(spool)]) == 2  # an in-memory store cannot be reached from outside
  assert "--to" in capsys.readouterr().err
  dest = tmp_path / "artifacts"
  assert main(["flush", "--spool", str(spool), "--to", str(dest)]) == 0
  assert Spool(spool).pending() == []
  stored = asyncio.run(_versions(FileArtifactService(str(dest)), sid))
  assert len(stored) == 2
  assert main(["replay", str(dest)]) == 0  # blobs went along


async def test_blobs_are_written_once_per_user_and_refreshed_before_they_age_out():
  from aether_frame.adk.manifest_store import BLOB_APP, ManifestWriter, blob_filename
  svc = InMemoryArtifactService()
  writer = ManifestWriter(spool_dir=False)
  blobs = {"a" * 64: b'{"x":1}', "b" * 64: b'{"x":2}'}
  scope = {"app_name": BLOB_APP, "user_id": USER, "session_id": APP}
  assert (await writer._put_blobs(svc, scope, blobs, "mem"))["blobs_written"] == 2
  assert (await writer._put_blobs(svc, scope, blobs, "mem"))["blobs_written"] == 0  # known in this process
  fresh = ManifestWriter(spool_dir=False)  # another process: checks the store, finds them
  assert (await fresh._put_blobs(svc, scope, blobs, "mem"))["blobs_written"] == 0
  aging = ManifestWriter(spool_dir=False, refresh_after=0.0)  # newest copy "too old": written again
  assert (await aging._put_blobs(svc, scope, blobs, "mem"))["blobs_written"] == 2
  assert await svc.list_versions(**scope, filename=blob_filename("a" * 64)) == [0, 1]
  # Blobs never show up among the session's artifacts, which the plugin lists every call.
  assert await svc.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == []


async def test_a_dedicated_manifest_store_keeps_manifests_out_of_the_apps_artifacts(tmp_path):
  app_store, own = InMemoryArtifactService(), FileArtifactService(str(tmp_path / "manifests"))
  writer = recording_writer(service=own, spool_dir=False)
  runner, plugin, _ = make_run(app_store, writer=writer, tools=False)
  sid = await start_session(runner)
  for t in turns(2, tools=False):
    await say(runner, sid, t)
  assert plugin.faults == 0
  assert await app_store.list_artifact_keys(app_name=APP, user_id=USER, session_id=sid) == []
  assert len(await _versions(own, sid)) == 2


async def test_spooled_blobs_are_kept_once_and_collected_after_the_flush(tmp_path):
  """Every entry names all its blobs, but a long outage costs disk for new content only."""
  svc = FlakyStore()
  writer = recording_writer(spool_dir=tmp_path / "spool", timeout=2.0)
  runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  sid = await start_session(runner)
  svc.down = True
  for t in turns(8, tools=False):
    await say(runner, sid, t)
  spool = writer.spool
  entries = [Spool.read(p) for p in spool.pending()]
  named = [k for e in entries for k in e["blob_keys"]]
  files = {p.name for p in (spool.root / "blobs").iterdir()}
  assert len(entries) == 8 and files == set(named) and len(named) > 2 * len(files)
  assert all(set(e["blobs"]) == set(e["blob_keys"]) for e in entries)  # read back whole
  svc.down = False
  rep = await writer.flush(svc)
  assert (rep.flushed, rep.pending) == (8, 0)
  assert len(list((spool.root / "blobs").iterdir())) == len(files)  # within the grace period: kept
  assert spool.collect(grace_s=0) == len(files) and not list((spool.root / "blobs").iterdir())
  assert len(await _versions(svc, sid)) == 8


def test_an_entry_whose_blob_file_is_gone_is_refused_by_name(tmp_path):
  from aether_frame.audit.spool import SpoolEntryError, make_entry

  spool = Spool(tmp_path / "spool")
  key = "ab" * 32
  path = spool.add(make_entry(store="mem://x", app=APP, user=USER, session="s", filename=MANIFEST_FILENAME,
                              blob_app="b", manifest={"checksum": "x"}, blobs={key: b"[1]"}))
  assert Spool.read(path)["blobs"] == {key: "[1]"}
  (spool.root / "blobs" / key).unlink()
  try:
    Spool.read(path)
  except SpoolEntryError as e:
    assert key in str(e) and path.name in str(e)
  else:
    raise AssertionError("a missing blob must be refused")


def test_half_written_files_of_a_dead_writer_are_swept_after_the_grace(tmp_path):
  spool = Spool(tmp_path / "spool")
  (spool.root / "blobs").mkdir(parents=True)
  stale = [spool.root / ".tmp-dead.json", spool.root / "blobs" / ".tmp-dead.json"]
  fresh = spool.root / ".tmp-live.json"  # a writer that is still writing
  for path in [*stale, fresh]:
    path.write_text("{half")
  old = time.time() - 2 * 3600
  for path in stale:
    os.utime(path, (old, old))
  spool.collect(grace_s=3600)
  assert [p.exists() for p in stale] == [False, False] and fresh.exists()
  assert spool.paths() == []  # never read as entries either


class SlowStore(FlakyStore):
  """Refuses while ``down``; once back, every save takes ``delay`` seconds."""

  delay: float = 0.0

  async def save_artifact(self, **kw):
    if not self.down and self.delay:
      await asyncio.sleep(self.delay)
    return await super().save_artifact(**kw)


async def test_after_an_outage_one_call_waits_at_most_about_its_timeout(tmp_path):
  """A backlog of spooled manifests was flushed whole before the first call after an outage:
  11 entries at normal latency kept one model call waiting 6.2 s with a 1 s timeout. Now the
  flush stops at the timeout and the call's own manifest waits in the spool, after the rest."""
  svc = SlowStore()
  writer = recording_writer(spool_dir=tmp_path / "spool", timeout=0.5)
  runner, plugin, _ = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  sid = await start_session(runner)
  texts = turns(18, tools=False)
  svc.down = True
  for t in texts[:14]:
    await say(runner, sid, t)
  assert len(writer.spool.pending()) == 14
  svc.down, svc.delay = False, 0.06  # back, with every write slow (each entry still inside the timeout)
  slowest = 0.0
  for t in texts[14:]:
    started = time.monotonic()
    await say(runner, sid, t)
    slowest = max(slowest, time.monotonic() - started)
  assert slowest < 1.2, slowest  # was ~2 s: all 14 spooled entries, before the call's own
  assert plugin.faults == 0
  while writer.spool.pending():  # the rest follow, oldest first, as later calls (here: a flush) come
    rep = await writer.flush(svc, wait=5)
    assert not rep.errors, rep.errors
  stored = await _versions(svc, sid)
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]


async def test_a_late_upload_removes_its_own_spool_entry(tmp_path):
  """An upload that timed out and landed later left its entry for this writer's next flush;
  an ``aether-frame flush`` run meanwhile stored that manifest a second time."""
  svc, writer, _, _, sid = await _hanging(tmp_path)
  assert len(writer.spool.pending()) == 1
  svc._hang.set()
  for _ in range(200):  # bounded: the hung upload completes on its own
    if not writer.spool.pending():
      break
    await asyncio.sleep(0.01)
  assert writer.spool.pending() == []
  rep = await recording_writer(spool_dir=tmp_path / "spool").flush(svc)  # what the CLI would do now
  assert (rep.flushed, rep.already_stored) == (0, 0)
  assert len(await _versions(svc, sid)) == 1


async def test_a_held_manifest_dropped_while_its_upload_runs_is_lost_only_if_that_upload_fails(tmp_path, caplog):
  """Store hanging, spool unwritable, ``max_held=2``: a manifest dropped from memory was counted lost
  (and logged as such) while its upload was still running, and that upload then stored it anyway."""
  import logging

  svc = FlakyStore()
  svc._hang = asyncio.Event()
  (tmp_path / "not-a-folder").write_text("x")
  writer = recording_writer(spool_dir=tmp_path / "not-a-folder" / "spool", timeout=0.2, max_held=2)
  runner, plugin, _ = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  sid = await start_session(runner)
  texts = turns(5, tools=False)
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.manifest_store"):
    for t in texts[:4]:
      await say(runner, sid, t)
    assert writer.stats["held"] == 2 and writer.stats["lost"] == 1  # call 2: never uploaded, and dropped
    svc._hang.set()  # the store answers: every upload still running lands
    for _ in range(200):
      if len(await _versions(svc, sid)) >= 2:
        break
      await asyncio.sleep(0.01)
    await say(runner, sid, texts[4])
  # Call 1's upload was running when it was dropped, and landed; call 2 never got an upload: lost.
  docs = [d["pack_id"] for d in writer.documents]
  lost = [r.getMessage() for r in caplog.records if " lost: " in r.getMessage()]
  assert writer.stats["lost"] == 1 and len(lost) == 1 and docs[1] in lost[0]
  assert [d["pack_id"] for d in await _versions(svc, sid)] == [docs[0], docs[2], docs[3], docs[4]]  # once each, in order
  assert plugin.faults == 0


# ---------------------------------------------- a store folder whose name is not UTF-8
def _non_utf8(tmp_path, name: bytes) -> str:
  return os.fsdecode(os.fsencode(tmp_path) + b"/" + name)  # lone surrogates, as os.fsdecode gives them


def test_a_store_folder_whose_name_is_not_utf8_takes_every_manifest(tmp_path, monkeypatch):
  """Hashing the store's name for the spool lookup died on it: the plugin stored no manifest at all."""
  from pathlib import Path
  from aether_frame.demo import run_demo
  monkeypatch.setenv("AETHER_FRAME_SPOOL_DIR", str(tmp_path / "spool"))
  out = Path(_non_utf8(tmp_path, b"out\xff"))
  session_dir, manifests = asyncio.run(run_demo(out, turns=2))
  stored = list(session_dir.glob("artifacts/context_pack/manifest.json/versions/*/manifest.json"))
  assert len(manifests) >= 2 and len(stored) == len(manifests)
  assert os.fsencode(session_dir).startswith(os.fsencode(tmp_path) + b"/out\xff/")
  assert not (tmp_path / "spool").exists() or not Spool(tmp_path / "spool").paths()


def test_an_entry_for_a_store_whose_name_is_not_utf8_is_spooled_and_flushed_there(tmp_path):
  from aether_frame.audit.spool import make_entry
  from aether_frame.core import manifest as manifest_doc
  store = _non_utf8(tmp_path, b"store\xe9")
  doc = manifest_doc.finalize({"pack_id": "p1"}, {})
  spool = Spool(tmp_path / "spool")
  path = spool.add(make_entry(store=store, app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME,
                              blob_app="blobs", manifest=doc, blobs={}))
  assert Spool.read(path)["store"] == store and spool.pending(store) == [path]
  assert main(["flush", "--spool", str(tmp_path / "spool")]) == 0
  svc = FileArtifactService(store)
  kw = dict(app_name=APP, user_id=USER, session_id="s1", filename=MANIFEST_FILENAME)
  assert json.loads(asyncio.run(svc.load_artifact(**kw)).inline_data.data) == doc
  assert spool.paths() == []


class ThreadedSlowStore(FileArtifactService):
  """Saves in a worker thread that sleeps first, as GcsArtifactService's (retrying) uploads do: a
  task cancelled with its loop stops waiting, but its thread still writes the object."""

  delay: float = 0.0
  down: bool = False

  def _save_artifact_sync(self, app_name, user_id, filename, *args):
    if self.down:
      raise PermissionError("403 caller does not have storage.objects.create access")
    if filename == MANIFEST_FILENAME:  # blobs are quick; the manifest's upload is the slow one
      time.sleep(self.delay)
    return super()._save_artifact_sync(app_name, user_id, filename, *args)


def test_an_upload_cancelled_with_its_loop_keeps_the_spool_locked_so_it_is_not_sent_twice(tmp_path, monkeypatch):
  """``flush`` timed out on an upload and ended (``asyncio.run`` cancels the task); the lock was
  released then, while ADK's worker thread went on and stored the object: a flush in another
  process meanwhile sent the same manifest again (GCS review: versions [0, 1, 2, 3, 0])."""
  from aether_frame.adk import manifest_store

  svc = ThreadedSlowStore(str(tmp_path / "store"))
  spool_dir = tmp_path / "spool"

  async def make_calls():
    writer = recording_writer(spool_dir=spool_dir, timeout=0.3)
    runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
    sid = await start_session(runner)
    svc.down = True  # the store refuses: the calls' manifests wait in the spool
    for t in turns(2, tools=False):
      await say(runner, sid, t)
    svc.down = False
    return writer, sid

  writer, sid = asyncio.run(make_calls())
  assert len(Spool(spool_dir).pending()) == 2
  svc.delay = 1.5
  rep = asyncio.run(writer.flush(svc))  # times out on the first entry; the loop closes under its upload
  assert rep.busy or rep.errors, rep
  assert not Spool(spool_dir).acquire(), "the lock must stay held: the cancelled upload ran on in its thread"
  svc.delay = 0.0
  rep = asyncio.run(writer.flush(svc))
  assert rep.busy and rep.flushed == 0  # within LINGER_SECONDS: the first may still land
  monkeypatch.setattr(manifest_store, "LINGER_SECONDS", 0.0)
  rep = asyncio.run(writer.flush(svc))
  assert (rep.already_stored, rep.flushed, rep.pending) == (1, 1, 0), rep
  stored = asyncio.run(_versions(svc, sid))
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]  # once each, in order
  assert Spool(spool_dir).acquire()  # and the lock is free again


def test_a_spool_entry_is_on_disk_with_its_folder_entry_when_add_returns(tmp_path, monkeypatch):
  """The file was fsynced but its folder was not: after a power loss the rename
  (the entry's name in the folder) could be gone, and the manifest with it."""
  import stat

  synced: list[tuple[bool, str]] = []
  real = os.fsync

  def recording(fd):
    st = os.fstat(fd)
    synced.append((stat.S_ISDIR(st.st_mode), os.readlink(f"/proc/self/fd/{fd}")))
    return real(fd)

  monkeypatch.setattr(os, "fsync", recording)
  spool = Spool(tmp_path / "spool")
  from aether_frame.audit.spool import make_entry

  path = spool.add(make_entry(store="mem://x", app=APP, user=USER, session="s", filename=MANIFEST_FILENAME,
                              blob_app="b", manifest={"checksum": "x"}, blobs={"ab" * 32: b"[1]"}))
  folders = [p for is_dir, p in synced if is_dir]
  assert str(path.parent) in folders and str(path.parent / "blobs") in folders
  # The folder is synced after the file it names.
  assert max(i for i, (d, p) in enumerate(synced) if d and p == str(path.parent)) > max(
      i for i, (d, p) in enumerate(synced) if not d)
