"""ADK 2.13 features that reach the request pipeline, through a real Runner.

Each test drives an ADK feature the plugin must size or leave alone: a
``FallbackModel`` whose backup has a smaller window than its primary, live
(bidi) sessions whose model callback only screens a copy of one message, and
an ``output_schema`` the provider charges as prompt tokens.
"""

from __future__ import annotations

import logging


import pytest
from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import errors, types

from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY, LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.offline_model import OfflineLlm

from tests.adk_support import USER, fallback_model, make_runner, manifests, new_session, say

pytestmark = pytest.mark.asyncio



async def _state(runner, session_id: str) -> dict:
  s = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
  return dict(s.state)


class _Overloaded(OfflineLlm):
  """A primary that answers until ``fail`` is set, then returns 503 (FallbackModel moves on)."""

  fail: bool = False

  async def generate_content_async(self, llm_request, stream: bool = False):
    if self.fail:
      self._received.append(llm_request.model_copy(deep=True))
      raise errors.ServerError(503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    async for r in super().generate_content_async(llm_request, stream):
      yield r


LONG = " ".join(f"fact{i} about the harbour and its tides" for i in range(120))  # ~1K tokens


async def test_fallback_model_pack_fits_the_smallest_window_of_its_models():
  """A FallbackModel request is built once and may be answered by any of its
  models; ADK names the primary on the request, so a pack sized for the
  primary's window overflows a backup with a smaller one."""
  primary = _Overloaded(model="offline-big")
  backup = OfflineLlm(model="offline-small")
  model = fallback_model(primary, backup)
  agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.")
  plugin = ContextPackPlugin(window_overrides={"offline-big": 200_000, "offline-small": 6_000})
  runner = make_runner(agent, [plugin])
  session = await new_session(runner)
  for i in range(8):
    await say(runner, session.id, f"turn {i}: {LONG}")
  primary.fail = True
  events = await say(runner, session.id, "Summarise what you know.")

  assert events[-1].content.parts[0].text == "ok"
  assert len(backup.received) == 1, "the backup answered the last turn"
  sent = backup.received[0]
  # The request fits the backup's whole window, and the pack was sized for it.
  assert count_request(sent.contents, sent.config, plugin.counter) < 6_000
  docs = await manifests(runner, session.id)
  assert docs[-1]["window"] == 6_000
  assert count_request(sent.contents, sent.config, plugin.counter) <= docs[-1]["usable"]
  assert LAST_FAULT_KEY not in await _state(runner, session.id)


class _Heavy(OfflineLlm):
  """A model whose provider counts 1.5x our estimate."""

  async def generate_content_async(self, llm_request, stream: bool = False):
    async for r in super().generate_content_async(llm_request, stream):
      if r.usage_metadata is not None:
        r.usage_metadata.prompt_token_count = int(r.usage_metadata.prompt_token_count * 1.5)
      yield r


async def test_fallback_model_calibration_is_learned_for_the_model_that_answered():
  """The backup's prompt count is its own tokenizer's: kept under its name, not the primary's."""
  primary = _Overloaded(model="offline-big", fail=True)
  backup = _Heavy(model="offline-small")
  model = fallback_model(primary, backup)
  agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.")
  runner = make_runner(agent, [ContextPackPlugin(window_overrides={"offline-big": 64_000, "offline-small": 32_000})])
  session = await new_session(runner)
  await say(runner, session.id, "hello there")

  models = (await _state(runner, session.id))[CALIBRATION_KEY]["models"]
  assert "offline-small" in models and "offline-big" not in models
  # The next pack is sized by the backup's ratio, and its manifest shows that ratio, not the
  # primary's empty one (inspect read 'the safety margin alone' under a scale of 1.26x).
  await say(runner, session.id, "and again")
  doc = (await manifests(runner, session.id))[-1]
  cal = doc["runtime"]["calibration"]
  assert cal["samples"] == 1 and cal["ratio"] == models["offline-small"]["ratio"] > 1.4
  assert doc["token_scale"] == round(cal["ratio"] * 1.05, 6)


# --------------------------------------------------------------------- live
import asyncio
from contextlib import asynccontextmanager

from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_response import LlmResponse


class _LiveConnection(BaseLlmConnection):
  """Records what reaches the model; answers each content with one turn."""

  def __init__(self):
    self.history = None
    self.sent: list[types.Content] = []
    self._q: asyncio.Queue = asyncio.Queue()

  async def send_history(self, history):
    self.history = list(history)

  async def send_content(self, content):
    self.sent.append(content)
    await self._q.put(content)

  async def send_realtime(self, blob):
    pass

  async def receive(self):
    while await self._q.get() is not None:
      yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="heard you")]))
      yield LlmResponse(turn_complete=True)

  async def close(self):
    await self._q.put(None)


