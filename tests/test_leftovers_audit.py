"""Leftovers of the audit tools and the manifest store, each a defect found and fixed.

- replaying a folder read each version through ``FileArtifactService.load_artifact``,
  which lists every version to find one: quadratic in the calls of a session;
- a bucket's sessions were listed one segment per id, so ids holding '/' were skipped;
- a manifest whose store write and spool write both failed was dropped.

Real stores throughout: ADK's FileArtifactService, and GcsArtifactService on
the gcp-storage-emulator. A store or spool "fails" because a regular file
sits where its folder should be (chmod does not stop root).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from pathlib import Path

import pytest
from google.adk.artifacts import FileArtifactService, GcsArtifactService
from google.adk.artifacts import artifact_util
from google.genai import types

from aether_frame.adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
from aether_frame.audit.replay import replay
from aether_frame.audit.source import FolderSource, GcsSource, LocationError, SessionRef, open_location
from aether_frame.audit.spool import Spool
from aether_frame.cli import main
from aether_frame.core import manifest as manifest_doc
from tests.fixtures.audit_session import APP, USER, make_run, recording_writer, run_session, say, start_session, turns
from tests.fixtures.gcs_emulator import gcs_emulator  # noqa: F401

BUCKET = "af-leftovers"


def _run(coro):
  return asyncio.run(coro)


# ------------------------------------------------------------------ replay of a long session
_LISTED: list[str] = []
_WATCH = threading.Event()


def _audit(event: str, args) -> None:
  if _WATCH.is_set() and event in ("os.listdir", "os.scandir") and args and "versions" in str(args[0]):
    _LISTED.append(str(args[0]))


sys.addaudithook(_audit)  # cannot be removed; idle unless _WATCH is set


def test_a_folder_version_is_read_from_its_own_folder_not_by_listing_all(tmp_path):
  """Loading version v listed all n version folders (ADK's load_artifact): n² reads for a replay."""
  root = tmp_path / "artifacts"
  run = _run(run_session(FileArtifactService(str(root)), 3, tools=False))
  source = open_location(str(root))
  assert isinstance(source, FolderSource)
  (ref,) = _run(source.sessions())
  versions = _run(source.versions(ref))
  assert versions == list(range(len(run.documents))) and len(versions) >= 3
  _LISTED.clear()
  _WATCH.set()
  try:
    calls = [_run(source.load(ref, v)) for v in versions]
  finally:
    _WATCH.clear()
  assert _LISTED == []  # was: one listing of versions/ per load
  assert [c.doc for c in calls] == run.documents  # the very documents written, in order
  adk = FileArtifactService(str(root))
  for v, call in zip(versions, calls):
    part = _run(adk.load_artifact(app_name=APP, user_id=USER, session_id=ref.session, filename=MANIFEST_FILENAME, version=v))
    assert json.loads(part.inline_data.data) == call.doc
  with pytest.raises(LocationError, match=r"v99: manifest version not found"):
    _run(source.load(ref, 99))
  reports = _run(replay(source))
  assert [r.status for r in reports] == ["identical"] * len(versions)


def test_a_rewound_version_reads_as_absent_as_adk_reads_it(tmp_path):
  """A session rewind saves an empty marker version; ADK loads it as None, so must the direct read."""
  root = tmp_path / "artifacts"
  svc = FileArtifactService(str(root))
  kw = dict(app_name=APP, user_id=USER, session_id="s1", filename=MANIFEST_FILENAME)
  doc = manifest_doc.finalize({"session_id": "s1"}, {})
  data = manifest_doc.dumps(doc)
  assert _run(svc.save_artifact(**kw, artifact=types.Part(inline_data=types.Blob(mime_type="application/json", data=data)))) == 0
  assert _run(svc.save_artifact(**kw, artifact=artifact_util._new_rewind_tombstone())) == 1
  assert _run(svc.load_artifact(**kw, version=1)) is None
  source = open_location(str(root))
  ref = SessionRef(APP, USER, "s1")
  assert _run(source.load(ref, 0)).doc == doc
  with pytest.raises(LocationError, match="v1: manifest version not found"):
    _run(source.load(ref, 1))


# --------------------------------------------------------------------- GCS ids holding '/'
async def _session_of(svc, user: str, session_id: str, n: int = 2) -> int:
  runner, plugin, _ = make_run(svc, writer=recording_writer(spool_dir=False), tools=False)
  await runner.session_service.create_session(app_name=APP, user_id=user, state={}, session_id=session_id)
  for text in turns(n, tools=False):
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=session_id, new_message=msg):
      pass
  assert plugin.faults == 0
  return n


