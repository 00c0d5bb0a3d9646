"""Manifests in (emulated) GCS through ADK's GcsArtifactService: replay, tamper, outage.

The emulator runs in-process on a free loopback port; ``STORAGE_EMULATOR_HOST``
is set before any storage client exists. Nothing here has GCS code of its own
beyond creating the bucket and listing it to check what landed.
"""

from __future__ import annotations

import asyncio
import json
import re

from google.adk.artifacts import GcsArtifactService
from google.genai import types

from aether_frame.adk.manifest_store import BLOB_APP, MANIFEST_FILENAME
from aether_frame.audit.spool import Spool
from aether_frame.cli import main
from tests.fixtures.audit_session import APP, USER, make_run, recording_writer, run_session, say, start_session, turns
from tests.fixtures.gcs_emulator import gcs_emulator  # noqa: F401

BUCKET = "af-manifests"


async def _manifests(svc, session_id: str) -> list[dict]:
  kw = dict(app_name=APP, user_id=USER, session_id=session_id, filename=MANIFEST_FILENAME)
  out = []
  for v in sorted(await svc.list_versions(**kw)):
    part = await svc.load_artifact(**kw, version=v)
    out.append(json.loads(part.inline_data.data))
  return out


def test_runner_writes_to_gcs_and_replay_is_identical_until_the_policy_changes(gcs_emulator, capsys):  # noqa: F811
  gcs_emulator.create_bucket(BUCKET)
  run = asyncio.run(run_session(GcsArtifactService(BUCKET), 10))
  n = len(run.documents)
  assert run.plugin.faults == 0 and n > 10  # tool turns make two model calls
  names = gcs_emulator.blob_names(BUCKET)
  assert len([x for x in names if f"{run.session_id}/{MANIFEST_FILENAME}/" in x]) == n
  blobs = [x for x in names if x.startswith(f"{BLOB_APP}/{USER}/{APP}/context_pack/blobs/")]
  referenced = {k for d in run.documents for k in d["inputs"]["items"] + [h for lv in d["inputs"]["history"]["levels"] for h in lv]}
  assert blobs and len(blobs) < sum(len(d["inputs"]["items"]) + d["inputs"]["history"]["len"] for d in run.documents) / 3
  assert all(any(k in b for b in blobs) for k in referenced)  # every referenced input is stored, once
  assert len(blobs) == len(set(b.rsplit("/", 1)[0] for b in blobs))

  loc = f"gs://{BUCKET}/{APP}/{USER}/{run.session_id}"
  assert main(["replay", loc]) == 0
  out = capsys.readouterr().out
  assert f"{n} calls: {n} identical, 0 different" in out

  assert main(["replay", f"gs://{BUCKET}", "-q"]) == 0  # the whole bucket: sessions are found by prefix
  assert f"{n} calls: {n} identical" in capsys.readouterr().out

  # A deliberate policy change: replay fails and names the layers and the cause.
  assert main(["replay", loc, "--policy-override", '{"weight_overrides": [0.05, 0.05, 0.9]}']) == 1
  out = capsys.readouterr().out
  assert f"{n} calls: 0 identical, {n} different" in out
  assert re.search(r"DIFFERENT .* layers .*conversation", out)
  assert "layer conversation: weight 0.4 → 0.9" in out or re.search(r"layer conversation: .*weight [\d.]+ → 0\.9", out)
  assert "why: policy differs (weight_overrides None → [0.05,0.05,0.9])" in out

  # inspect: one manifest as a table.
  assert main(["inspect", f"{loc}@3"]) == 0
  out = capsys.readouterr().out
  assert "checksum ok" in out and re.search(r"layer\s+budget\s+\+unused\s+used\s+dropped", out)
  for layer in ("system", "task", "tools", "evidence", "memory", "conversation"):
    assert re.search(rf"^{layer}\s+\d+\s+\d+\s+\d+", out, re.M)
  tokens, usable, share = map(int, re.search(r"usable (\d+)\s+total (\d+) \((\d+)% of usable", out).group(2, 1, 3))
  assert share == round(100 * tokens / usable)  # the pack's own share, not the BUDGET line's estimate


