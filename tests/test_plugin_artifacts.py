"""Artifact keys as evidence, and a store that hangs must not stall model calls."""

from __future__ import annotations

import asyncio
import time

from google.adk.artifacts import InMemoryArtifactService
from google.genai import types

from aether_frame import ContextPackPlugin
from tests.adk_support import APP, USER, agent, make_runner, new_session, payload_of, say


class HangingListing(InMemoryArtifactService):
  """Saves and loads normally; listing keys hangs, like an unreachable GCS retrying."""

  listings: int = 0

  async def list_artifact_keys(self, **kwargs):
    type(self).listings += 1
    await asyncio.sleep(30)
    return []


async def test_artifact_keys_become_evidence_pointers_but_not_our_own_manifests():
  ag, model = agent()
  runner = make_runner(ag, [ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  await runner.artifact_service.save_artifact(
      app_name=APP, user_id=USER, session_id=s.id, filename="reports/q3.md", artifact=types.Part(text="Q3 report")
  )
  await say(runner, s.id, "hello")
  await say(runner, s.id, "and again")
  payload = payload_of(model.received[-1])
  assert "artifact://reports/q3.md" in payload
  assert "context_pack/" not in payload.split("EVIDENCE:")[1].split("MEMORY:")[0]


async def test_hanging_artifact_listing_times_out_backs_off_and_still_writes_manifests():
  HangingListing.listings = 0
  ag, model = agent()
  plugin = ContextPackPlugin(window=8192, artifact_list_timeout=0.2)
  runner = make_runner(ag, [plugin], artifact_service=HangingListing())
  s = await new_session(runner)
  started = time.monotonic()
  for i in range(3):
    await say(runner, s.id, f"turn {i}")
  elapsed = time.monotonic() - started
  assert elapsed < 5, f"three calls took {elapsed:.1f}s; a hung listing must not stall them"
  assert HangingListing.listings == 1  # backed off after the first timeout
  assert plugin.faults == 0
  versions = await runner.artifact_service.list_versions(
      app_name=APP, user_id=USER, session_id=s.id, filename="context_pack/manifest.json"
  )
  assert len(versions) == 3
  assert "CONTEXT PACK v1" in payload_of(model.received[-1])
