"""Adversarial review of the manifest store and the audit tools: each test is a bug found.

Users whose ids look like glob patterns, corrupt blobs (in the store and in the
spool), and a report whose default file name comes from stored data.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from google.adk.artifacts import FileArtifactService
from google.genai import types

from aether_frame.adk.manifest_store import BLOB_APP, MANIFEST_FILENAME, ManifestWriter
from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from aether_frame.audit.spool import DAMAGED_DIR, Spool, make_entry
from aether_frame.cli import main
from aether_frame.core import manifest as manifest_doc
from tests.fixtures.audit_session import APP, USER, make_run, recording_writer, run_session, turns


def _run(coro):
  return asyncio.run(coro)


async def _session_of(svc, user: str, n: int = 2) -> str:
  """A short real session for ``user`` (the shared fixture always uses ``USER``)."""
  runner, plugin, _ = make_run(svc, writer=recording_writer(spool_dir=False), tools=False)
  s = await runner.session_service.create_session(app_name=APP, user_id=user, state={})
  for text in turns(n, tools=False):
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=s.id, new_message=msg):
      pass
  assert plugin.faults == 0
  return s.id


# ------------------------------------------------------------ folder sources
def test_a_user_folder_is_matched_literally_not_as_a_glob(tmp_path):
  """``apps/APP/users/a[1]`` once replayed user ``a1``'s manifests (glob ``[1]`` matches ``1``)."""
  root = tmp_path / "artifacts"
  svc = FileArtifactService(str(root))
  sid_bracket = _run(_session_of(svc, "a[1]"))
  sid_other = _run(_session_of(svc, "a1"))
  source = open_location(str(root / "apps" / APP / "users" / "a[1]"))
  refs = _run(source.sessions())
  assert [(r.user, r.session) for r in refs] == [("a[1]", sid_bracket)], refs
  assert sid_other not in {r.session for r in refs}
  reports = _run(replay(source))
  assert [r.status for r in reports] == ["identical", "identical"]
  assert all("/a[1]/" in r.label for r in reports)


# --------------------------------------------------------------- blob reads
def _blob_files(root):
  bdir = root / "apps" / BLOB_APP / "users" / USER / "sessions" / APP / "artifacts"
  return [p for p in bdir.rglob("*.json") if p.is_file() and "versions" in p.parts]


def test_a_corrupt_gzip_blob_is_refused_by_name_not_an_eof_error(tmp_path, capsys):
  """A damaged gzip'd blob gave ``ERROR … EOFError`` (no blob named), not a refused tampered input."""
  root = tmp_path / "artifacts"
  _run(run_session(FileArtifactService(str(root)), 3, tools=False))
  gz = [p for p in _blob_files(root) if p.read_bytes()[:2] == b"\x1f\x8b"]
  assert gz, "the session must store at least one gzip'd blob"
  victim = gz[0]
  key = victim.name.removesuffix(".json")
  data = victim.read_bytes()
  victim.write_bytes(data[:-12] + b"x" * 12)  # trailer (CRC, size) damaged
  assert main(["replay", str(root)]) == 2
  out = capsys.readouterr().out
  assert "EOFError" not in out and "BadGzipFile" not in out
  assert "REFUSED" in out and key in out and "tampered" in out


# -------------------------------------------------------------------- spool
@pytest.mark.parametrize("damage", [b'{"text":"something else"}', b'{"text":"the system \xff\xfe instruction"}'],
                         ids=["other-text", "not-utf8"])
def test_a_corrupt_spool_blob_is_refused_and_never_uploaded(tmp_path, capsys, damage):
  """A damaged ``spool/blobs/<key>`` file was uploaded under that key: every later manifest sharing it broke.
  Damaged into bytes that are not UTF-8, it stopped flush with a bare "'utf-8' codec can't decode"."""
  data = b'{"text":"the system instruction"}'
  key = hashlib.sha256(data).hexdigest()
  store = tmp_path / "store"
  spool = Spool(tmp_path / "spool")
  path = spool.add(make_entry(store=str(store), app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME,
                              blob_app=BLOB_APP, manifest=manifest_doc.finalize({"x": 1}, {}), blobs={key: data}))
  (spool.root / "blobs" / key).write_bytes(damage)
  assert main(["flush", "--spool", str(spool.root)]) == 1
  out = capsys.readouterr().out
  assert "0 uploaded" in out and path.name in out and key in out and "corrupt" in out
  svc = FileArtifactService(str(store))
  scope = dict(app_name=BLOB_APP, user_id=USER, session_id=APP)
  assert _run(svc.list_versions(**scope, filename=f"context_pack/blobs/{key}.json")) == []
  assert _run(svc.list_versions(app_name=APP, user_id=USER, session_id="s1", filename=MANIFEST_FILENAME)) == []
  assert spool.pending() == [] and (spool.root / DAMAGED_DIR / path.name).exists()  # kept for a look, out of the way
  assert f"moved to {spool.root / DAMAGED_DIR / path.name}" in out
  # With its blobs: the collector takes them from blobs/ once no waiting entry names them.
  assert spool.collect(grace_s=0) == 1 and not (spool.root / "blobs" / key).exists()
  assert (spool.root / DAMAGED_DIR / "blobs" / key).read_bytes() == damage


