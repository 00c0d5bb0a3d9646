"""The plugin's session state on ADK's session services, through a real Runner.

Between calls the plugin keeps its last-pack pointer, last fault, calibration
and tail hint in session state, and reads the plan from it. A second worker
(a fresh plugin, Runner and service instance on the same storage, as another
process would have) must read all of it back exactly and compile the packs a
single worker would. Services: ADK's ``InMemorySessionService``,
``SqliteSessionService`` (aiosqlite) and ``DatabaseSessionService`` on
``sqlite+aiosqlite`` (needs SQLAlchemy, ADK's ``db`` extra: skipped without
it), and our ``RedisSessionService`` on a throwaway redis-server.

The last part pins what happens when a callback that ADK runs after the
plugin (the agent's own guardrail, or a plugin listed later) answers instead
of the model: no after-model callback runs, so calibration learns nothing
from it, and the plugin takes its state writes back before the event is
stored. The manifest of that unsent pack stays in the artifact store.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from google.adk.artifacts import FileArtifactService
from google.adk.models.llm_response import LlmResponse
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from aether_frame.adk.manifest_store import MANIFEST_FILENAME
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY, LAST_FAULT_KEY, LAST_PACK_KEY, TAIL_KEY_PREFIX
from aether_frame.offline_model import OfflineLlm
from aether_frame.stores import RedisSessionService
from tests.adk_support import APP, USER, agent, make_runner, manifests, payload_of, say
from tests.fixtures.redis_server import redis_server  # noqa: F401

pytestmark = pytest.mark.asyncio

SID = "shared-session"
TAIL_KEY = TAIL_KEY_PREFIX + "assistant"
OURS = (LAST_PACK_KEY, LAST_FAULT_KEY, CALIBRATION_KEY, TAIL_KEY)
WINDOW = 3000
PLAN = {"goal": "Compare three vendors", "step": "Collect pricing facts", "acceptance": ["Every figure cites a source"]}
# Words o200k_base counts in fewer tokens than the offline model's cl100k_base: a ratio above 1 to learn.
TEXTS = [f"Turn {t}: " + "Résumé of vendor prices, naïve café ☕ rollout dates — ok? " * 10 for t in range(24)]
REPLY = "Reply. " + "Understood, noted for the comparison. " * 4
KINDS = ["memory", "sqlite", "database", "redis"]


class Storage:
  """One kind of session storage; ``open(tag)`` is a fresh service on the ``tag`` store.

  Runs with different tags never see each other; two ``open`` calls with one
  tag reach the same sessions, as two processes would (the in-memory service
  has no storage of its own, so both get the one instance).
  """

  def __init__(self, kind: str, tmp_path, redis_url: str = ""):
    self.kind, self.tmp_path, self.redis_url = kind, tmp_path, redis_url
    self._memory: dict[str, InMemorySessionService] = {}
    self.opened: list[Any] = []

  def open(self, tag: str):
    if self.kind == "memory":
      return self._memory.setdefault(tag, InMemorySessionService())
    if self.kind == "sqlite":
      svc = SqliteSessionService(str(self.tmp_path / f"{tag}.db"))
    elif self.kind == "database":
      from google.adk.sessions.database_session_service import DatabaseSessionService
      svc = DatabaseSessionService(f"sqlite+aiosqlite:///{self.tmp_path / f'{tag}-sa.db'}")
    else:
      svc = RedisSessionService(self.redis_url, key_prefix=f"af-{tag}")
    self.opened.append(svc)
    return svc

  def artifacts(self, tag: str) -> FileArtifactService:
    """A fresh artifact service on the ``tag`` run's directory."""
    return FileArtifactService(self.tmp_path / f"{tag}-artifacts")

  async def close(self) -> None:
    for svc in self.opened:
      await svc.close()


