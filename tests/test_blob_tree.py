"""Input blobs are synced as a hash tree: a fresh chunk vouches for everything under it.

A worker that has never seen a long session used to ask its store about
every input blob of that session before the first manifest (one listing per
blob: ~11,000 requests at 10,000 events, past the store timeout on GCS). Now
chunks are written after their children, carrying the oldest newest-copy time
of their subtree, and a second worker checks only what the manifest names.
Real Runner, real FileArtifactService, real replay.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from google.adk.artifacts import FileArtifactService, GcsArtifactService, InMemoryArtifactService
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.manifest_store import SUBTREE_TIME, ManifestWriter, _subtree_time, blob_filename, blob_scope
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit import inputs as replay_inputs
from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from tests.adk_support import APP, USER, agent, make_runner, say
from tests.fixtures.gcs_emulator import gcs_emulator  # noqa: F401

EVENTS = 600


class _Recorder(FileArtifactService):
  """The real FileArtifactService, noting the order of blob saves (and failing one on request)."""

  def __init__(self, root: str):
    super().__init__(root)
    self.saved: list[str] = []
    self.fail_on: set[str] = set()

  async def save_artifact(self, **kw):
    name = kw["filename"]
    if name in self.fail_on:
      raise OSError(f"disk full writing {name}")
    version = await super().save_artifact(**kw)
    self.saved.append(name)
    return version


async def _long_session(runner, n_events: int) -> str:
  session = await runner.session_service.create_session(app_name=APP, user_id=USER)
  rng = random.Random(3)
  ts = time.time() - 60.0 * n_events
  words = "budget schedule review invoice release meeting travel report draft vendor".split()
  for i in range(n_events):
    role, author = ("user", "user") if i % 2 == 0 else ("model", "assistant")
    text = f"turn {i}: " + " ".join(rng.choice(words) for _ in range(12))
    await runner.session_service.append_event(
        session, Event(author=author, invocation_id=f"i{i // 2}", content=types.Content(role=role, parts=[types.Part(text=text)]), timestamp=ts))
    ts += 60.0
  return session.id


def _worker(store, sessions, writer=None):
  """One worker: its own plugin and writer (nothing remembered), the shared stores."""
  llm_agent, _ = agent()
  writer = writer or ManifestWriter(spool_dir=False)
  plugin = ContextPackPlugin(window=131_072, manifest_writer=writer)
  return make_runner(llm_agent, [plugin], artifact_service=store, session_service=sessions), writer, plugin


async def _first_worker(tmp_path, n_events: int, ask: str = "first", writer=None):
  """A stored session: a recording File store, an N-event session, and one worker's first turn on it."""
  store, sessions = _Recorder(str(tmp_path / "store")), InMemorySessionService()
  runner, writer, plugin = _worker(store, sessions, writer)
  sid = await _long_session(runner, n_events)
  await say(runner, sid, ask)
  return store, sessions, sid, writer


async def _replayed(tmp_path) -> list[str]:
  return [r.status for r in await replay(open_location(str(tmp_path / "store")))]


def _blob_names(names: list[str]) -> list[str]:
  return [n for n in names if n.startswith("context_pack/blobs/")]


async def _tree(store, section) -> dict[str, list[str]]:
  """chunk key -> child keys, read back from the store."""
  scope = blob_scope(APP, USER)
  out, todo = {}, [k for lv in replay_inputs._levels(section)[1:] for k in lv]
  while todo:
    k = todo.pop()
    part = await store.load_artifact(**scope, filename=blob_filename(k))
    children = replay_inputs.chunk_children(replay_inputs.unpack_blob(part.inline_data.data))
    if children is not None:
      out[k] = children
      todo.extend(children)
  return out


def test_a_second_worker_checks_what_the_manifest_names_not_every_blob(tmp_path):
  async def go():
    store, sessions, sid, first = await _first_worker(tmp_path, EVENTS, "what did we decide about the budget?")
    cold = first.last_write
    assert cold["blobs_written"] > EVENTS  # the whole session's inputs, once
    runner2, second, plugin2 = _worker(store, sessions)
    await say(runner2, sid, "and the schedule?")
    warm = second.last_write
    assert plugin2.faults == 0
    # Before: one listing per referenced blob (cold["blobs_checked"] of them).
    assert warm["blobs_checked"] <= 64, warm
    assert warm["blobs_checked"] * 10 < cold["blobs_checked"], (warm, cold)
    assert warm["blobs_written"] <= 8, warm  # the new turns and request only
    assert await _replayed(tmp_path) == ["identical", "identical"]
  asyncio.run(go())


