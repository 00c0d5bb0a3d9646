"""The manifest tools on bad input and awkward stores: one line and exit 2, never a traceback.

Exit 1 means "a difference" to a CI gate, so a crash must not look like one.
Also: spool entries that travel to another store with every blob they
reference, folders below a directory that happens to be called ``apps``, a
store root as ``--blobs``, and a report that keeps going past a broken call.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from google.adk.artifacts import FileArtifactService

from aether_frame.adk.manifest_store import BLOB_APP, MANIFEST_FILENAME
from aether_frame.audit.spool import Spool, make_entry
from aether_frame.cli import main
from tests.fixtures.audit_session import APP, USER, make_run, recording_writer, run_session, say, start_session, turns
from tests.fixtures.gcs_emulator import gcs_emulator  # noqa: F401
from tests.test_audit_spool import FlakyStore


def _session_dir(root, sid: str):
  return root / "apps" / APP / "users" / USER / "sessions" / sid


def _version_file(root, sid: str, v: int):
  return _session_dir(root, sid) / "artifacts" / MANIFEST_FILENAME / "versions" / str(v) / "manifest.json"


def _one_line_error(capsys) -> str:
  err = capsys.readouterr().err
  assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
  return err


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
  """A small session in a folder store, read-only for the tests that share it."""
  root = tmp_path_factory.mktemp("stored") / "artifacts"
  run = asyncio.run(run_session(FileArtifactService(str(root)), 3, tools=False))
  return root, run


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
  """No Application Default Credentials anywhere, and no metadata-server probe."""
  for var in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setenv("NO_GCE_CHECK", "True")
  monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))


# ------------------------------------------------------------- flush --to
def _spool_after_outage(spool) -> str:
  """One call stored, then the store goes down for two more: the reviewer's scenario."""
  async def scenario():
    svc = FlakyStore()
    runner, _, _ = make_run(svc, writer=recording_writer(spool_dir=spool), include_artifacts=False, tools=False)
    sid = await start_session(runner)
    texts = turns(3, tools=False)
    await say(runner, sid, texts[0])  # stored: the writer now knows the store has these blobs
    svc.down = True
    for t in texts[1:]:
      await say(runner, sid, t)
    return sid
  return asyncio.run(scenario())


def test_flush_to_another_store_takes_every_blob_along(tmp_path, capsys):
  spool, dest = tmp_path / "spool", tmp_path / "elsewhere"
  _spool_after_outage(spool)
  assert len(Spool(spool).pending()) == 2
  assert main(["flush", "--spool", str(spool), "--to", str(dest)]) == 0
  assert main(["replay", str(dest)]) == 0
  assert "2 calls: 2 identical" in capsys.readouterr().out


def test_flush_to_another_store_refuses_an_entry_whose_blobs_are_not_there(tmp_path, capsys):
  spool, dest = tmp_path / "spool", tmp_path / "elsewhere"
  sid = _spool_after_outage(spool)
  first = Spool(spool).pending()[0]
  entry = Spool.read(first)
  entry["blobs"] = {}  # as an earlier writer spooled it: without the blobs its own store had
  del entry["blob_keys"]
  first.write_text(json.dumps(entry), encoding="utf-8")
  assert main(["flush", "--spool", str(spool), "--to", str(dest)]) == 1
  out = capsys.readouterr().out
  assert "0 uploaded" in out and first.name in out and "blob" in out and "missing" in out
  assert len(Spool(spool).pending()) == 2  # kept, and in order: nothing after it went either
  assert not _session_dir(dest, sid).exists()


def test_flush_to_a_bucket_prefix_is_refused(tmp_path, capsys, no_credentials):
  spool = Spool(tmp_path / "spool")
  spool.add(make_entry(store=str(tmp_path / "store"), app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME,
                       blob_app=BLOB_APP, manifest={}, blobs={}))
  assert main(["flush", "--spool", str(spool.root), "--to", "gs://bucket/some/prefix"]) == 2
  assert "prefix" in _one_line_error(capsys)


@pytest.mark.parametrize("text, says", [
    ("[]", "not a spool entry"),
    ('{"schema": "aether-frame/spool@1", "store": "/tmp/x", "app"', "not JSON"),
    (json.dumps({k: v for k, v in make_entry(store="x", app=APP, user=USER, session="s1", filename=MANIFEST_FILENAME,
                                             blob_app=BLOB_APP, manifest={}, blobs={}).items() if k != "store"}), "store"),
])
def test_flush_refuses_a_bad_spool_entry_and_names_its_file(tmp_path, monkeypatch, capsys, text, says):
  monkeypatch.chdir(tmp_path)  # an entry without a store once went to the working directory
  spool = tmp_path / "spool"
  spool.mkdir()
  bad = spool / "00000000000000000001-0123456789-1.json"
  bad.write_text(text, encoding="utf-8")
  assert main(["flush", "--spool", str(spool)]) == 2
  err = _one_line_error(capsys)
  assert bad.name in err and says in err
  assert not (tmp_path / "apps").exists() and bad.exists()