class _LiveLlm(OfflineLlm):
  model: str = "offline-live"

  @asynccontextmanager
  async def connect(self, llm_request):
    self._conn = _LiveConnection()
    yield self._conn


async def test_live_session_is_not_packed_and_writes_no_manifest():
  """In a live (bidi) session the model callback only screens a copy of each
  typed message (``screen_live_user_content``); the connection sends the
  message itself. A pack built there is never sent, so it must not be written
  as a manifest nor recorded as the session's last pack."""
  llm = _LiveLlm()
  agent = LlmAgent(name="assistant", model=llm, instruction="You are a helpful assistant.")
  runner = make_runner(agent, [ContextPackPlugin(window=32_000)])
  session = await new_session(runner)
  queue = LiveRequestQueue()
  queue.send_content(types.Content(role="user", parts=[types.Part(text="hello live")]))

  async def drive():
    async for ev in runner.run_live(user_id=USER, session_id=session.id, live_request_queue=queue,
                                    run_config=RunConfig(response_modalities=["TEXT"])):
      if ev.content and any(p.text == "heard you" for p in ev.content.parts or ()):
        queue.close()
        return

  await asyncio.wait_for(drive(), timeout=20)

  sent = llm._conn.sent
  assert [p.text for c in sent for p in c.parts] == ["hello live"]
  assert await manifests(runner, session.id) == []
  state = await _state(runner, session.id)
  assert LAST_PACK_KEY not in state and LAST_FAULT_KEY not in state


# ------------------------------------------------------------ output schema
import json

from pydantic import Field, create_model

from aether_frame.adk import sources

# A report schema of 24 described fields (~1.5K tokens), as structured-output apps declare them.
_Report = create_model(
    "Report",
    **{f"field_{i}": (str | None, Field(default=None, description=f"The {i}th finding about the harbour, its tides "
                                                               f"and the vessels that moored there, in one sentence."))
       for i in range(24)},
)


async def test_output_schema_is_charged_to_the_budget():
  """ADK sends ``output_schema`` as ``config.response_schema``; the provider
  counts the schema toward the prompt, so a pack that leaves it out of the
  budget goes over the usable window."""
  llm = OfflineLlm(default="{}")
  agent = LlmAgent(name="assistant", model=llm, instruction="You are a helpful assistant.", output_schema=_Report)
  plugin = ContextPackPlugin(window=6_000)
  runner = make_runner(agent, [plugin])
  session = await new_session(runner)
  for i in range(6):
    await say(runner, session.id, f"turn {i}: {LONG}")

  sent = llm.received[-1]
  assert sent.config.response_schema is _Report
  counter = plugin.counter
  schema_tokens = counter.count(json.dumps(_Report.model_json_schema()))
  assert schema_tokens > 1_000
  sent_tokens = (counter.count(sources.system_text(sent.config)) + sources.contents_tokens(sent.contents, counter)
                 + schema_tokens)
  docs = await manifests(runner, session.id)
  assert sent_tokens <= docs[-1]["usable"]
  assert LAST_FAULT_KEY not in await _state(runner, session.id)