def test_tampered_manifest_is_refused(gcs_emulator, tmp_path, capsys):  # noqa: F811
  gcs_emulator.create_bucket(BUCKET)
  svc = GcsArtifactService(BUCKET)
  run = asyncio.run(run_session(svc, 3, tools=False))
  loc = f"gs://{BUCKET}/{APP}/{USER}/{run.session_id}"
  doc = asyncio.run(_manifests(svc, run.session_id))[1]
  doc["layers"]["conversation"]["budget"] += 100  # a quiet edit of the record
  copy = tmp_path / "tampered.json"
  copy.write_text(json.dumps(doc))
  for argv in (["inspect", str(copy)], ["replay", str(copy), "--blobs", f"gs://{BUCKET}/{APP}/{USER}"]):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "checksum mismatch" in captured.err + captured.out and "tampered" in captured.err + captured.out

  # Tampered in the bucket itself (a new version): replay refuses that call and exits non-zero.
  part = types.Part(inline_data=types.Blob(mime_type="application/json", data=json.dumps(doc).encode()))
  v = asyncio.run(svc.save_artifact(app_name=APP, user_id=USER, session_id=run.session_id, filename=MANIFEST_FILENAME, artifact=part))
  assert main(["replay", loc]) == 2
  out = capsys.readouterr().out
  assert re.search(rf"REFUSED .* v{v}: .*checksum mismatch", out) and "identical" in out


def test_outage_spools_then_flush_uploads_in_order_without_duplicates(gcs_emulator, tmp_path, capsys):  # noqa: F811
  gcs_emulator.create_bucket(BUCKET)
  spool_dir = tmp_path / "spool"

  async def scenario():
    svc = GcsArtifactService(BUCKET)
    # Generous while the store is healthy (a loaded CI box must not spool those calls); short once it is down.
    writer = recording_writer(spool_dir=spool_dir, timeout=30.0)
    # include_artifacts=False: one timeout per call during the outage (the artifact listing has its own).
    runner, plugin, model = make_run(svc, writer=writer, include_artifacts=False, tools=False)
    sid = await start_session(runner)
    texts = turns(7, tools=False)
    for t in texts[:2]:
      await say(runner, sid, t)
    assert writer.stats["stored"] == 2 and not Spool(spool_dir).pending(), writer.stats
    writer.timeout = 2.0
    gcs_emulator.stop()
    for t in texts[2:5]:
      await say(runner, sid, t)
    assert len(model.received) == 5 and plugin.faults == 0
    # The store client retries a dead endpoint for up to 120 s. The first call gave up
    # waiting for it after the writer's timeout (the upload still running), and the
    # later ones did not even try: nothing waited on the dead store.
    reasons = [Spool.read(p)["reason"] for p in Spool(spool_dir).pending()]
    assert reasons == ["no answer within 2s"] + ["earlier manifests are still waiting in the spool"] * 2, reasons
    gcs_emulator.start()
    # The command-line flush, from another thread: the agent's own late upload holds the
    # spool until it settles, so the two never send the same manifest.
    rc = await asyncio.to_thread(main, ["flush", "--spool", str(spool_dir), "--wait", "90"])
    assert rc == 0, (writer.stats, [Spool.read(p)["reason"] for p in Spool(spool_dir).pending()])
    assert Spool(spool_dir).pending() == []
    for t in texts[5:]:  # later calls go straight to the store, after the flushed ones
      await say(runner, sid, t)
    return svc, sid, writer

  svc, sid, writer = asyncio.run(scenario())
  assert "uploaded" in capsys.readouterr().out
  stored = asyncio.run(_manifests(svc, sid))
  assert [d["pack_id"] for d in stored] == [d["pack_id"] for d in writer.documents]  # all 7, in call order
  assert len({d["checksum"] for d in stored}) == len(stored) == 7  # no duplicates
  assert main(["replay", f"gs://{BUCKET}/{APP}/{USER}/{sid}", "-q"]) == 0  # spooled inputs landed too