@pytest.fixture(params=KINDS)
async def storage(request, tmp_path):
  url = ""
  if request.param == "database":
    pytest.importorskip("sqlalchemy", reason="DatabaseSessionService needs SQLAlchemy (google-adk[db])")
  if request.param == "redis":
    server = request.getfixturevalue("redis_server")
    server.flush()
    url = server.url
  store = Storage(request.param, tmp_path, url)
  yield store
  await store.close()


def _strict(value: Any, where: str = "state") -> Any:
  """``value`` with every leaf tagged by its type, after checking it is plain JSON.

  1 and 1.0, or a tuple and a list, compare equal in Python and unequal after
  a JSON round trip: tagged, they differ here too.
  """
  if isinstance(value, dict):
    assert all(isinstance(k, str) for k in value), f"{where}: non-string key in {value!r}"
    return ("dict", {k: _strict(v, f"{where}.{k}") for k, v in value.items()})
  if isinstance(value, list):
    return ("list", [_strict(v, f"{where}[]") for v in value])
  assert value is None or type(value) in (str, int, float, bool), f"{where}: {type(value).__name__} is not JSON"
  assert not isinstance(value, float) or math.isfinite(value), f"{where}: {value!r}"
  return (type(value).__name__, value)


def _pin_clock(turn: int) -> None:
  """Event times and ids that depend on the turn alone, so two runs build equal sessions."""
  ticks, ids = itertools.count(), itertools.count()
  platform_time.set_time_provider(lambda: 1_700_000_000 + 100 * turn + next(ticks) * 0.01)
  platform_uuid.set_id_provider(lambda: f"t{turn}-{next(ids):04d}")


class Run:
  """What one script run observed: the requests sent, the plugin's writes, the stored result."""

  def __init__(self):
    self.requests: list[Any] = []
    self.written: dict[str, Any] = {}
    self.plugins: dict[int, ContextPackPlugin] = {}
    self.manifests: list[dict] = []
    self.state: dict[str, Any] = {}


async def run_script(storage: Storage, tag: str, workers: list[int], *, texts=TEXTS, make_plugin=None,
                     guarded: bool = False) -> Run:
  """Says ``texts[t]`` through worker ``workers[t]``: each worker is its own plugin,
  Runner, session service and artifact service instance on the ``tag`` storage.
  ``guarded``: the agent's own ``_guardrail`` answers "forbidden" turns, whose
  request is recorded as None (the model never saw one)."""
  run, runners = Run(), {}
  try:
    for t, w in enumerate(workers):
      if w not in runners:
        model = OfflineLlm(default=REPLY)
        ag, _ = agent(model=model, before_model_callback=_guardrail if guarded else None)
        plugin = run.plugins[w] = (make_plugin or (lambda: ContextPackPlugin(window=WINDOW)))()
        runners[w] = (make_runner(ag, [plugin], session_service=storage.open(tag), artifact_service=storage.artifacts(tag)), model)
      runner, model = runners[w]
      _pin_clock(t)
      if t == 0:
        await runner.session_service.create_session(
            app_name=APP, user_id=USER, session_id=SID, state={"plan": PLAN, "user:locale": "nb-NO", "app:tier": "gold"})
      seen = len(model.received)
      for event in await say(runner, SID, texts[t]):
        run.written.update({k: v for k, v in event.actions.state_delta.items() if k.startswith("aether_frame:")})
      run.requests.append(model.received[-1] if len(model.received) > seen else None)
  finally:
    platform_time.reset_time_provider()
    platform_uuid.reset_id_provider()
  fresh = make_runner(agent()[0], [], session_service=storage.open(tag), artifact_service=storage.artifacts(tag))
  run.manifests = await manifests(fresh, SID)
  run.state = (await fresh.session_service.get_session(app_name=APP, user_id=USER, session_id=SID)).state
  return run


def _untimed(doc: dict) -> dict:
  return {**doc, "runtime": {k: v for k, v in doc["runtime"].items() if k != "compile_ms"}}


