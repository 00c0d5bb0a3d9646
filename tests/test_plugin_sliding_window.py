"""Workers taking turns on a session loaded as a sliding window of events.

With ``RunConfig(get_session_config=GetSessionConfig(num_recent_events=N))``
every invocation sees the last N events. A worker that skipped turns found
the window moved by several turns; the plugin judged "the history only grew"
by the two ends, and when those repeated ("continue" and the same reply) it
kept turns that had left the window in its compiler. Its spans then pointed
at other contents of the real request: one call's tool response without its
call, the guard's fallback, and a pack with no conversation at all. Any worker
must send what one worker serving every turn sends.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import sys

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.artifacts import InMemoryArtifactService
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import APP, USER, make_runner, manifests

TURNS, WINDOW, RECENT = 24, 900, 30
BASE = 1_750_000_000.0


def search_notes(query: str) -> dict:
  """Searches the research notes."""
  return {"query": query, "hits": [f"note on {query}: vendor A leads."]}


def _reply(request):
  response = next((p.function_response for p in request.contents[-1].parts or () if p.function_response), None)
  if response is not None:
    return f"Based on {response.name}: {json.dumps(response.response, sort_keys=True)[:80]}"
  text = next(p.text for c in reversed(request.contents) if c.role == "user" for p in c.parts or () if p.text)
  said = text.rsplit("USER REQUEST (VERBATIM):\n", 1)[-1]
  h = hashlib.sha1(said.encode()).hexdigest()[:6]
  if said.startswith("search "):
    return tool_call("search_notes", {"query": said[7:40]}, f"call-{h}")
  return f"Noted ({h}). " + "I will fold that into the comparison. " * 4


def _turn_text(n: int) -> str:
  if n % 2 == 0:
    return "continue"
  if n % 3 == 0:
    return f"search vendor topic {n}"
  return f"Turn {n}: vendor {n} costs {n * 7} dollars. " + "Details follow. " * 8


class _Worker:
  def __init__(self, sessions, artifacts):
    self.model = OfflineLlm(default=_reply)
    self.plugin = ContextPackPlugin(window=WINDOW)
    agent = LlmAgent(name="assistant", model=self.model, instruction="You are a research assistant.", tools=[search_notes])
    self.runner = make_runner(agent, [self.plugin], session_service=sessions, artifact_service=artifacts)

  async def turn(self, n: int) -> list[str]:
    ticks, ids = itertools.count(), itertools.count()

    def clock() -> float:
      # Pinned per turn and per event. A worker that has not seen the session stores more
      # input blobs: the artifact store's reads of the clock must not move the events' times.
      caller = sys._getframe(2).f_globals.get("__name__", "")
      return BASE + n * 100 if caller.startswith("google.adk.artifacts") else BASE + n * 100 + next(ticks) * 0.001

    platform_time.set_time_provider(clock)
    platform_uuid.set_id_provider(lambda: f"t{n:03d}-{next(ids):04d}")
    before = len(self.model.received)
    try:
      run_config = RunConfig(get_session_config=GetSessionConfig(num_recent_events=RECENT))
      async for _ in self.runner.run_async(user_id=USER, session_id="s1", run_config=run_config,
                                           new_message=types.Content(role="user", parts=[types.Part(text=_turn_text(n))])):
        pass
    finally:
      platform_time.reset_time_provider()
      platform_uuid.reset_id_provider()
    return [json.dumps([c.model_dump(mode="json", exclude_none=True) for c in r.contents], sort_keys=True)
            for r in self.model.received[before:]]


async def _serve(assign) -> tuple[list[list[str]], int, list[str]]:
  sessions, artifacts = InMemorySessionService(), InMemoryArtifactService()
  await sessions.create_session(app_name=APP, user_id=USER, session_id="s1")
  workers: dict[str, _Worker] = {}
  sent = []
  for n in range(1, TURNS + 1):
    name = assign(n)
    if name not in workers:
      workers[name] = _Worker(sessions, artifacts)
    sent.append(await workers[name].turn(n))
  docs = await manifests(next(iter(workers.values())).runner, "s1")
  return sent, sum(w.plugin.faults for w in workers.values()), [d["input_sha256"] for d in docs]


def test_workers_taking_turns_send_what_one_worker_sends():
  async def go():
    one, faults, inputs = await _serve(lambda n: "A")
    assert faults == 0
    assert sum(len(t) for t in one) > TURNS  # tool calls took a second model call
    for schedule in (lambda n: "A" if n % 2 else "B", lambda n: "A" if n % 3 == 1 else "B"):
      many, faults, many_inputs = await _serve(schedule)
      assert faults == 0
      assert [n for n, (a, b) in enumerate(zip(one, many), 1) if a != b] == []
      assert many_inputs == inputs  # the same compile inputs too: times and event ids from the same window
  asyncio.run(go())
