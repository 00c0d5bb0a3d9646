"""Entries that share an id reach the pack, or the manifest's record, all of them.

A memory service that reuses ids, or two knowledge entries for one artifact,
gave two items one id; the plugin kept the first and let the other go without
a word. The same entry twice is still sent once.
"""

from __future__ import annotations

import asyncio

from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from tests.adk_support import agent, make_runner, manifests, new_session, payload_of, say


class FixedMemory(BaseMemoryService):
  """Answers every search with the same entries (a service of another vendor, say)."""

  def __init__(self, entries):
    self.entries = entries

  async def add_session_to_memory(self, session):
    return None

  async def search_memory(self, *, app_name, user_id, query):
    return SearchMemoryResponse(memories=list(self.entries))


def _entry(mid, text):
  return MemoryEntry(id=mid, content=types.Content(role="user", parts=[types.Part(text=text)]),
                     author="user", timestamp="2025-06-01T10:00:00Z")


def _run(entries=(), state=None, window=8000):
  llm_agent, model = agent()
  plugin = ContextPackPlugin(window=window)

  async def go():
    runner = make_runner(llm_agent, [plugin], memory_service=FixedMemory(entries))
    s = await new_session(runner, state=state)
    await say(runner, s.id, "what do we know about the vendors")
    return (await manifests(runner, s.id))[-1]
  man = asyncio.run(go())
  return payload_of(model.received[-1]), man, plugin


def _ids(man, prefix):
  return sorted(i["id"] for i in man["items"] if i["id"].startswith(prefix))


def test_two_memories_under_one_id_are_both_sent():
  payload, man, plugin = _run([_entry("m1", "vendor alpha charges 10 dollars"),
                               _entry("m1", "vendor beta charges 12 dollars"),
                               _entry("m1", "vendor alpha charges 10 dollars")])  # the first again
  assert plugin.faults == 0
  assert "vendor alpha charges 10 dollars" in payload and "vendor beta charges 12 dollars" in payload
  assert payload.count("vendor alpha charges 10 dollars") == 1
  ids = _ids(man, "memory:")
  assert len(ids) == 2 and ids[0] == "memory:m1" and ids[1].startswith("memory:m1~"), ids


def test_the_renamed_id_is_the_same_in_every_run():
  entries = [_entry("m1", "vendor alpha charges 10 dollars"), _entry("m1", "vendor beta charges 12 dollars")]
  assert _ids(_run(entries)[1], "memory:") == _ids(_run(entries)[1], "memory:")


def test_two_summaries_of_one_artifact_are_both_kept_or_recorded():
  knowledge = [{"uri": "artifact://report.md", "summary": "Q3 revenue rose 12 percent"},
               {"uri": "artifact://report.md", "summary": "Churn fell to 2 percent"}]
  payload, man, _ = _run(state={"knowledge": knowledge})
  assert "Q3 revenue rose 12 percent" in payload and "Churn fell to 2 percent" in payload
  assert len(_ids(man, "evidence:")) == 2
