"""Artifact keys as evidence, and a store that hangs must not stall model calls."""

from __future__ import annotations

import asyncio

from google.adk.artifacts import InMemoryArtifactService
from google.genai import types
from pydantic import PrivateAttr

from aether_frame import ContextPackPlugin
from tests.adk_support import APP, USER, agent, make_runner, new_session, payload_of, say


class HangingListing(InMemoryArtifactService):
  """Saves and loads normally; listing keys never answers, like an unreachable GCS retrying."""

  _started: int = PrivateAttr(default=0)
  _answered: int = PrivateAttr(default=0)

  async def list_artifact_keys(self, **kwargs):
    self._started += 1
    await asyncio.Event().wait()  # never set: only a caller's timeout ends this
    self._answered += 1
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
  ag, model = agent()
  plugin = ContextPackPlugin(window=8192, artifact_list_timeout=0.2)
  store = HangingListing()
  runner = make_runner(ag, [plugin], artifact_service=store)
  s = await new_session(runner)

  async def three_calls():
    for i in range(3):
      await say(runner, s.id, f"turn {i}")

  # The listing never answers, so every call that completes did not wait for it.
  # (The bound only turns a regression into a failure instead of a hang.)
  await asyncio.wait_for(three_calls(), timeout=120)
  assert len(model.received) == 3 and store._answered == 0
  assert store._started == 1  # backed off after the first timeout
  assert plugin.faults == 0
  versions = await runner.artifact_service.list_versions(
      app_name=APP, user_id=USER, session_id=s.id, filename="context_pack/manifest.json"
  )
  assert len(versions) == 3
  assert "CONTEXT PACK v1" in payload_of(model.received[-1])