def test_gcs_lists_users_and_sessions_whose_ids_hold_a_slash(gcs_emulator, capsys):  # noqa: F811
  gcs_emulator.create_bucket(BUCKET)
  svc = GcsArtifactService(BUCKET)
  stored = {("team/alice", "s1"), ("bob", "proj/s2"), ("carol", "s3"), ("team", "alice/s9")}
  n = sum(_run(_session_of(svc, user, sid)) for user, sid in sorted(stored))
  # "team/alice/s1" and "team/alice/s9" share their first segments: only the manifest tells the two apart.
  assert any(name.startswith(f"{APP}/team/alice/s9/") for name in gcs_emulator.blob_names(BUCKET))

  def listed(loc: str) -> set[tuple[str, str]]:
    source = open_location(loc)
    assert isinstance(source, GcsSource)
    return {(r.user, r.session) for r in _run(source.sessions())}

  assert listed(f"gs://{BUCKET}") == stored  # was: only carol/s3
  assert listed(f"gs://{BUCKET}/{APP}") == stored
  assert listed(f"gs://{BUCKET}/{APP}/team") == {("team", "alice/s9")}  # not team/alice's s1
  assert listed(f"gs://{BUCKET}/{APP}/team%2Falice") == {("team/alice", "s1")}
  assert listed(f"gs://{BUCKET}/{APP}/bob") == {("bob", "proj/s2")}
  assert listed(f"gs://{BUCKET}/{APP}/bob/proj%2Fs2") == {("bob", "proj/s2")}

  assert main(["replay", f"gs://{BUCKET}"]) == 0
  out = capsys.readouterr().out
  assert f"{n} calls: {n} identical" in out
  assert f"identical  {APP}/team%2Falice/s1 v0" in out and f"identical  {APP}/team/alice%2Fs9 v0" in out
  assert main(["inspect", f"gs://{BUCKET}/{APP}/team%2Falice/s1@1"]) == 0  # a label pastes back as a location
  assert "checksum ok" in capsys.readouterr().out


def test_gcs_refuses_a_name_it_cannot_split_instead_of_guessing(gcs_emulator, capsys):  # noqa: F811
  gcs_emulator.create_bucket(BUCKET)
  svc = GcsArtifactService(BUCKET)
  doc = manifest_doc.finalize({"window": 10}, {})  # records no session_id
  part = types.Part(inline_data=types.Blob(mime_type="application/json", data=manifest_doc.dumps(doc)))
  _run(svc.save_artifact(app_name=APP, user_id="a/b", session_id="c", filename=MANIFEST_FILENAME, artifact=part))
  with pytest.raises(LocationError, match=rf"gs://{BUCKET}/{APP}/a/b/c: cannot tell where the user id ends"):
    _run(open_location(f"gs://{BUCKET}").sessions())
  assert main(["replay", f"gs://{BUCKET}"]) == 2
  assert "%2F" in capsys.readouterr().err
  # Naming the user settles it.
  source = open_location(f"gs://{BUCKET}/{APP}/a%2Fb")
  assert [(r.user, r.session) for r in _run(source.sessions())] == [("a/b", "c")]
  assert _run(source.load(SessionRef(APP, "a/b", "c"), 0)).doc == doc


