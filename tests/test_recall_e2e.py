"""Recall end to end: a 200-turn ADK session, a question about turn 12, a 2K window.

The conversation tail of a 2K window holds only the last few turns, so the
answer can reach the model only through recall: the compiler's history index
(``HybridRanker.new_history_index``) must find turn 12, the pack must carry
it, and the manifest must say why (its score components).
"""

from __future__ import annotations

import json

from aether_frame.adk.manifest_store import MANIFEST_FILENAME
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core import manifest as manifest_doc
from aether_frame.offline_model import OfflineLlm
from aether_frame.retrieval import HybridRanker

from tests.adk_support import USER, agent, make_runner, new_session, payload_of, say

TOPICS = [
    "the weather in the mountains", "a recipe for lentil soup", "the football match on Sunday",
    "new running shoes", "a podcast about history", "repainting the kitchen", "the train strike",
    "a birthday present for my niece", "learning to play the ukulele", "a documentary about whales",
]  # fmt: skip
FACT = "my storage unit code is 7319 and the unit is number 42 at the Riverside depot"
QUESTION = "What was the code for my storage unit at the Riverside depot?"


def turn_text(i: int) -> str:
  if i == 12:
    return f"Turn {i}: by the way, {FACT}."
  return f"Turn {i}: let me tell you about {TOPICS[i % len(TOPICS)]}, it was quite something this week."


async def _last_manifest(runner, session_id: str) -> dict:
  svc = runner.artifact_service
  versions = await svc.list_versions(app_name=runner.app_name, user_id=USER, session_id=session_id, filename=MANIFEST_FILENAME)
  part = await svc.load_artifact(
      app_name=runner.app_name, user_id=USER, session_id=session_id, filename=MANIFEST_FILENAME, version=max(versions)
  )
  return manifest_doc.verify(json.loads(part.inline_data.data), where="last manifest")


async def test_turn_12_of_200_is_recalled_into_a_2k_pack_and_explained():
  model = OfflineLlm(default="Noted.")
  ag, _ = agent(model=model)
  ranker = HybridRanker()
  runner = make_runner(ag, [ContextPackPlugin(window=2048, ranker=ranker)])
  session = await new_session(runner)
  for i in range(200):
    await say(runner, session.id, turn_text(i))
  await say(runner, session.id, QUESTION)

  # The model saw turn 12, although the 2K window's tail holds only recent turns.
  final = model.received[-1]
  pack = payload_of(final)
  assert FACT in pack, "turn 12 is not in the pack"
  tail_texts = [p.text for c in final.contents[:-1] for p in c.parts or () if p.text]
  assert not any(FACT in t for t in tail_texts), "turn 12 should arrive by recall, not in the tail"

  # The manifest lists it as included, with its score components.
  doc = await _last_manifest(runner, session.id)
  assert doc["window"] == 2048
  rows = [r for r in doc["items"] if r.get("kind") == "recall"]
  assert rows, "no recall items in the manifest"
  hit = [r for r in rows if r["id"].startswith("recall:t24-")]  # turn 12 = contents[24] (user, model, user, ...)
  assert hit, [r["id"] for r in rows]
  row = hit[0]
  assert row["status"] == "included"
  explain = row["meta"]["explain"]
  assert explain["mode"] == "general"
  assert explain["bm25"] > 0.0 and explain["text"] == 1.0  # the best lexical match of the whole history
  assert explain["relevance"] > 0.0 and explain["score"] == row["score"] > 0.0
  others = [r["score"] for r in rows if r is not row]
  assert all(row["score"] >= s for s in others)


async def test_a_recalled_tool_step_carries_its_events_date_and_pointer():
  """Gemini sends calls without ids; ADK gives them ``adk-`` ids in the session and strips
  them from the request, so the step never matched its event: it was recalled as
  ``[undated]``, pointing at nothing, and freshness ranking took it for undated."""
  from aether_frame.offline_model import tool_call

  def open_locker(depot: str) -> dict:
    """Opens a storage locker."""
    return {"depot": depot, "code": "7319", "unit": 42}

  model = OfflineLlm(script=[tool_call("open_locker", {"depot": "Riverside"}), "Opened."], default="Noted.")
  assert model.received == []
  ag, _ = agent(model=model, tools=[open_locker])
  runner = make_runner(ag, [ContextPackPlugin(window=2048)])
  session = await new_session(runner)
  await say(runner, session.id, "Open my locker at the Riverside depot please.")
  for i in range(60):
    await say(runner, session.id, turn_text(i + 13))
  await say(runner, session.id, "Which locker did you open at the Riverside depot, and what code?")

  stored = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session.id)
  call_event = next(e for e in stored.events if e.get_function_calls())
  assert call_event.get_function_calls()[0].id.startswith("adk-")  # the case at hand: ids ADK made up
  doc = await _last_manifest(runner, session.id)
  rows = [r for r in doc["items"] if r.get("kind") == "recall" and r["status"] == "included"]
  pack = payload_of(model.received[-1])
  line = next(ln for ln in pack.splitlines() if "called open_locker" in ln)
  assert "[undated]" not in line and "(undated" not in line, line
  assert any(r["pointer"] == call_event.id for r in rows), [r["pointer"] for r in rows]