def test_the_writers_own_flush_refuses_a_corrupt_spool_blob(tmp_path):
  data = b'[1,2,3]'
  key = hashlib.sha256(data).hexdigest()
  store = FileArtifactService(str(tmp_path / "store"))
  writer = ManifestWriter(spool_dir=tmp_path / "spool")
  from aether_frame.adk.manifest_store import store_uri
  writer.spool.add(make_entry(store=store_uri(store), app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME,
                              blob_app=BLOB_APP, manifest=manifest_doc.finalize({"x": 1}, {}), blobs={key: data}))
  (writer.spool.root / "blobs" / key).write_bytes(b"[1,2,4]")
  rep = _run(writer.flush(store))
  assert (rep.flushed, rep.pending) == (0, 0) and key in rep.errors[0] and "corrupt" in rep.errors[0]
  assert "moved to" in rep.errors[0] and len(list((writer.spool.root / DAMAGED_DIR).glob("*.json"))) == 1
  assert (writer.spool.root / DAMAGED_DIR / "blobs" / key).read_bytes() == b"[1,2,4]"  # its blob kept with it


# ------------------------------------------------------------------- report
def test_report_default_file_stays_in_the_working_folder(tmp_path, monkeypatch, capsys):
  """``report`` named its file after the stored session id: ``../evil`` wrote outside the folder."""
  work = tmp_path / "work"
  work.mkdir()
  monkeypatch.chdir(work)
  lone = tmp_path / "lone.json"
  body = {"session_id": "../evil", "window": 10, "reserve": 0, "usable": 10, "layers": {}, "items": [],
          "truncation_events": [], "totals": {"tokens": 0}}  # the least a manifest holds
  lone.write_text(json.dumps(manifest_doc.finalize(body, {})), encoding="utf-8")
  assert main(["report", str(lone)]) == 0
  capsys.readouterr()
  assert not (tmp_path / "evil.html").exists()
  written = [p.name for p in work.iterdir()]
  assert len(written) == 1 and written[0].endswith(".html") and "/" not in written[0]


# ---------------------------------------------------------------- dedupe
def test_a_spooled_manifest_with_the_same_body_as_the_stored_one_is_not_dropped(tmp_path):
  """Flush dropped an entry as "already stored" when only its body checksum matched the newest version.

  The checksum covers the body alone; a retried model call compiles the same
  body with another runtime section, and that manifest was silently lost.
  """
  from aether_frame.adk.manifest_store import store_uri
  svc = FileArtifactService(str(tmp_path / "store"))
  writer = ManifestWriter(spool_dir=tmp_path / "spool")
  body = {"schema": "x", "pack_id": "p1"}
  first, second = manifest_doc.finalize(body, {"compile_ms": 1.0}), manifest_doc.finalize(body, {"compile_ms": 2.0})
  assert first["checksum"] == second["checksum"] and first != second
  kw = dict(store=store_uri(svc), app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME, blob_app=BLOB_APP, blobs={})
  assert _run(writer._store(svc, make_entry(manifest=first, **kw))) == 0
  writer.spool.add(make_entry(manifest=second, **kw))
  rep = _run(writer.flush(svc))
  assert (rep.flushed, rep.already_stored, rep.pending) == (1, 0, 0)
  scope = dict(app_name=APP, user_id=USER, session_id="s1", filename=MANIFEST_FILENAME)
  assert _run(svc.list_versions(**scope)) == [0, 1]
  stored = json.loads(_run(svc.load_artifact(**scope, version=1)).inline_data.data)
  assert stored["runtime"] == {"compile_ms": 2.0}
  # The same bytes again (an upload that landed after all) are still recognised.
  writer.spool.add(make_entry(manifest=second, **kw))
  rep = _run(writer.flush(svc))
  assert (rep.flushed, rep.already_stored) == (0, 1) and _run(svc.list_versions(**scope)) == [0, 1]


def test_a_store_root_lists_users_whose_ids_hold_a_slash(tmp_path, capsys):
  """ADK stores user ``team/alice`` under ``users/team/alice/``; replaying the root skipped it silently."""
  root = tmp_path / "artifacts"
  svc = FileArtifactService(str(root))
  sid = _run(_session_of(svc, "team/alice"))
  plain = _run(_session_of(svc, "bob"))
  refs = _run(open_location(str(root)).sessions())
  assert sorted((r.user, r.session) for r in refs) == sorted([("team/alice", sid), ("bob", plain)])
  assert main(["replay", str(root)]) == 0
  assert "4 calls: 4 identical" in capsys.readouterr().out