# ------------------------------------------------------- store and spool both failing
def _break(folder: Path) -> None:
  """A regular file where the folder was (moved aside): every write below it fails, even as root."""
  folder.rename(folder.with_name(folder.name + ".away"))
  folder.write_text("not a folder")


def _mend(folder: Path) -> None:
  folder.unlink()
  folder.with_name(folder.name + ".away").rename(folder)


async def _stored(svc, sid: str) -> list[dict]:
  kw = dict(app_name=APP, user_id=USER, session_id=sid, filename=MANIFEST_FILENAME)
  return [json.loads((await svc.load_artifact(**kw, version=v)).inline_data.data) for v in sorted(await svc.list_versions(**kw))]


def _setup(tmp_path, **kw):
  store_root, blocker = tmp_path / "store", tmp_path / "blocker"
  svc = FileArtifactService(str(store_root))
  blocker.mkdir()
  writer = recording_writer(spool_dir=blocker / "spool", timeout=5.0, **kw)
  runner, plugin, _ = make_run(svc, writer=writer, include_artifacts=False, tools=False)
  return svc, store_root, blocker, writer, runner, plugin


async def test_unwritable_spool_keeps_manifests_in_memory_and_stores_them_in_order_later(tmp_path, caplog):
  svc, store_root, blocker, writer, runner, plugin = _setup(tmp_path)
  sid = await start_session(runner)
  texts = turns(5, tools=False)
  await say(runner, sid, texts[0])
  _break(store_root)
  _break(blocker)
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.manifest_store"):
    for t in texts[1:4]:
      await say(runner, sid, t)
  assert plugin.faults == 0  # the user's run goes on, and nothing raised out of the writer
  assert (writer.stats["held"], writer.stats["lost"], writer.stats["stored"]) == (3, 0, 1)
  errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
  assert len(errors) == 1, errors  # once per outage, not per call
  assert "not stored yet (NotADirectoryError" in errors[0]  # the first failure, named
  assert f"spool {blocker / 'spool'} failed too (NotADirectoryError" in errors[0]  # and the second
  assert writer.documents[1]["pack_id"] in errors[0]
  _mend(store_root)  # the store is back; the spool still is not
  await say(runner, sid, texts[4])
  assert writer.stats["held"] == 0 and writer.stats["lost"] == 0
  stored = await _stored(svc, sid)
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]  # all five, in call order
  assert len(stored) == 5
  reports = await replay(open_location(str(store_root)))
  assert [r.status for r in reports] == ["identical"] * 5  # their inputs went along


async def test_held_manifests_go_to_the_spool_when_it_is_writable_again(tmp_path):
  svc, store_root, blocker, writer, runner, plugin = _setup(tmp_path)
  sid = await start_session(runner)
  texts = turns(4, tools=False)
  _break(store_root)
  _break(blocker)
  for t in texts[:2]:
    await say(runner, sid, t)
  assert writer.stats["held"] == 2 and Spool(blocker / "spool").pending() == []
  _mend(blocker)  # the spool is back, the store is not
  await say(runner, sid, texts[2])
  assert writer.stats["held"] == 0 and len(writer.spool.pending()) == 3
  assert [Spool.read(p)["manifest"]["pack_id"] for p in writer.spool.pending()] == [d["pack_id"] for d in writer.documents]
  _mend(store_root)
  await say(runner, sid, texts[3])
  assert writer.spool.pending() == [] and plugin.faults == 0
  assert [d["pack_id"] for d in await _stored(svc, sid)] == [d["pack_id"] for d in writer.documents]