def test_chunks_are_written_after_everything_under_them(tmp_path):
  async def go():
    store, sessions, sid, writer = await _first_worker(tmp_path, 200, "what did we decide?")
    section = writer.last_document[replay_inputs.INPUTS_KEY]
    tree = await _tree(store, section)
    assert len(tree) > 25  # depth 3 at 200 groups and chunk size 8
    order = {name: i for i, name in enumerate(_blob_names(store.saved))}
    for chunk, children in tree.items():
      for child in children:
        assert order[blob_filename(child)] < order[blob_filename(chunk)], (chunk, child)
    # Every chunk states its subtree's time, no later than the chunk itself.
    scope = blob_scope(APP, USER)
    for chunk in tree:
      (version,) = await store.list_artifact_versions(**scope, filename=blob_filename(chunk))
      assert float(version.custom_metadata[SUBTREE_TIME]) <= version.create_time + 1e-3
  asyncio.run(go())


def test_a_failed_leaf_write_leaves_no_chunk_vouching_for_it(tmp_path):
  async def go():
    store, sessions = _Recorder(str(tmp_path / "store")), InMemorySessionService()
    runner, writer, plugin = _worker(store, sessions, ManifestWriter(spool_dir=tmp_path / "spool", timeout=30.0))
    sid = await _long_session(runner, 120)
    # Fail the write of one history item (the oldest turn's blob).
    probe = ManifestWriter(spool_dir=False)
    runner_probe, _, _ = _worker(InMemoryArtifactService(), sessions, probe)
    await say(runner_probe, sid, "probe")
    section = probe.last_document[replay_inputs.INPUTS_KEY]
    oldest = replay_inputs.history_keys(section, await _all_blobs(runner_probe.artifact_service, section))[0]
    store.fail_on.add(blob_filename(oldest))
    await say(runner, sid, "what did we decide?")
    assert plugin.faults == 0 and writer.stats["spooled"] == 1  # the manifest waits in the spool
    saved = set(_blob_names(store.saved))
    assert blob_filename(oldest) not in saved
    scope = blob_scope(APP, USER)
    for name in saved:  # no stored chunk lists the missing blob, at any depth
      part = await store.load_artifact(**scope, filename=name)
      children = replay_inputs.chunk_children(replay_inputs.unpack_blob(part.inline_data.data))
      assert children is None or oldest not in children
    assert not any(n.startswith("context_pack/manifest") for n in store.saved)
    store.fail_on.clear()
    report = await writer.flush(store)
    assert report.flushed == 1 and report.errors == []
    assert await _replayed(tmp_path) == ["identical"]
  asyncio.run(go())


async def _all_blobs(store, section) -> dict[str, bytes]:
  scope = blob_scope(APP, USER)
  out = {}
  for name in await store.list_artifact_keys(**scope):
    if name.startswith("context_pack/blobs/"):
      part = await store.load_artifact(**scope, filename=name)
      out[name[len("context_pack/blobs/"):-len(".json")]] = replay_inputs.unpack_blob(part.inline_data.data)
  return out


def test_chunks_of_an_older_writer_are_walked_once_then_vouch(tmp_path):
  """Chunks stored before they carried a subtree time: the next worker checks under them and rewrites them."""
  async def go():
    store, sessions, sid, first = await _first_worker(tmp_path, 300, "first")
    scope = blob_scope(APP, USER)
    section = first.last_document[replay_inputs.INPUTS_KEY]
    tree = await _tree(store, section)
    # What an older writer leaves: the same chunks, newest copy without the metadata.
    for chunk in tree:
      part = await store.load_artifact(**scope, filename=blob_filename(chunk))
      await store.save_artifact(**scope, filename=blob_filename(chunk), artifact=part)
      versions = await store.list_artifact_versions(**scope, filename=blob_filename(chunk))
      assert SUBTREE_TIME not in max(versions, key=lambda v: v.version).custom_metadata
    runner2, second, _ = _worker(store, sessions)
    await say(runner2, sid, "second")
    walked = second.last_write
    assert walked["blobs_checked"] > 300  # under every chunk, once
    assert walked["blobs_written"] >= len(tree)  # each chunk again, now with its time
    runner3, third, _ = _worker(store, sessions)
    await say(runner3, sid, "third")
    assert third.last_write["blobs_checked"] <= 64, third.last_write
    assert await _replayed(tmp_path) == ["identical"] * 3
  asyncio.run(go())


def test_a_subtree_older_than_refresh_after_is_walked_and_refreshed(tmp_path):
  async def go():
    store, sessions, sid, first = await _first_worker(tmp_path, 100, "first")
    runner2, second, _ = _worker(store, sessions, ManifestWriter(spool_dir=False, refresh_after=0.0))
    await say(runner2, sid, "second")
    # Every copy counts as too old: everything referenced is checked and written again.
    assert second.last_write["blobs_written"] >= 100
    assert second.last_write["blobs_written"] == second.last_write["blobs_checked"]
  asyncio.run(go())


