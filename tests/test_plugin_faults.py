"""What the plugin does when a pack cannot be built: fail loud on request, else fail open, quietly.

Real ADK Runner, ``OfflineLlm`` recording exactly what was sent.
"""

from __future__ import annotations

import logging

from aether_frame import ContextBudgetExhausted
from aether_frame.adk import manifest_store
from aether_frame.adk import plugin as plugin_module
from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackOverflow, ContextPackPlugin, context_pack_callbacks
from aether_frame.adk.state_schema import LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm

from tests.adk_support import APP, USER, agent, make_runner, new_session, payload_of, say

LONG = "lorem ipsum dolor sit amet " * 60
PLUGIN_LOGGER = "aether_frame.adk.plugin"


async def _state(runner, sid):
  return (await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=sid)).state


async def _until_it_raises(runner, sid, turns: int = 8):
  """Says long turns until the run fails; returns (turns that ran, the error)."""
  for i in range(turns):
    try:
      await say(runner, sid, f"Turn {i}: {LONG}")
    except Exception as e:  # noqa: BLE001 - the test inspects it
      return i, e
  return turns, None


# ----------------------------------------------------------------- fail_loud
async def test_fail_loud_raises_a_typed_error_into_the_run_and_sends_nothing_over_budget():
  model = OfflineLlm(model="offline-x", default="ok")
  ag, _ = agent(model=model, instruction="You are helpful. " * 20)
  plugin = ContextPackPlugin(window=1500, policy=PackPolicy(overflow="fail_loud"))
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  ran, error = await _until_it_raises(runner, s.id)

  assert 0 < ran < 8 and error is not None
  # ADK re-raises a plugin's exception as a RuntimeError chained to it.
  assert isinstance(error, RuntimeError)
  cause = error.__cause__
  assert isinstance(cause, ContextPackOverflow) and isinstance(cause, ContextBudgetExhausted)
  assert cause.agent == "assistant" and cause.model == "offline-x" and cause.window == 1500
  assert cause.needs["conversation"] > 0
  for text in ("fail_loud", "'assistant'", "conversation=", "window=1500"):
    assert text in str(error)
  # Only the calls that fit were sent, each as a pack inside its budget; the
  # failing call was not sent at all (neither cut nor unmodified).
  assert len(model.received) == ran
  for req in model.received:
    assert payload_of(req).startswith("CONTEXT PACK v1")
    assert count_request(req.contents, req.config, plugin.counter) <= cause.usable
  state = await _state(runner, s.id)
  assert plugin.faults == 0 and LAST_FAULT_KEY not in state

  # fail_loud is only about the budget: any other fault still fails open.
  def boom():
    raise RuntimeError("injected")

  ag2, model2 = agent(model=OfflineLlm(default="ok"))
  plugin2 = ContextPackPlugin(window=8192, policy=PackPolicy(overflow="fail_loud"), _fault_injector=boom)
  runner2 = make_runner(ag2, [plugin2])
  s2 = await new_session(runner2)
  await say(runner2, s2.id, "hello")
  assert payload_of(model2.received[-1]) == "hello" and plugin2.faults == 1

  # The same exhaustion under the default (ladder) policy is a fault: the
  # request goes out unmodified and the fault is recorded.
  ag3, model3 = agent(model=OfflineLlm(model="offline-x", default="ok"), instruction="You are helpful. " * 20)
  plugin3 = ContextPackPlugin(window=200)
  runner3 = make_runner(ag3, [plugin3])
  s3 = await new_session(runner3)
  events = await say(runner3, s3.id, "hi")
  assert events[-1].content.parts[0].text == "ok" and payload_of(model3.received[-1]) == "hi"
  assert (await _state(runner3, s3.id))[LAST_FAULT_KEY]["error"] == "ContextBudgetExhausted"
  assert plugin3.faults == 1


async def test_fail_loud_through_agent_callbacks_raises_the_same_error():
  before, after = context_pack_callbacks(window=1500, policy=PackPolicy(overflow="fail_loud"))
  model = OfflineLlm(model="offline-x", default="ok")
  ag, _ = agent(model=model, instruction="You are helpful. " * 20, before_model_callback=before, after_model_callback=after)
  runner = make_runner(ag, [])
  s = await new_session(runner)
  ran, error = await _until_it_raises(runner, s.id)
  assert 0 < ran < 8
  chain = [error, error.__cause__]
  assert any(isinstance(e, ContextPackOverflow) for e in chain)
  assert len(model.received) == ran and before.plugin.faults == 0


