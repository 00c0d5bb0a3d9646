"""More sessions in flight than the plugin keeps, and sync ``Runner.run`` from threads.

- The step mask and the call records waiting for their responses lived in
  tables capped by session count: with more sessions in flight than that, a
  masked tool ran, and calibration samples were lost (packs then depended on
  load). They now live as long as their invocation and call.
- ``Runner.run`` gives every thread its own event loop; asyncio locks shared
  by the loops left a waiter asleep for good (the writer's flush lock, a
  session's compile lock), and the spool never drained again.
"""

from __future__ import annotations

import asyncio
import threading

from google.adk.agents import LlmAgent
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.genai import types

import aether_frame.adk.plugin as plugin_module
from aether_frame.adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import USER, make_runner, manifests
from tests.test_plugin_tool_scoping_runtime import step_tools

SESSIONS = 12


class _Slow(OfflineLlm):
  """Answers after a pause (every session's call is out at once); the provider counts 1.6x our estimate."""

  async def generate_content_async(self, llm_request, stream=False):
    await asyncio.sleep(0.2)
    async for r in super().generate_content_async(llm_request, stream):
      if r.usage_metadata is not None:
        r.usage_metadata.prompt_token_count = int(r.usage_metadata.prompt_token_count * 1.6)
      yield r


def _msg(text: str) -> types.Content:
  return types.Content(role="user", parts=[types.Part(text=text)])


async def _say(runner, sid: str, text: str) -> None:
  async for _ in runner.run_async(user_id=USER, session_id=sid, new_message=_msg(text)):
    pass


def test_masks_and_calibration_hold_with_more_sessions_in_flight_than_the_plugin_keeps(monkeypatch):
  monkeypatch.setattr(plugin_module, "_MAX_SESSIONS", 3)  # the cap, reached with a dozen sessions
  ran: list[str] = []

  def script(req):
    if any(p.function_response for p in req.contents[-1].parts or ()):
      return "done"
    return tool_call("delete_all", {"x": "1"}, "c1")  # the out-of-step tool

  async def go():
    model = _Slow(model="gpt-4o", default=script)  # an adapter that drops allowed_function_names
    agent = LlmAgent(name="worker", model=model, instruction="Work.", tools=step_tools(ran))
    plugin = ContextPackPlugin(policy=PackPolicy(tool_scoping="mask"), window=8000,
                               manifest_writer=ManifestWriter(spool_dir=False))
    runner = make_runner(agent, [plugin])
    sids = [f"s{i}" for i in range(SESSIONS)]
    for sid in sids:
      await runner.session_service.create_session(app_name=runner.app_name, user_id=USER, session_id=sid,
                                                  state={"tools": ["lookup"]})
    await asyncio.gather(*(_say(runner, sid, "tidy up") for sid in sids))
    assert ran == [] and plugin.faults == 0
    for sid in sids:
      s = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=sid)
      assert s.state[CALIBRATION_KEY]["models"]["gpt-4o"]["samples"] == 2, sid  # both calls learned from
      docs = await manifests(runner, sid)
      assert len(docs) == 2 and docs[1]["token_scale"] > 1.5, (sid, [d["token_scale"] for d in docs])
    assert len({tuple(d["token_scale"] for d in await manifests(runner, sid)) for sid in sids}) == 1
  asyncio.run(go())


def _run_in_thread(runner, sid: str, texts: list[str], out: dict, key) -> threading.Thread:
  def work():
    try:
      for text in texts:
        for _ in runner.run(user_id=USER, session_id=sid, new_message=_msg(text)):
          pass
      out[key] = "ok"
    except Exception as e:  # pragma: no cover - reported by the assertion
      out[key] = repr(e)
  th = threading.Thread(target=work, daemon=True)
  th.start()
  return th