def _contents(request) -> list[str]:
  return [c.model_dump_json(exclude_none=True) for c in request.contents]


# ----------------------------------------------------------------- round trips
async def test_every_value_the_plugin_writes_round_trips_exactly(storage):
  """Pointer, fault, calibration and tail hint read back from a fresh service
  instance as the plugin wrote them (types included), in session scope only."""
  calls = itertools.count()

  def fault_on_third_call():
    if next(calls) == 2:
      raise RuntimeError("injected fault")

  # Long enough turns that the tail is cut (no cut, no key).
  texts = [f"turn {t}: Résumé of the 2025 numbers: 1,234,567.89 units; naïve café ☕ — ok? " * 18 for t in range(5)]
  run = await run_script(storage, "rt", [0] * 5, texts=texts, make_plugin=lambda: ContextPackPlugin(
      window=WINDOW, _fault_injector=fault_on_third_call))
  assert set(run.written) == set(OURS), "the fixture must make the plugin write every key it keeps"
  for key in OURS:
    assert _strict(run.state[key], key) == _strict(run.written[key], key), key
  # A ratio that 15 significant digits do not carry (SQLite's json_group_object writes 15).
  ratio = run.state[CALIBRATION_KEY]["models"]["offline-model"]["ratio"]
  assert float(f"{ratio:.15g}") != ratio
  assert run.state[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 4  # the faulted call is not estimated
  fault = run.state[LAST_FAULT_KEY]
  assert (fault["error"], fault["message"], fault["count"], fault["outcome"]) == (
      "RuntimeError", "injected fault", 1, "request sent unmodified")
  assert isinstance(run.state[TAIL_KEY], str) and run.state[TAIL_KEY] == run.manifests[-1]["tail"]["start_id"]
  assert run.state[LAST_PACK_KEY]["pack_id"] == run.manifests[-1]["pack_id"]
  assert run.state[LAST_PACK_KEY]["version"] == len(run.manifests) - 1 == 3  # the faulted call wrote none

  # Nothing the plugin keeps is app-, user- or temp-scoped: a new session of the
  # same user sees the user's and app's own keys (ADK's scopes), none of the plugin's.
  assert not [k for k in run.written if k.startswith(("app:", "user:", "temp:"))]
  other = await storage.open("rt").create_session(app_name=APP, user_id=USER, session_id="other")
  other = await storage.open("rt").get_session(app_name=APP, user_id=USER, session_id="other")
  assert other.state == {"user:locale": "nb-NO", "app:tier": "gold"}
  assert run.state["user:locale"] == "nb-NO" and run.state["app:tier"] == "gold"


async def test_a_non_string_tail_hint_in_state_is_ignored(storage):
  """Anyone can write state: a list where the tail hint belongs must not fault every call."""
  svc = storage.open("bad")
  await svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={TAIL_KEY: ["not", "a", "hint"]})
  model = OfflineLlm(default=REPLY)
  plugin = ContextPackPlugin(window=WINDOW)
  runner = make_runner(agent(model=model)[0], [plugin], session_service=svc, artifact_service=storage.artifacts("bad"))
  await say(runner, SID, "hello there")
  await say(runner, SID, "and again")
  assert plugin.faults == 0
  assert all(payload_of(r).startswith("CONTEXT PACK v1") for r in model.received)
  state = (await storage.open("bad").get_session(app_name=APP, user_id=USER, session_id=SID)).state
  assert LAST_FAULT_KEY not in state and state[TAIL_KEY] is None  # the junk replaced: no cut yet