# ------------------------------------------------------------------- logging
def _fault_logs(caplog):
  return [r for r in caplog.records if r.name == PLUGIN_LOGGER and r.levelno == logging.ERROR]


async def test_a_repeated_fault_logs_once_per_plugin_but_is_recorded_every_call(caplog):
  n = {"calls": 0}

  def boom():
    n["calls"] += 1
    raise ValueError(f"request is {1000 + n['calls']} tokens")  # a message that changes every call

  caplog.set_level(logging.INFO, logger=PLUGIN_LOGGER)
  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  for i in range(3):
    await say(runner, s.id, f"turn {i}")
  assert len(_fault_logs(caplog)) == 1
  assert _fault_logs(caplog)[0].exc_info is not None
  state = await _state(runner, s.id)
  assert plugin.faults == 3
  fault = state[LAST_FAULT_KEY]
  assert (fault["error"], fault["message"], fault["count"], fault["outcome"]) == (
      "ValueError", "request is 1003 tokens", 3, "request sent unmodified")
  assert [payload_of(r) for r in model.received] == ["turn 0", "turn 1", "turn 2"]

  # Another plugin instance logs its own first fault.
  ag2, _ = agent(model=OfflineLlm(default="ok"))
  runner2 = make_runner(ag2, [ContextPackPlugin(window=8192, _fault_injector=boom)])
  s2 = await new_session(runner2)
  await say(runner2, s2.id, "again")
  await say(runner2, s2.id, "and again")
  assert len(_fault_logs(caplog)) == 2


async def test_a_different_fault_is_logged_again(caplog):
  errors = iter([ValueError("a 1"), ValueError("a 2"), KeyError("b")])

  def boom():
    raise next(errors)

  caplog.set_level(logging.INFO, logger=PLUGIN_LOGGER)
  ag, _ = agent(model=OfflineLlm(default="ok"))
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  for i in range(3):
    await say(runner, s.id, f"turn {i}")
  assert [r.exc_info[0] for r in _fault_logs(caplog)] == [ValueError, KeyError]
  assert plugin.faults == 3 and LAST_PACK_KEY not in await _state(runner, s.id)


def test_loggers_are_named_after_their_modules():
  assert plugin_module.logger.name == "aether_frame.adk.plugin"
  assert manifest_store.logger.name == "aether_frame.adk.manifest_store"


async def test_a_failed_manifest_write_is_reported_as_such_and_the_pointer_kept(caplog, tmp_path):
  # The request is rewritten before the manifest is written: a store that fails
  # (spool off) loses the manifest, not the pack, and must not be logged as
  # "request sent unmodified".
  from google.adk.artifacts import FileArtifactService
  from aether_frame.adk.manifest_store import ManifestWriter

  class Down(FileArtifactService):
    async def save_artifact(self, **kw):
      raise ConnectionError("store down")

  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=16_000, manifest_writer=ManifestWriter(spool_dir=False))
  runner = make_runner(ag, [plugin], artifact_service=Down(root_dir=str(tmp_path)))
  session = await new_session(runner)
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.plugin"):
    await say(runner, session.id, "hello")
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK v1")  # the pack went out
  state = await _state(runner, session.id)
  assert state[LAST_PACK_KEY]["version"] is None and state[LAST_PACK_KEY]["pack_id"].startswith("pack_")
  assert state[LAST_FAULT_KEY]["error"] == "ConnectionError" and plugin.faults == 1
  logged = [r.getMessage() for r in caplog.records]
  assert len(logged) == 1 and "the pack was sent, its manifest was not stored" in logged[0]
  assert "request sent unmodified" not in logged[0]


async def test_a_fault_after_the_rewrite_sends_the_request_as_it_came(monkeypatch):
  """The fault record says "request sent unmodified": a fault in the bookkeeping after the
  request was rewritten (here: the context-cache step) must make that true."""
  from tests.adk_support import Recorder

  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  recorder = Recorder()
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(ag, [recorder, plugin])
  session = await new_session(runner)
  await say(runner, session.id, "first turn")
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK")

  def broken(llm_request, payload_at):
    raise RuntimeError("bookkeeping failed after the rewrite")

  monkeypatch.setattr(plugin_module, "_hold_cache_creation", broken)
  await say(runner, session.id, "second turn")
  sent, original = model.received[-1], recorder.requests[-1]
  assert plugin.faults == 1
  assert [c.model_dump() for c in sent.contents] == [c.model_dump() for c in original.contents]
  assert sent.config.system_instruction == original.config.system_instruction
  fault = (await _state(runner, session.id))[LAST_FAULT_KEY]
  assert fault["message"] == "bookkeeping failed after the rewrite" and fault["outcome"] == "request sent unmodified", fault
  monkeypatch.undo()
  await say(runner, session.id, "third turn")
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK") and plugin.faults == 1


