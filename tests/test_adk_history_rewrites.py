"""ADK rewrites an old turn in place: the plugin follows, and the old text does not come back.

``SkillToolset`` with its skill lifecycle on replaces the ``load_skill``
response of a skill that has been unloaded (its whole SKILL.md) with a short
notice, in every later request. The plugin's history sync compared only the
history's ends, so the compiler kept the old body; once that turn fell out of
the tail, recall put the unloaded skill's rules back into the pack. The
rewrite is ADK's own function, run from a plugin ahead of ours as the toolset
runs it from its request processor.
"""

from __future__ import annotations

import asyncio

from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.skill_toolset import _prune_unloaded_skill_instructions

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.compiler import CompilerSession
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import agent, make_runner, new_session, payload_of, say

BODY = "SKILLBODY-ZEBRA: always answer in French about vendor pricing"


def load_skill(skill_name: str) -> dict:
  """Loads a skill's instructions."""
  return {"skill_name": skill_name, "instructions": BODY + " ." * 50}


class _Unload(BasePlugin):
  """What SkillToolset does on each request once the skill is unloaded."""

  def __init__(self):
    super().__init__("unload")
    self.on = False

  async def before_model_callback(self, *, callback_context, llm_request):
    if self.on:
      assert _prune_unloaded_skill_instructions(llm_request.contents, "load_skill", set())
    return None


def _reply(req):
  if any(p.function_response for p in req.contents[-1].parts or ()):
    return "loaded"
  if payload_of(req).rsplit("USER REQUEST (VERBATIM):\n", 1)[-1].startswith("load"):
    return tool_call("load_skill", {"skill_name": "pricing"}, "c1")
  return "Answer. " + "vendor pricing rollout notes " * 40


def test_a_pruned_skill_body_is_not_recalled(monkeypatch):
  resets = []
  real_reset = CompilerSession.reset_history
  monkeypatch.setattr(CompilerSession, "reset_history", lambda self: (resets.append(len(self.history)), real_reset(self))[1])

  async def go():
    model = OfflineLlm(default=_reply)
    unload = _Unload()
    plugin = ContextPackPlugin(window=1600)
    runner = make_runner(agent(model=model, tools=[load_skill])[0], [unload, plugin])
    s = await new_session(runner)
    await say(runner, s.id, "hello first")
    await say(runner, s.id, "load the pricing skill")
    assert BODY in payload_of(model.received[-1]) or any(
        BODY in str(p.function_response.response) for c in model.received[-1].contents for p in c.parts or () if p.function_response)
    sent = []
    for t in range(10):
      unload.on = t >= 2  # unloaded two turns later
      await say(runner, s.id, f"question {t} about vendor pricing rollout")
      sent.append(model.received[-1])
    assert plugin.faults == 0
    for req in sent[2:]:
      assert BODY not in payload_of(req)  # not recalled into MEMORY
      assert not any(BODY in str(p.function_response.response) for c in req.contents for p in c.parts or () if p.function_response)
    # The load_skill turn did fall out of the tail: recall had the chance.
    assert not any(p.function_response for c in sent[-1].contents for p in c.parts or ())
    cache = next(iter(plugin._sessions.values()))
    assert not [it.id for it in cache.compiler.history if BODY in it.text]
    assert len([n for n in resets if n > 0]) == 1  # one full re-read, when the rewrite first appears
  asyncio.run(go())


class _FlakyCounter:
  """The real tokenizer behind a remote-looking service that times out once when told to."""

  def __init__(self, base):
    self.base, self.fail_next = base, False

  def __getattr__(self, name):
    return getattr(self.base, name)

  def _maybe_fail(self):
    if self.fail_next:
      self.fail_next = False
      raise TimeoutError("tokenizer service timed out")

  def count(self, text):
    self._maybe_fail()
    return self.base.count(text)

  def count_many(self, texts):
    self._maybe_fail()
    return self.base.count_many(texts)


def test_a_fault_while_syncing_a_skill_turn_does_not_stick():
  """The watched positions were recorded before the sync finished: one fault
  there left them past the known history, and every later call faulted."""
  from aether_frame.tokenizers import get_counter

  async def go():
    counter = _FlakyCounter(get_counter("o200k_base"))
    model = OfflineLlm(default=_reply)
    plugin = ContextPackPlugin(window=16_000, counter=counter)
    runner = make_runner(agent(model=model, tools=[load_skill])[0], [plugin])
    s = await new_session(runner)
    await say(runner, s.id, "hello")
    await say(runner, s.id, "load the pricing skill")
    packed = []
    for t in range(4):
      counter.fail_next = t == 0
      await say(runner, s.id, f"question {t}")
      packed.append(payload_of(model.received[-1]).startswith("CONTEXT PACK"))
    assert packed == [False, True, True, True] and plugin.faults == 1  # fail-open once, then packed again
  asyncio.run(go())