def test_a_symlink_back_to_its_own_folder_does_not_make_the_walk_endless(tmp_path):
  """Three ``users/loopN -> .`` links made listing a store 3^depth folders deep (killed at
  60 s, security review); a symlinked folder is listed, not walked into."""
  import os

  root = tmp_path / "artifacts"
  svc = FileArtifactService(str(root))
  sid = _run(_session_of(svc, "bob"))
  users = root / "apps" / APP / "users"
  for n in range(3):
    os.symlink(".", users / f"loop{n}")
  refs = _run(open_location(str(root)).sessions())
  assert [(r.user, r.session) for r in refs] == [("bob", sid)]


# ---------------------------------------------------------- the blob scope's name
def test_an_app_named_like_the_blob_scope_gets_its_packs_but_no_manifests(tmp_path):
  """ADK accepts the app name ``context-pack-blobs``: its sessions shared the scope the input
  blobs live in (listed as artifacts, aged by their lifecycle rule). The writer refuses it by name."""
  from google.adk.agents import LlmAgent
  from google.adk.apps import App
  from google.adk.runners import Runner
  from google.adk.sessions import InMemorySessionService

  from aether_frame.adk.plugin import LAST_FAULT_KEY, ContextPackPlugin
  from aether_frame.core.render import PACK_TITLE
  from aether_frame.offline_model import OfflineLlm

  model = OfflineLlm(default=lambda req: "ok")
  plugin = ContextPackPlugin(window=4096)
  svc = FileArtifactService(str(tmp_path / "store"))
  runner = Runner(app=App(name=BLOB_APP, root_agent=LlmAgent(name="a", model=model, instruction="Be brief."), plugins=[plugin]),
                  session_service=InMemorySessionService(), artifact_service=svc)

  async def go():
    s = await runner.session_service.create_session(app_name=BLOB_APP, user_id=USER)
    async for _ in runner.run_async(user_id=USER, session_id=s.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="hello")])):
      pass
    return await runner.session_service.get_session(app_name=BLOB_APP, user_id=USER, session_id=s.id)

  session = _run(go())
  assert PACK_TITLE in model.received[-1].contents[-1].parts[0].text  # the pack was still sent
  assert plugin.faults == 1
  fault = session.state[LAST_FAULT_KEY]
  assert fault["error"] == "ValueError" and f"app name '{BLOB_APP}'" in fault["message"] and "rename the app" in fault["message"]
  assert not list((tmp_path / "store").rglob("manifest.json*")) and not list((tmp_path / "store").rglob("*.json"))


# ------------------------------------------------------------------ rewind
def test_a_rewinds_copy_of_a_manifest_is_not_counted_as_a_call(tmp_path, capsys):
  """``Runner.rewind_async`` restores every session artifact to its version at the rewind point by
  saving it again: the report showed that copy as a call, with a cache break against it."""
  from google.adk.agents import LlmAgent

  from aether_frame.adk.plugin import ContextPackPlugin
  from aether_frame.offline_model import OfflineLlm
  from tests.adk_support import make_runner, new_session, say

  store = tmp_path / "store"
  model = OfflineLlm(default="ok")
  runner = make_runner(LlmAgent(name="a", model=model, instruction="Answer."), [ContextPackPlugin(window=100_000)],
                       artifact_service=FileArtifactService(str(store)))

  async def go():
    s = await new_session(runner, session_id="s1")
    for t in range(4):
      await say(runner, s.id, f"turn {t}")
    events = (await runner.session_service.get_session(app_name=runner.app_name, user_id=s.user_id, session_id=s.id)).events
    second = next(e.invocation_id for e in events if e.author == "user" and e.content.parts[0].text == "turn 2")
    await runner.rewind_async(user_id=s.user_id, session_id=s.id, rewind_before_invocation_id=second)
    await say(runner, s.id, "turn new")
    return s

  s = _run(go())
  versions = sorted(store.rglob("s1/artifacts/context_pack/manifest.json/versions/*/manifest.json"))
  assert len(model.received) == 5 and len(versions) == 6  # 5 calls and the rewind's copy of v1
  out = tmp_path / "r.html"
  assert main(["report", str(store), "-o", str(out)]) == 0
  assert capsys.readouterr().out.rstrip().endswith(" bytes, 5 calls)")
  page = out.read_text(encoding="utf-8")
  assert "5 calls · " in page and "1 version a rewind saved again" in page
  assert "not a call: a rewind saved v1 again" in page
  assert page.count("call 5<br>") == 1 and "call 6<br>" not in page