def _span_exporter():
  """An in-memory exporter on the process's SDK tracer provider (set here when none is)."""
  from opentelemetry import trace
  from opentelemetry.sdk.trace import TracerProvider
  from opentelemetry.sdk.trace.export import SimpleSpanProcessor
  from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

  provider = trace.get_tracer_provider()
  if not isinstance(provider, TracerProvider):
    trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
  exporter = InMemorySpanExporter()
  provider.add_span_processor(SimpleSpanProcessor(exporter))
  return exporter


async def test_a_fault_before_the_compile_shows_on_the_span_and_the_record_says_whose_it_is(caplog):
  """The span wrapped the compile alone: a fault reading the request, in the rewrite or
  the manifest write left no span, or one with no error. The log line and the state
  record named no agent, session or invocation, and could not be ordered with last_pack."""
  from opentelemetry.trace import StatusCode

  exporter = _span_exporter()
  calls = {"n": 0}

  def boom_on_second():
    calls["n"] += 1
    if calls["n"] == 2:
      raise RuntimeError("injected before the compile")

  caplog.set_level(logging.INFO, logger=PLUGIN_LOGGER)
  ag, model = agent(model=OfflineLlm(default="ok"))
  plugin = ContextPackPlugin(window=8192, _fault_injector=boom_on_second)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  first = await say(runner, s.id, "turn 0")
  second = await say(runner, s.id, "turn 1")
  spans = [sp for sp in exporter.get_finished_spans() if sp.name == "aether_frame.compile"]
  assert len(spans) == 2
  ok, bad = spans
  assert ok.status.status_code is not StatusCode.ERROR and ok.attributes["aether_frame.task.used"] > 0
  assert ok.attributes["aether_frame.pack_id"].startswith("pack_") and ok.attributes["aether_frame.agent"] == ag.name
  assert bad.status.status_code is StatusCode.ERROR
  assert bad.attributes["aether_frame.fault"] == "RuntimeError"
  assert bad.attributes["aether_frame.outcome"] == "request sent unmodified"
  assert [e.name for e in bad.events] == ["exception"]
  logged = _fault_logs(caplog)[0].getMessage()
  assert f"agent {ag.name}" in logged and s.id in logged and second[0].invocation_id in logged
  state = await _state(runner, s.id)
  assert state[LAST_PACK_KEY]["invocation_id"] == first[0].invocation_id
  assert state[LAST_FAULT_KEY]["invocation_id"] == second[0].invocation_id and state[LAST_FAULT_KEY]["count"] == 1
  # The count is this session's: another session's faults are not in it.
  s2 = await new_session(runner)
  calls["n"] = 1
  await say(runner, s2.id, "other")
  assert (await _state(runner, s2.id))[LAST_FAULT_KEY]["count"] == 1 and plugin.faults == 2


async def test_a_fault_after_the_pack_was_sent_marks_the_span_too():
  """A manifest the store refused is recorded and logged as a fault ('the pack was sent, its
  manifest was not stored'), but the span said nothing of it (diff review)."""
  from opentelemetry.trace import StatusCode

  from aether_frame.adk.manifest_store import ManifestWriter

  exporter = _span_exporter()
  ag, model = agent(model=OfflineLlm(default="ok"))
  # The app's name is the blob scope: every manifest write is refused, after the pack went out.
  plugin = ContextPackPlugin(window=8192, manifest_writer=ManifestWriter(blob_app=APP, spool_dir=False))
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  await say(runner, s.id, "hello")
  assert payload_of(model.received[-1]).startswith("CONTEXT PACK v1") and plugin.faults == 1
  (span,) = [sp for sp in exporter.get_finished_spans() if sp.name == "aether_frame.compile"
             and sp.attributes.get("aether_frame.agent") == ag.name and "aether_frame.fault" in sp.attributes]
  assert span.status.status_code is StatusCode.ERROR
  assert span.attributes["aether_frame.outcome"] == "the pack was sent, its manifest was not stored"
  assert span.attributes["aether_frame.pack_id"].startswith("pack_")