# ------------------------------------------------------------- second worker
async def test_workers_taking_turns_send_the_packs_one_worker_would(storage):
  """Worker A, then a cold worker B (fresh plugin, Runner and service instance),
  then A again, warm, over one session on a window that trims the tail:
  every request, manifest and the final state equal one worker's run."""
  single = await run_script(storage, "single", [0] * 24)
  shared = await run_script(storage, "shared", [0] * 13 + [1] * 2 + [0] * 9)

  trims = [t for t, d in enumerate(single.manifests) if any("chunked trim" in e["reason"] for e in d["truncation_events"])]
  assert 10 in trims and 13 in trims and 15 not in trims and max(trims) > 15, \
      f"the fixture must trim before and at the handoff, and after A is back: {trims}"
  for t, (one, two) in enumerate(zip(single.requests, shared.requests, strict=True)):
    assert payload_of(two) == payload_of(one), f"turn {t}"
    assert _contents(two) == _contents(one), f"turn {t}: kept history"
  assert [_untimed(d) for d in shared.manifests] == [_untimed(d) for d in single.manifests]
  assert _strict(shared.state) == _strict(single.state)

  # B's first call scaled by the 13 samples the session had learned, not the cold 1.05.
  first_b = shared.manifests[13]
  cal = first_b["runtime"]["calibration"]
  assert cal["samples"] == 13 and cal["last_estimate"] == shared.manifests[12]["runtime"]["request_tokens_estimate"]
  assert first_b["token_scale"] == round(max(cal["ratio"], 1.0) * 1.05, 6) > 1.05
  # B trimmed from the cut A left in state; A, back, kept the cut B left, not its own older one.
  assert shared.manifests[13]["tail"]["start"] > shared.manifests[12]["tail"]["start"] > 0
  assert shared.manifests[15]["tail"]["start"] == shared.manifests[14]["tail"]["start"] == shared.manifests[13]["tail"]["start"]
  assert shared.state[TAIL_KEY] == shared.manifests[-1]["tail"]["start_id"]
  assert shared.state[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 24
  assert all(p.faults == 0 for p in shared.plugins.values())


# ---------------------------------------------- a response instead of the model
BLOCKED = "I can't help with that."


def _guardrail(callback_context, llm_request):
  """Blocks on the user's own words (the request it sees is already the pack)."""
  said = " ".join(p.text or "" for p in (callback_context.user_content.parts or ()))
  if "forbidden" in said:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=BLOCKED)]))
  return None


class LaterGuardrail(BasePlugin):
  """A plugin listed after ContextPackPlugin that answers instead of the model."""

  def __init__(self):
    super().__init__("later_guardrail")

  async def before_model_callback(self, *, callback_context, llm_request):
    return _guardrail(callback_context, llm_request)


class AfterModelSpy(BasePlugin):
  def __init__(self):
    super().__init__("after_model_spy")
    self.responses: list[str] = []

  async def after_model_callback(self, *, callback_context, llm_response):
    self.responses.append(llm_response.content.parts[0].text)