def test_threads_flushing_one_spool_neither_hang_nor_strand_it(tmp_path):
  down = {"now": True}

  class Store(InMemoryArtifactService):
    async def save_artifact(self, **kw):
      if down["now"] and kw.get("filename") == MANIFEST_FILENAME:
        raise ConnectionError("503 backend unavailable")
      await asyncio.sleep(0.05)  # a remote store's latency
      return await super().save_artifact(**kw)

  writer = ManifestWriter(spool_dir=str(tmp_path / "spool"), timeout=2.0)
  plugin = ContextPackPlugin(window=4000, manifest_writer=writer)
  runner = make_runner(LlmAgent(name="a", model=OfflineLlm(default="ok"), instruction="Be brief."), [plugin],
                       artifact_service=Store())
  sids = [f"s{k}" for k in range(4)]
  for sid in sids:
    asyncio.run(runner.session_service.create_session(app_name=runner.app_name, user_id=USER, session_id=sid))
    for _ in runner.run(user_id=USER, session_id=sid, new_message=_msg("during the outage")):
      pass
  assert len(writer.spool.pending()) == 4
  down["now"] = False
  out: dict = {}
  threads = [_run_in_thread(runner, sid, [f"after the outage {t}" for t in range(3)], out, sid) for sid in sids]
  for th in threads:
    th.join(timeout=60)
  assert not any(th.is_alive() for th in threads), "a thread hangs on a lock of another thread's event loop"
  assert out == {sid: "ok" for sid in sids} and plugin.faults == 0
  for _ in runner.run(user_id=USER, session_id=sids[0], new_message=_msg("later")):  # one more call flushes the rest
    pass
  assert writer.spool.pending() == []
  for sid in sids:  # every manifest stored once, in call order
    docs = asyncio.run(manifests(runner, sid))
    assert len(docs) == (5 if sid == sids[0] else 4)


def test_two_threads_on_one_session_are_both_packed_and_do_not_hang():
  class SlowMemory(InMemoryMemoryService):
    async def search_memory(self, **kw):
      await asyncio.sleep(0.3)  # a remote search: the first compile is still running
      return await super().search_memory(**kw)

  model = OfflineLlm(default="noted")
  plugin = ContextPackPlugin(window=8000, manifest_writer=ManifestWriter(spool_dir=False))
  runner = make_runner(LlmAgent(name="a", model=model, instruction="Be brief."), [plugin], memory_service=SlowMemory())
  asyncio.run(runner.session_service.create_session(app_name=runner.app_name, user_id=USER, session_id="S"))
  for _ in runner.run(user_id=USER, session_id="S", new_message=_msg("warm up")):
    pass
  out: dict = {}
  first = _run_in_thread(runner, "S", ["message 0"], out, 0)
  threading.Event().wait(0.1)
  second = _run_in_thread(runner, "S", ["message 1"], out, 1)
  for th in (first, second):
    th.join(timeout=30)
  assert not first.is_alive() and not second.is_alive(), "a thread hangs on a lock of another thread's event loop"
  third = _run_in_thread(runner, "S", ["message 2"], out, 2)
  third.join(timeout=30)
  assert out == {0: "ok", 1: "ok", 2: "ok"} and plugin.faults == 0
  assert len(model.received) == 4
  for req in model.received:
    assert (req.contents[-1].parts[0].text or "").startswith("CONTEXT PACK v1")


def test_each_session_ranks_with_a_ranker_of_its_own():
  """The ranker's per-layer BM25 indexes are mutated by a compile: shared by every session,
  two sessions compiling in two threads (layers over 48 items) raised mid-ranking and cost
  their users the pack. Each session's compiler gets a child sharing only the analysis caches."""
  model = OfflineLlm(default="noted")
  plugin = ContextPackPlugin(window=8000, manifest_writer=ManifestWriter(spool_dir=False))
  runner = make_runner(LlmAgent(name="a", model=model, instruction="Be brief."), [plugin])
  for sid in ("s1", "s2"):
    asyncio.run(runner.session_service.create_session(app_name=runner.app_name, user_id=USER, session_id=sid))
    for _ in runner.run(user_id=USER, session_id=sid, new_message=_msg("hello")):
      pass
  rankers = [cache.compiler.ranker for cache in plugin._sessions.values()]
  assert len(rankers) == 2 and rankers[0] is not rankers[1] and plugin.ranker not in rankers
  assert rankers[0]._features is rankers[1]._features is plugin.ranker._features  # analysis stays shared
  assert rankers[0]._layers is not rankers[1]._layers