async def test_what_is_held_is_bounded_and_every_loss_is_counted_and_logged(tmp_path, caplog):
  svc, store_root, blocker, writer, runner, plugin = _setup(tmp_path, max_held=2)
  sid = await start_session(runner)
  texts = turns(5, tools=False)
  _break(store_root)
  _break(blocker)
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.manifest_store"):
    for t in texts[:4]:
      await say(runner, sid, t)
  assert (writer.stats["held"], writer.stats["lost"]) == (2, 2) and plugin.faults == 0
  lost = [r.getMessage() for r in caplog.records if " lost: " in r.getMessage()]
  # The first loss is named at once; later ones are counted in the next line, at most every 10 minutes.
  assert len(lost) == 1 and writer.documents[0]["pack_id"] in lost[0] and "1 lost so far" in lost[0]
  rep = await writer.flush(svc)  # an unusable spool is a report, not an exception
  assert rep.held == 2 and rep.errors and "cannot be used" in rep.errors[0]
  _mend(store_root)
  rep = await writer.flush(svc)
  assert rep.held == 0
  await say(runner, sid, texts[4])
  kept = [d["pack_id"] for d in writer.documents[2:]]  # the two oldest were dropped, the rest stored in order
  assert [d["pack_id"] for d in await _stored(svc, sid)] == kept


def test_max_held_must_be_positive():
  with pytest.raises(ValueError, match="max_held must be an int >= 1, got 0"):
    ManifestWriter(max_held=0)


def test_an_upload_that_timed_out_while_the_spool_was_unwritable_is_not_sent_twice(gcs_emulator, tmp_path):  # noqa: F811
  """GCS down (its client retries for minutes) and no spool: the late upload lands once, the rest follow in order."""
  gcs_emulator.create_bucket(BUCKET)
  blocker = tmp_path / "blocker"
  blocker.mkdir()

  async def scenario():
    svc = GcsArtifactService(BUCKET)
    writer = recording_writer(spool_dir=blocker / "spool", timeout=30.0)
    runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
    sid = await start_session(runner)
    texts = turns(5, tools=False)
    for t in texts[:2]:
      await say(runner, sid, t)
    assert writer.stats["stored"] == 2
    writer.timeout = 1.0
    gcs_emulator.stop()
    _break(blocker)
    for t in texts[2:4]:
      await say(runner, sid, t)
    assert (writer.stats["held"], writer.stats["lost"], plugin.faults, len(model.received)) == (2, 0, 0, 4)
    first = writer._held[0].task
    assert first is not None and not first.done()  # the first upload is still trying
    gcs_emulator.start()
    await asyncio.wait({first}, timeout=90)  # bounded: the client's backoff reaches the store again
    assert first.done() and first.exception() is None
    writer.timeout = 30.0
    await say(runner, sid, texts[4])
    assert writer.stats["held"] == 0 and plugin.faults == 0
    stored = [d["pack_id"] for d in await _gcs_stored(svc, sid)]
    assert stored == [d["pack_id"] for d in writer.documents]  # five, once each, in call order

  asyncio.run(scenario())


async def _gcs_stored(svc, sid: str) -> list[dict]:
  kw = dict(app_name=APP, user_id=USER, session_id=sid, filename=MANIFEST_FILENAME)
  return [json.loads((await svc.load_artifact(**kw, version=v)).inline_data.data) for v in sorted(await svc.list_versions(**kw))]


def test_gcs_listing_skips_a_rewind_marker_when_settling_a_slashed_id(gcs_emulator):  # noqa: F811
  """The newest version of a rewound session is ADK's empty marker: the listing reads back
  to the last manifest instead of failing for the whole bucket ("session_id None")."""
  gcs_emulator.create_bucket(BUCKET)
  svc = GcsArtifactService(BUCKET)
  _run(_session_of(svc, "team/alice", "s1"))
  kw = dict(app_name=APP, user_id="team/alice", session_id="s1", filename=MANIFEST_FILENAME)
  _run(svc.save_artifact(**kw, artifact=artifact_util._new_rewind_tombstone()))
  refs = _run(open_location(f"gs://{BUCKET}").sessions())
  assert [(r.user, r.session) for r in refs] == [("team/alice", "s1")]