async def _blocked_turn_is_taken_back(storage, where: str):
  model = OfflineLlm(default=REPLY)
  spy, plugin = AfterModelSpy(), ContextPackPlugin(window=WINDOW)
  if where == "agent":
    ag, _ = agent(model=model, before_model_callback=_guardrail)
    plugins = [spy, plugin]
  else:
    ag, _ = agent(model=model)
    plugins = [spy, plugin, LaterGuardrail()]
  runner = make_runner(ag, plugins, session_service=storage.open("g"), artifact_service=storage.artifacts("g"))
  await runner.session_service.create_session(app_name=APP, user_id=USER, session_id=SID)

  async def stored():
    return (await storage.open("g").get_session(app_name=APP, user_id=USER, session_id=SID)).state

  await say(runner, SID, "Turn 0: " + "notes about vendor prices. " * 10)
  await say(runner, SID, "Turn 1: " + "notes about vendor prices. " * 10)
  before = await stored()
  events = await say(runner, SID, "Turn 2: tell me something forbidden")
  assert [e.content.parts[0].text for e in events] == [BLOCKED]
  assert len(model.received) == 2, "the model never saw the blocked request"
  # ADK runs no after-model callback for a response a before-model callback gave.
  assert spy.responses == [REPLY, REPLY]
  after = await stored()
  assert after[LAST_PACK_KEY] == before[LAST_PACK_KEY], "the pointer names the last pack sent"
  assert after.get(TAIL_KEY, "absent") == before.get(TAIL_KEY, "absent")
  assert after[CALIBRATION_KEY] == before[CALIBRATION_KEY]
  assert LAST_FAULT_KEY not in after and plugin.faults == 0
  (cache,) = plugin._sessions.values()
  assert all(c.observed for c in plugin._calls.values()), "the blocked call's record was taken back"
  assert cache.tail_hint == before.get(TAIL_KEY)
  # Pinned: the unsent pack's manifest stays stored (no artifact version can be
  # withdrawn) and its event records the save; no pointer names it.
  docs = await manifests(runner, SID)
  assert len(docs) == 3 and docs[2]["pack_id"] != after[LAST_PACK_KEY]["pack_id"]
  assert events[0].actions.artifact_delta == {MANIFEST_FILENAME: 2}
  assert not set(OURS) & set(events[0].actions.state_delta)

  await say(runner, SID, "Turn 3: " + "notes about vendor prices. " * 10)
  docs = await manifests(runner, SID)
  last = await stored()
  assert len(model.received) == 3 and len(docs) == 4
  assert last[LAST_PACK_KEY]["version"] == 3 and last[LAST_PACK_KEY]["pack_id"] == docs[3]["pack_id"]
  # Calibration compared each sent estimate with its own response only.
  cal = docs[3]["runtime"]["calibration"]
  assert cal["samples"] == 2 and cal["last_estimate"] == docs[1]["runtime"]["request_tokens_estimate"]
  assert last[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 3


async def test_an_agent_guardrail_that_answers_leaves_no_pack_in_state(storage):
  await _blocked_turn_is_taken_back(storage, "agent")


@pytest.mark.parametrize("storage", ["memory"], indirect=True)
async def test_a_later_plugin_that_answers_leaves_no_pack_in_state(storage):
  await _blocked_turn_is_taken_back(storage, "plugin")


@pytest.mark.parametrize("storage", ["memory", "sqlite"], indirect=True)
async def test_a_blocked_call_that_trimmed_leaves_the_cut_of_the_last_pack_sent(storage):
  """The unsent pack cut the tail (chunked trim); the session keeps the previous
  cut, and the next call, by the warm worker or a cold one, packs alike."""
  texts = list(TEXTS[:18])
  texts[16] = texts[16] + " (forbidden)"

  def with_guardrail():
    model = OfflineLlm(default=REPLY)
    return agent(model=model, before_model_callback=_guardrail)

  warm = ContextPackPlugin(window=WINDOW)
  ag, model = with_guardrail()
  runner = make_runner(ag, [warm], session_service=storage.open("cut"), artifact_service=storage.artifacts("cut"))
  await runner.session_service.create_session(app_name=APP, user_id=USER, session_id=SID, state={"plan": PLAN})
  for text in texts[:16]:
    await say(runner, SID, text)
  before = (await storage.open("cut").get_session(app_name=APP, user_id=USER, session_id=SID)).state
  await say(runner, SID, texts[16])
  assert len(model.received) == 16
  docs = await manifests(runner, SID)
  assert any("chunked trim" in e["reason"] for e in docs[16]["truncation_events"]), "the blocked pack must have trimmed"
  assert docs[16]["tail"]["start_id"] != before[TAIL_KEY] == docs[15]["tail"]["start_id"]
  after = (await storage.open("cut").get_session(app_name=APP, user_id=USER, session_id=SID)).state
  assert after[TAIL_KEY] == before[TAIL_KEY] and after[LAST_PACK_KEY] == before[LAST_PACK_KEY]

  # The next turn from the stored session: the warm worker and a cold one agree.
  snapshot = await storage.open("cut").get_session(app_name=APP, user_id=USER, session_id=SID)
  cold_ag, cold_model = with_guardrail()
  cold_svc = storage.open("cold")
  await cold_svc.create_session(app_name=APP, user_id=USER, session_id=SID, state=dict(snapshot.state))
  copy = await cold_svc.get_session(app_name=APP, user_id=USER, session_id=SID)
  for event in snapshot.events:
    await cold_svc.append_event(copy, event)
  cold = make_runner(cold_ag, [ContextPackPlugin(window=WINDOW)], session_service=cold_svc, artifact_service=storage.artifacts("cold"))
  await say(runner, SID, texts[17])
  await say(cold, SID, texts[17])
  assert _contents(cold_model.received[-1]) == _contents(model.received[-1])


@pytest.mark.parametrize("storage", ["memory", "sqlite"], indirect=True)
async def test_a_blocked_call_after_another_workers_trim_keeps_that_workers_cut(storage):
  """A cold worker B trims the tail at turn 13; back on worker A, the guardrail answers
  turn 14 and the plugin takes that pack back. The take-back once restored A's cache to
  A's own older cut (turn 10's) while the state went back to B's, so at turn 15 A
  re-trimmed from its old cut: every later turn must send what one worker sends."""
  texts = list(TEXTS[:18])
  texts[14] += " (forbidden)"
  single = await run_script(storage, "single", [0] * 18, texts=texts, guarded=True)
  shared = await run_script(storage, "shared", [0] * 13 + [1] + [0] * 4, texts=texts, guarded=True)
  assert single.requests[14] is None and shared.requests[14] is None
  assert shared.manifests[13]["tail"]["start"] > shared.manifests[12]["tail"]["start"], "B must move the cut"
  for t in (15, 16, 17):
    assert _contents(shared.requests[t]) == _contents(single.requests[t]), f"turn {t}: kept history"
  assert shared.state[TAIL_KEY] == single.state[TAIL_KEY]


@pytest.mark.parametrize("storage", ["memory"], indirect=True)
async def test_traffic_to_sessions_too_large_to_keep_warm_does_not_hide_anothers_cut(storage):
  """Worker A says turns 0-12, a cold worker B turn 13 (moving the cut), A turn 14. Before
  turn 14, A serves 260 other sessions too large to keep warm. A record of what A last
  wrote per lane, capped apart from the caches, once forgot the shared session; A took
  the missing record for "nobody else wrote since" and kept its own stale cut over B's."""
  from google.adk.events.event import Event

  async def turn_12(fillers: int):
    svc, artifacts = storage.open(f"busy-{fillers}"), storage.artifacts(f"busy-{fillers}")
    workers, plugins, cuts = [], [], []
    for _ in range(2):
      model = OfflineLlm(default=REPLY)
      # The shared session stays under the cap (~300 KB at turn 14); each filler is ~600 KB.
      plugin = ContextPackPlugin(window=WINDOW, session_cache_bytes=400_000)
      plugins.append(plugin)
      workers.append((make_runner(agent(model=model)[0], [plugin], session_service=svc, artifact_service=artifacts), model))
    try:
      for t, w in enumerate([0] * 13 + [1, 0]):
        runner, model = workers[w]
        if t == 14:
          for f in range(fillers):
            other = await svc.create_session(app_name=APP, user_id=USER, session_id=f"other-{f}")
            await svc.append_event(other, Event(author="user", invocation_id=f"old-{f}", content=types.Content(
                role="user", parts=[types.Part(text="filler " * 6000)])))
            await say(runner, other.id, "hi")
          assert any(SID in key for key in plugins[0]._sessions), "A's cache of the session must still be warm"
        _pin_clock(t)
        if t == 0:
          await svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"plan": PLAN})
        await say(runner, SID, TEXTS[t])
        cuts.append((await svc.get_session(app_name=APP, user_id=USER, session_id=SID)).state.get(TAIL_KEY))
      assert cuts[13] != cuts[12], "B must move the cut"
    finally:
      platform_time.reset_time_provider()
      platform_uuid.reset_id_provider()
    return workers[0][1].received[-1]

  quiet, busy = await turn_12(0), await turn_12(260)
  assert _contents(busy) == _contents(quiet)