@pytest.mark.parametrize("meta, chunk, expected", [
    (None, False, 100.0),  # a leaf: its newest copy's time
    ({}, True, None),  # a chunk of an older writer
    ({SUBTREE_TIME: "90.5"}, True, 90.5),
    ({SUBTREE_TIME: "150"}, True, 100.0),  # never later than the copy itself
    ({SUBTREE_TIME: "nan"}, True, None),
    ({SUBTREE_TIME: "soon"}, True, None),
])
def test_subtree_time(meta, chunk, expected):
  from google.adk.artifacts.base_artifact_service import ArtifactVersion

  versions = [ArtifactVersion(version=0, canonical_uri="x", create_time=40.0, custom_metadata=meta or {}),
              ArtifactVersion(version=1, canonical_uri="x", create_time=100.0, custom_metadata=meta or {})]
  assert _subtree_time(versions, chunk=chunk) == expected
  assert _subtree_time([], chunk=chunk) is None


def test_on_gcs_a_second_worker_reads_the_subtree_time_back(gcs_emulator):  # noqa: F811
  """GCS keeps custom metadata as strings: the time survives the round trip, and chunks vouch there too."""
  gcs_emulator.create_bucket("af-blob-tree")

  async def go():
    store, sessions = GcsArtifactService("af-blob-tree"), InMemorySessionService()
    runner, first, _ = _worker(store, sessions)
    sid = await _long_session(runner, 150)
    await say(runner, sid, "what did we decide?")
    assert first.last_write["blobs_checked"] > 150
    runner2, second, plugin2 = _worker(store, sessions)
    await say(runner2, sid, "and then?")
    assert plugin2.faults == 0 and second.stats["stored"] == 1
    assert second.last_write["blobs_checked"] <= 64, second.last_write
    reports = await replay(open_location("gs://af-blob-tree"))
    assert [r.status for r in reports] == ["identical", "identical"]
  asyncio.run(go())


def test_a_chunk_does_not_vouch_for_children_its_writer_did_not_hold(tmp_path):
  """An entry spooled by an older version carries a chunk but not the children its store had.

  Flushed after lifecycle removed one of those children, the chunk goes back
  without a subtree time, so the next worker (which holds every blob) walks
  under it and writes the missing child again: replay stays whole.
  """
  from aether_frame.adk.manifest_store import store_uri
  from aether_frame.audit.spool import make_entry

  async def go():
    store, sessions, sid, first = await _first_worker(tmp_path, 90, "first", writer=ManifestWriter(spool_dir=tmp_path / "spool"))
    doc = first.last_document
    chunk = replay_inputs._levels(doc[replay_inputs.INPUTS_KEY])[1][-1]  # a chunk the manifest names
    blobs = await _all_blobs(store, doc[replay_inputs.INPUTS_KEY])
    leaf = replay_inputs.chunk_children(blobs[chunk])[0]
    scope = blob_scope(APP, USER)
    for key in (chunk, leaf):  # aged out of the store
      await store.delete_artifact(**scope, filename=blob_filename(key))
    flusher = ManifestWriter(spool_dir=tmp_path / "spool")
    flusher.spool.add(make_entry(store=store_uri(store), app=APP, user=USER, session=sid, filename="context_pack/manifest.json",
                                 blob_app="context-pack-blobs", manifest=doc, blobs={chunk: blobs[chunk]}))
    report = await flusher.flush(store)
    assert report.already_stored == 1 and report.errors == []  # the manifest itself was there
    (version,) = await store.list_artifact_versions(**scope, filename=blob_filename(chunk))
    assert SUBTREE_TIME not in version.custom_metadata  # it could not check the leaf
    assert not await store.list_artifact_versions(**scope, filename=blob_filename(leaf))
    runner2, second, _ = _worker(store, sessions)
    await say(runner2, sid, "second")
    assert await store.list_artifact_versions(**scope, filename=blob_filename(leaf))  # written again
    assert (await _replayed(tmp_path))[-1:] == ["identical"]
  asyncio.run(go())


def test_aging_copies_do_not_make_chunks_churn():
  """Leaves aging past refresh_after one call at a time: a chunk rewritten on their
  account takes a time no older than half the refresh age, so it is not rewritten
  again on the next call (it was: one new version of the whole chunk path per call)."""
  async def go():
    store, sessions = InMemoryArtifactService(), InMemorySessionService()
    runner, writer, _ = _worker(store, sessions, ManifestWriter(spool_dir=False, refresh_after=3.0))
    s = await sessions.create_session(app_name=APP, user_id=USER)
    for i in range(60):
      await say(runner, s.id, f"turn {i} about the budget")
      await asyncio.sleep(0.1)
    section = writer.last_document[replay_inputs.INPUTS_KEY]
    scope = blob_scope(APP, USER)
    chunks = [k for lv in replay_inputs._levels(section)[1:] for k in lv]
    versions = [len(await store.list_artifact_versions(**scope, filename=blob_filename(k))) for k in chunks]
    assert chunks and max(versions) <= 6, versions  # 6 s of calls, refreshed at most every 1.5 s
  asyncio.run(go())
