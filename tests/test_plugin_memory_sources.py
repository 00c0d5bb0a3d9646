"""A memory source that is down or slow: the call is packed without it, soon.

``ctx.search_memory`` and the working-memory notes were awaited without a
bound, and a failure sent the whole request unpacked (a fault), possibly
over the window. Now each has ``memory_search_timeout``; a failed source is
left out and named in the manifest's ``runtime.sources_failed``.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from google.adk.memory import InMemoryMemoryService

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import agent, make_runner, manifests, new_session, payload_of, say


class HangingMemory(InMemoryMemoryService):
  async def search_memory(self, *, app_name, user_id, query):
    await asyncio.sleep(60)


class BrokenMemory(InMemoryMemoryService):
  async def search_memory(self, *, app_name, user_id, query):
    raise ConnectionError("memory backend refused the connection")


class BrokenNotes:
  async def list_notes(self, app_name, user_id, session_id, step_id):
    raise TimeoutError("notes store did not answer")


async def _one_call(plugin: ContextPackPlugin, text: str, memory_service=None):
  """One user turn through a real Runner; returns (the call's manifest, the offline model)."""
  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  runner = make_runner(ag, [plugin], memory_service=memory_service)
  session = await new_session(runner)
  await say(runner, session.id, text)
  return (await manifests(runner, session.id))[-1], model


@pytest.mark.parametrize("memory,expected", [(HangingMemory(), "timed out after 0.3 s"),
                                              (BrokenMemory(), "ConnectionError: memory backend refused the connection")])
async def test_a_failing_memory_service_leaves_memory_out_and_the_call_packed(memory, expected):
  plugin = ContextPackPlugin(window=8192, memory_search_timeout=0.3)
  started = time.monotonic()
  doc, model = await _one_call(plugin, "what did we decide about the rollout?", memory)
  assert time.monotonic() - started < 20, "the call waited for the memory service"
  assert plugin.faults == 0 and doc["runtime"]["sources_failed"] == {"memory_service": expected}
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK"), "the call went out unpacked"


async def test_failing_working_memory_is_left_out_and_named():
  plugin = ContextPackPlugin(window=8192, working_memory=BrokenNotes())
  doc, model = await _one_call(plugin, "hello")
  assert plugin.faults == 0 and doc["runtime"]["sources_failed"] == {"working_memory": "TimeoutError: notes store did not answer"}
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK")


async def test_a_working_memory_service_is_read_and_nothing_is_reported():
  plugin = ContextPackPlugin(window=8192)
  doc, _ = await _one_call(plugin, "hello", InMemoryMemoryService())
  assert "sources_failed" not in doc["runtime"] and plugin.faults == 0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_memory_search_timeout_is_validated(bad):
  with pytest.raises(ValueError, match="memory_search_timeout must be a positive number of seconds"):
    ContextPackPlugin(window=8192, memory_search_timeout=bad)