@pytest.mark.parametrize("storage", ["memory", "sqlite"], indirect=True)
async def test_a_none_cut_another_worker_wrote_is_kept(storage):
  """Another worker's pack may leave no tail (its in-flight steps pushed the cut past the last
  turn) and write None. A warm worker took None for "no value" and kept its own older cut;
  a cold worker starts without a hint: both must send the same next request."""
  from google.adk.events.event import Event, EventActions

  async def turn_13(evict: bool) -> Any:
    tag = f"none-{evict}"
    svc, model = storage.open(tag), OfflineLlm(default=REPLY)
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(agent(model=model)[0], [plugin], session_service=svc, artifact_service=storage.artifacts(tag))
    try:
      for t in range(14):
        _pin_clock(t)
        if t == 0:
          await svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"plan": PLAN})
        if t == 13:
          session = await svc.get_session(app_name=APP, user_id=USER, session_id=SID)
          assert isinstance(session.state[TAIL_KEY], str), "the fixture must have cut the tail"
          await svc.append_event(session, Event(author="assistant", invocation_id="other-worker",
                                                actions=EventActions(state_delta={TAIL_KEY: None})))
          if evict:
            plugin._sessions.clear()
        await say(runner, SID, TEXTS[t])
    finally:
      platform_time.reset_time_provider()
      platform_uuid.reset_id_provider()
    return model.received[-1]

  warm, cold = await turn_13(False), await turn_13(True)
  assert _contents(warm) == _contents(cold)


