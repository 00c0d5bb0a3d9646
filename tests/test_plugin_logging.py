"""The plugin's log-once memory: each unknown model is named, and the memory is bounded."""

from __future__ import annotations

import logging

import pytest
from google.adk.agents import LlmAgent

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.log_limit import MAX_KEYS, RateLimitedLog
from aether_frame.offline_model import OfflineLlm

from tests.adk_support import make_runner, new_session, say

@pytest.mark.asyncio
async def test_each_unknown_model_is_named_once(caplog):
  plugin = ContextPackPlugin()  # no window=: the registry must know the model
  runners = []
  for name in ("acme-model-1", "acme-model-2"):
    agent = LlmAgent(name="root", model=OfflineLlm(model=name, default="ok"), instruction="You answer.")
    runners.append(make_runner(agent, [plugin]))
  with caplog.at_level(logging.ERROR, logger="aether_frame.adk.plugin"):
    for runner in runners:
      session = await new_session(runner)
      for turn in range(3):
        await say(runner, session.id, f"question {turn}")
  records = [r for r in caplog.records if "no context window known" in r.getMessage()]
  named = [r.getMessage() for r in records]
  assert len(named) == 2  # not once for the first model only, not once per call
  assert all(r.exc_info is None for r in records)  # a configuration to fix: the message, no traceback
  assert "'acme-model-1'" in named[0] and "'acme-model-2'" in named[1]
  assert plugin.faults == 6  # every call recorded, each sent unmodified


def test_log_once_memory_is_bounded_and_keeps_recent_keys_quiet(caplog):
  plugin = ContextPackPlugin(window=8192)
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    for i in range(MAX_KEYS + 50):
      plugin._log_once(f"k{i}", logging.WARNING, "message %s", i)
      plugin._log_once("hot", logging.WARNING, "hot message")  # used every call: never evicted
  assert len(plugin._logged) == MAX_KEYS
  hot = [r for r in caplog.records if r.getMessage() == "hot message"]
  assert len(hot) == 1
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.plugin"):
    plugin._log_once(f"k{MAX_KEYS + 49}", logging.WARNING, "recent")  # remembered: quiet
    plugin._log_once("k0", logging.WARNING, "old")  # evicted long ago: logs again, once
    plugin._log_once("k0", logging.WARNING, "old")
  assert [r.getMessage() for r in caplog.records] == ["old"]


def test_a_condition_that_keeps_recurring_is_reported_again_with_a_count(caplog):
  """Logged once per process, a fault that recurred all week (or came back in a
  second outage) reached the log at start-up and never again."""
  clock = [1000.0]
  log = RateLimitedLog(logging.getLogger("aether_frame.test"), interval=600, clock=lambda: clock[0])
  with caplog.at_level(logging.WARNING, logger="aether_frame.test"):
    for minute in range(25):  # once a minute for 25 minutes
      log.log("fault:x", logging.ERROR, "fault in %s", "before_model")
      clock[0] += 60
  lines = [r.getMessage() for r in caplog.records]
  assert lines[0] == "fault in before_model"
  assert lines[1:] == ["fault in before_model (9 more like this since the last report, 600 s or more ago)"] * 2
  caplog.clear()
  log.forget("fault:")  # the condition ended: the next one is news at once
  with caplog.at_level(logging.WARNING, logger="aether_frame.test"):
    log.log("fault:x", logging.ERROR, "fault in %s", "before_model")
  assert [r.getMessage() for r in caplog.records] == ["fault in before_model"]