# ----------------------------------------------------------- one-line errors
def test_unwritable_report_and_unreadable_override_are_one_line_errors(stored, tmp_path, capsys):
  root, run = stored
  sess = _session_dir(root, run.session_id)
  assert main(["report", str(sess), "-o", str(tmp_path)]) == 2
  assert str(tmp_path) in _one_line_error(capsys)
  assert main(["replay", str(sess), "--policy-override", f"@{tmp_path}"]) == 2
  assert str(tmp_path) in _one_line_error(capsys)


def test_a_bucket_without_credentials_is_a_one_line_error(no_credentials, capsys):
  assert main(["replay", "gs://no-such-bucket"]) == 2
  assert "credentials" in _one_line_error(capsys)


def test_a_missing_bucket_is_a_one_line_error(gcs_emulator, capsys):  # noqa: F811
  assert main(["replay", "gs://no-such-bucket"]) == 2
  assert "404" in _one_line_error(capsys)


# ------------------------------------------------------------------ folders
def test_a_store_below_a_directory_named_apps_is_read_as_itself(tmp_path, capsys):
  root = tmp_path / "apps" / "proj" / "out"
  run = asyncio.run(run_session(FileArtifactService(str(root)), 2, tools=False))
  for loc in (root, _session_dir(root, run.session_id), root / "apps" / APP):
    assert main(["replay", str(loc)]) == 0, loc
    assert "2 calls: 2 identical" in capsys.readouterr().out
  assert main(["replay", str(tmp_path / "apps" / "proj")]) == 2  # not a store, nor inside one
  assert "not a FileArtifactService folder" in _one_line_error(capsys)


def test_a_store_of_several_sessions_names_one_by_a_location_that_works(tmp_path, capsys):
  """The error listed labels (APP/USER/SESSION) that no command took as a location."""
  root = tmp_path / "store"
  for _ in range(2):
    asyncio.run(run_session(FileArtifactService(str(root)), 1, tools=False))
  assert main(["inspect", str(root)]) == 2
  err = _one_line_error(capsys)
  assert "holds 2 sessions" in err
  example = err.rsplit("e.g. ", 1)[1].strip()
  assert main(["inspect", example]) == 0, example


def test_an_adk_agent_folder_points_to_where_adks_cli_keeps_its_artifacts(tmp_path, capsys):
  agents = tmp_path / "agents"
  store = agents / "my_agent" / ".adk" / "artifacts"
  asyncio.run(run_session(FileArtifactService(str(store)), 1, tools=False))
  assert main(["replay", str(agents / "my_agent")]) == 2
  assert f"ADK's CLI keeps this agent's artifacts in {store}" in _one_line_error(capsys)
  assert main(["replay", str(agents)]) == 2
  assert f"each agent's artifacts in <agent>/.adk/artifacts: {store}" in _one_line_error(capsys)
  assert main(["replay", str(store)]) == 0


def test_a_lone_manifest_finds_its_blobs_in_a_store_root(stored, tmp_path, capsys):
  root, run = stored
  lone = tmp_path / "lone.json"
  shutil.copy(_version_file(root, run.session_id, 1), lone)
  assert main(["replay", str(lone), "--blobs", str(root)]) == 0
  assert "1 calls: 1 identical" in capsys.readouterr().out
  assert main(["replay", str(lone), "--blobs", str(root / "apps" / APP)]) == 0  # an app folder: its users are searched
  capsys.readouterr()
  # The folder the blobs are in (was refused: looked up as if it were the manifests' app).
  for where in (root / "apps" / BLOB_APP / "users" / USER, root / "apps" / BLOB_APP):
    assert main(["replay", str(lone), "--blobs", str(where)]) == 0, where
    assert "1 calls: 1 identical" in capsys.readouterr().out


def test_blobs_in_a_bucket_must_name_the_user(tmp_path, capsys, no_credentials):
  lone = tmp_path / "lone.json"
  lone.write_text(json.dumps({"session_id": "s1"}), encoding="utf-8")
  assert main(["replay", str(lone), "--blobs", "gs://bucket"]) == 2
  assert "gs://BUCKET/APP/USER" in _one_line_error(capsys)


# ------------------------------------------------------------------- report
def test_report_after_a_call_that_cannot_be_rebuilt_or_read(tmp_path, capsys):
  root = tmp_path / "artifacts"
  writer = recording_writer(spool_dir=False)

  async def scenario():
    runner, _, _ = make_run(FileArtifactService(str(root)), writer=writer, tools=False)
    sid = await start_session(runner)
    for n, text in enumerate(turns(4, tools=False)):
      writer.store_inputs = n != 1  # call 2 is stored without its inputs: it cannot be rebuilt
      await say(runner, sid, text)
    return sid

  sid = asyncio.run(scenario())
  _version_file(root, sid, 3).write_text("{not json", encoding="utf-8")  # call 4 cannot be read
  out = tmp_path / "report.html"
  assert main(["report", str(_session_dir(root, sid)), "-o", str(out)]) == 0
  page = out.read_text(encoding="utf-8")
  assert page.count('<div class="bar">') == 4
  assert page.count("first call of this agent (cold cache)") == 1
  assert "cache break unknown (previous call not rebuilt)" in page  # call 3 follows the unrebuilt call 2
  assert "no replayable inputs" in page and "not JSON" in page
  assert "4 calls" in capsys.readouterr().out
