"""A plugin ahead of ours edits a middle turn of every request (a PII filter).

The history sync compared only the first and last known turns, so a warm
plugin kept the unredacted turn and recall put it back into the pack, while a
cold one (another worker, a restart) sent the redacted text: two packs for one
request, and a secret the filter removed.
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import make_runner, new_session, say

SECRET = "hunter2"


class Redactor(BasePlugin):
  def __init__(self):
    super().__init__("redactor")
    self.on = False

  async def before_model_callback(self, *, callback_context, llm_request):
    if self.on:
      for c in llm_request.contents:
        for p in c.parts or ():
          if p.text and SECRET in p.text:
            p.text = p.text.replace(SECRET, "[REDACTED]")
    return None


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
TURNS = ["hello there, let's plan the migration", f"the vault password is {SECRET}, keep it for the deploy step"] + [
    f"step {i}: review the {WORDS[i]} service rollout plan " + "details " * 30 for i in range(2, 9)]


def _reply(req):
  tag = "".join(p.text or "" for p in req.contents[-1].parts or ()).rsplit("VERBATIM):\n", 1)[-1][:10]
  return f"Noted {tag}. " + " ".join(WORDS[(len(tag) * i + i * i) % 16] for i in range(120))


def test_a_turn_edited_mid_session_is_not_recalled_stale_and_warm_equals_cold():
  async def go(cold: bool):
    model = OfflineLlm(default=_reply)
    agent = LlmAgent(name="a", model=model, instruction="Be brief.")
    redactor = Redactor()
    runner = make_runner(agent, [redactor, ContextPackPlugin(window=2000)])
    s = await new_session(runner)
    for text in TURNS:
      await say(runner, s.id, text)
    redactor.on = True
    if cold:  # another worker serves the next turn
      runner = make_runner(agent, [redactor, ContextPackPlugin(window=2000)], session_service=runner.session_service,
                           artifact_service=runner.artifact_service)
    await say(runner, s.id, "which vault password did I give you for the deploy step?")
    req = model.received[-1]
    return ["".join(p.text or "" for p in c.parts or ()) for c in req.contents]

  warm, cold = asyncio.run(go(False)), asyncio.run(go(True))
  assert not any(SECRET in t for t in warm), "the warm plugin recalled the unredacted turn"
  assert any("[REDACTED]" in t for t in warm)  # the recalled turn, as the filter left it
  # Same pack either way, apart from ADK's random session and event ids.
  strip = lambda texts: [t.split("<<<DATA", 1)[0] for t in texts]  # noqa: E731
  assert len(warm) == len(cold) and strip(warm[:-1]) == strip(cold[:-1])
