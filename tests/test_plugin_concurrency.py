"""Two invocations of one session at once (a user sends again before the first reply).

ADK does not serialize a session's invocations. The plugin keeps one warm
compiler per (session, agent, branch, node path) and syncs it with the
request's history before awaiting the artifact listing and the memory
search; a second invocation syncing it meanwhile made the first compile the
second's history.
"""

from __future__ import annotations

import asyncio

from google.adk.memory import InMemoryMemoryService

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import Recorder, agent, make_runner, manifests, new_session, say


class SlowMemory(InMemoryMemoryService):
  """ADK's in-memory service whose search answers after a pause, like a remote one."""

  async def search_memory(self, **kw):
    await asyncio.sleep(0.05)
    return await super().search_memory(**kw)


def _history_texts(request) -> list[str]:
  out = []
  for c in request.contents:
    text = "".join(p.text or "" for p in c.parts or ())
    if text.startswith("CONTEXT PACK v1"):
      break
    out.append(f"{c.role}:{text}")
  return out


async def test_concurrent_invocations_of_one_session_each_get_their_own_history():
  model = OfflineLlm(default=lambda req: "noted")
  ag, _ = agent(model=model)
  recorder = Recorder()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(ag, [recorder, plugin], memory_service=SlowMemory())
  session = await new_session(runner)
  for t in range(3):
    await say(runner, session.id, f"warm-up turn {t}")
  async def second():
    await asyncio.sleep(0.01)  # the first is in its memory search; this one's history holds its message
    await say(runner, session.id, "second message")

  await asyncio.gather(say(runner, session.id, "first message"), second())

  assert len(model.received) == len(recorder.requests) == 5
  for sent, original in zip(model.received[3:], recorder.requests[3:]):
    orig_texts = [f"{c.role}:{''.join(p.text or '' for p in c.parts or ())}" for c in original.contents]
    # A 100k window keeps the whole history: exactly what ADK gave this request, before its own turn.
    assert _history_texts(sent) == orig_texts[:-1]
  docs = await manifests(runner, session.id)
  assert len(docs) == 5 and not any(d["runtime"]["guard"]["fallback"] for d in docs)
  # Each manifest describes its own request: the second's history holds the first message, the first's does not.
  history_len = {d["invocation_id"]: d["tail"]["history_len"] for d in docs[3:]}
  assert sorted(history_len.values()) == [6, 7], history_len
  assert plugin.faults == 0
  assert plugin._busy == {}  # a key's lock lives only while a compile holds or awaits it



async def test_a_fault_releases_the_key_for_the_next_call():
  calls = []

  def boom():
    calls.append(1)
    if len(calls) == 1:
      raise RuntimeError("injected")

  model = OfflineLlm(default=lambda req: "ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom)
  runner = make_runner(ag, [plugin])
  session = await new_session(runner)
  await say(runner, session.id, "one")
  await say(runner, session.id, "two")
  assert plugin.faults == 1 and plugin._busy == {}
  assert len(await manifests(runner, session.id)) == 1  # the second call was packed


class SlowLlm(OfflineLlm):
  """The offline model, answering after a pause: a second call goes out before the first returns."""

  async def generate_content_async(self, llm_request, stream=False):
    await asyncio.sleep(0.1)
    async for response in super().generate_content_async(llm_request, stream):
      yield response


async def test_concurrent_calls_of_one_key_are_each_calibrated_and_release_their_request():
  """One record per call out, not one slot per compiler key: the second call's record
  overwrote the first's, whose response then went uncalibrated. A call's request (media
  and all) is let go at its first response."""
  model = SlowLlm(default="noted")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(ag, [plugin], memory_service=SlowMemory())
  session = await new_session(runner)
  await say(runner, session.id, "warm-up")
  assert plugin.calibrator.snapshot("offline-model")["samples"] == 1

  async def second():
    await asyncio.sleep(0.01)
    await say(runner, session.id, "second message")

  await asyncio.gather(say(runner, session.id, "first message"), second())
  assert len(model.received) == 3
  assert plugin.calibrator.snapshot("offline-model")["samples"] == 3
  assert len(plugin._calls) == 3 and all(c.request is None and c.observed for c in plugin._calls.values())