def test_a_bucket_location_takes_blobs_from_blobs_option(gcs_emulator, capsys):  # noqa: F811
  """``--blobs`` was silently ignored for a gs:// location: manifests copied to another bucket could not replay."""
  gcs_emulator.create_bucket(BUCKET)
  gcs_emulator.create_bucket("af-copies")
  src = GcsArtifactService(BUCKET)
  run = asyncio.run(run_session(src, 3, tools=False))
  copies = GcsArtifactService("af-copies")

  async def copy_manifests() -> None:  # the manifests only, not the blobs they reference
    kw = dict(app_name=APP, user_id=USER, session_id=run.session_id, filename=MANIFEST_FILENAME)
    for v in sorted(await src.list_versions(**kw)):
      await copies.save_artifact(**kw, artifact=await src.load_artifact(**kw, version=v))

  asyncio.run(copy_manifests())
  loc = f"gs://af-copies/{APP}/{USER}/{run.session_id}"
  n = len(run.documents)
  assert main(["replay", loc, "-q"]) == 2
  assert "missing" in capsys.readouterr().out
  assert main(["replay", loc, "-q", "--blobs", f"gs://{BUCKET}/{APP}/{USER}"]) == 0
  assert f"{n} calls: {n} identical" in capsys.readouterr().out


def test_a_session_whose_newest_call_is_an_agent_tool_childs_still_lists_by_bucket(gcs_emulator, capsys):  # noqa: F811
  """Ids holding '/' are settled by the session id the manifests record; a child's manifest
  (stored in its caller's history) records the child's throwaway session, and when it was the
  newest, replaying the whole bucket failed for every session (GCS review)."""
  from google.adk.agents import LlmAgent
  from google.adk.apps import App
  from google.adk.runners import Runner
  from google.adk.sessions import InMemorySessionService
  from google.adk.tools.agent_tool import AgentTool

  from aether_frame import ContextPackPlugin
  from aether_frame.adk.manifest_store import ManifestWriter
  from aether_frame.offline_model import OfflineLlm, tool_call

  bucket = "af-slash-child"
  gcs_emulator.create_bucket(bucket)
  child = LlmAgent(name="fact_checker", model=OfflineLlm(default="Checked."), instruction="Check.",
                   description="Checks a claim")

  def reply(req):
    said = " ".join(p.text for p in req.contents[-1].parts or () if p.text)
    return tool_call("fact_checker", {"request": "is it true?"}) if said.endswith("please check this") else "Noted."

  root = LlmAgent(name="researcher", model=OfflineLlm(default=reply), instruction="Research.",
                  tools=[AgentTool(child, skip_summarization=True)])
  plugin = ContextPackPlugin(window=8192, manifest_writer=ManifestWriter(spool_dir=False))
  runner = Runner(app=App(name="prod_app", root_agent=root, plugins=[plugin]), session_service=InMemorySessionService(),
                  artifact_service=GcsArtifactService(bucket))

  async def go():
    s = await runner.session_service.create_session(app_name="prod_app", user_id="team/hank", session_id="case/42")
    for text in ("hello there", "more notes", "please check this"):
      async for _ in runner.run_async(user_id="team/hank", session_id=s.id,
                                      new_message=types.Content(role="user", parts=[types.Part(text=text)])):
        pass

  asyncio.run(go())
  assert plugin.faults == 0
  names = [n for n in gcs_emulator.blob_names(bucket) if n.startswith("prod_app/") and "/manifest.json/" in n]
  assert len(names) == 4 and names[-1].endswith("/3")  # the child's call is the newest
  for location in (f"gs://{bucket}", f"gs://{bucket}/prod_app"):
    assert main(["replay", location, "-q"]) == 0, capsys.readouterr().err
    assert "4 calls: 4 identical" in capsys.readouterr().out