async def test_a_sliding_session_window_keeps_every_turns_provenance():
  """``RunConfig(get_session_config=GetSessionConfig(num_recent_events=N))`` loads a
  window of the same length every invocation; the event index must still find
  the new events (it counted them, and from the window's first slide on every
  new turn lost its timestamp, author and event id)."""
  from google.adk.agents.run_config import RunConfig
  from google.adk.sessions.base_session_service import GetSessionConfig

  model = OfflineLlm(default="noted")
  agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.")
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(agent, [plugin])
  session = await new_session(runner)
  run_config = RunConfig(get_session_config=GetSessionConfig(num_recent_events=6))
  for t in range(8):
    message = types.Content(role="user", parts=[types.Part(text=f"turn {t} about topic{t}")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message, run_config=run_config):
      pass
    if t >= 4:  # the window has slid by then
      stored = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session.id)
      by_id = {e.id: e for e in stored.events}
      (cache,) = plugin._sessions.values()
      groups = cache.compiler.history
      assert len(groups) >= 4, t
      assert [g.provenance.source in by_id for g in groups] == [True] * len(groups), t
      user_turns = [g for g in groups if g.role == "user"]
      assert len(user_turns) >= 2, t
      assert all(g.provenance.timestamp == by_id[g.provenance.source].timestamp for g in user_turns)


async def test_a_plugin_that_edits_the_request_after_the_pack_is_named(caplog):
  """ADK runs plugins in list order: a global instruction (or parts, or a trim)
  added after the pack is built is outside its budget, so the order is named
  once; before the pack, the same instruction is part of the budgeted system text."""
  from google.adk.plugins.global_instruction_plugin import GlobalInstructionPlugin
  from google.adk.plugins.logging_plugin import LoggingPlugin

  class Stamp(BasePlugin):  # a user's own plugin that edits requests
    def __init__(self):
      super().__init__("stamp")

    async def before_model_callback(self, *, callback_context, llm_request):
      llm_request.contents[-1].parts.append(types.Part(text="[stamped]"))

  async def run(plugins) -> OfflineLlm:
    model = OfflineLlm(default="ok")
    agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.")
    runner = make_runner(agent, plugins)
    session = await new_session(runner)
    for text in ("first", "second"):
      await say(runner, session.id, text)
    return model

  after = ContextPackPlugin(window=8192)
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    await run([after, GlobalInstructionPlugin("Always answer in French."), LoggingPlugin(), Stamp()])
  named = [r.getMessage() for r in caplog.records if "runs after ContextPackPlugin" in r.getMessage()]
  assert len(named) == 2 and "'global_instruction'" in named[0] and "'stamp'" in named[1]  # not logging_plugin

  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    model = await run([GlobalInstructionPlugin("Always answer in French."), ContextPackPlugin(window=8192)])
  assert not [r for r in caplog.records if "runs after ContextPackPlugin" in r.getMessage()]
  system = model.received[-1].config.system_instruction
  assert "Always answer in French." in (system if isinstance(system, str) else str(system))


async def test_a_second_context_pack_plugin_stands_aside(caplog):
  """``adk api_server --extra_plugins aether_frame.ContextPackPlugin`` on an app that lists one
  already: the second packed the first one's pack again (a pack inside the pack) and stored a
  second manifest per call. Only the first packs; the second says why, once."""
  model = OfflineLlm(default="ok")
  agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.")
  first, second = ContextPackPlugin(window=8192), ContextPackPlugin(window=8192, name="extra_context_pack")
  runner = make_runner(agent, [first, second])
  session = await new_session(runner)
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    for text in ("first question", "second question"):
      await say(runner, session.id, text)
  for request in model.received:
    text = "".join(p.text or "" for p in request.contents[-1].parts)
    assert text.count("USER REQUEST (VERBATIM):") == 1, text
  assert len(await manifests(runner, session.id)) == len(model.received) == 2
  said = [r.getMessage() for r in caplog.records if "two ContextPackPlugins" in r.getMessage()]
  assert len(said) == 1 and "'aether_frame_context_pack'" in said[0] and "'extra_context_pack'" in said[0]
  assert not [r for r in caplog.records if "runs after ContextPackPlugin" in r.getMessage()]