@pytest.mark.parametrize("storage", ["memory"], indirect=True)
async def test_a_cut_whose_call_failed_is_not_kept_by_the_warm_worker_alone(storage):
  """The first trimming call's model call raised: its state write (on the response event) was
  lost, and with no key written before the first cut, the warm cache kept a cut no other worker
  could see. A cold worker then sent another tail than the warm one (diff review)."""
  calls = {"n": 0}

  def reply(req):
    calls["n"] += 1
    if calls["n"] == 11:  # turn 10, the first that trims
      raise RuntimeError("model outage")
    return REPLY

  model = OfflineLlm(default=reply)
  svc = storage.open("lost")
  warm = ContextPackPlugin(window=WINDOW)
  runner = make_runner(agent(model=model)[0], [warm], session_service=svc, artifact_service=storage.artifacts("lost"))
  await svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"plan": PLAN})
  for t in range(11):
    if t == 10:
      with pytest.raises(RuntimeError, match="model outage"):
        await say(runner, SID, TEXTS[t])
    else:
      await say(runner, SID, TEXTS[t])
  snapshot = await svc.get_session(app_name=APP, user_id=USER, session_id=SID)
  assert TAIL_KEY not in snapshot.state and any(c.tail_hint for c in warm._sessions.values()), \
      "the fixture must leave a cut in the warm cache that state does not have"
  cold_model = OfflineLlm(default=REPLY)
  cold_svc = storage.open("lost-cold")
  await cold_svc.create_session(app_name=APP, user_id=USER, session_id=SID, state=dict(snapshot.state))
  copy = await cold_svc.get_session(app_name=APP, user_id=USER, session_id=SID)
  for event in snapshot.events:
    await cold_svc.append_event(copy, event)
  cold = make_runner(agent(model=cold_model)[0], [ContextPackPlugin(window=WINDOW)], session_service=cold_svc,
                     artifact_service=storage.artifacts("lost-cold"))
  await say(runner, SID, TEXTS[11])
  await say(cold, SID, TEXTS[11])
  assert _contents(cold_model.received[-1]) == _contents(model.received[-1])
