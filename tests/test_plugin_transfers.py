"""Transfers back and forth between a router and its helper, through a real Runner.

ADK numbers each run of an agent in its node path: a transfer back runs the
router as ``router@2`` on the same conversation as ``router@1``. Keyed by that
path, the plugin kept two compilers for one conversation; their tail cuts took
turns (it moved backwards) and the cached prefix broke on every router call.
"""

from __future__ import annotations

import asyncio
import itertools

from google.adk.agents import LlmAgent

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import make_runner, manifests, new_session, say

HEADER = "CONTEXT PACK v1"
REQUEST = "USER REQUEST (VERBATIM):\n"


def _asked(req) -> str:
  last = req.contents[-1].parts[0].text or "" if req.contents[-1].parts else ""
  return last.rsplit(REQUEST, 1)[1] if last.startswith(HEADER) else ""


def test_a_transfer_back_keeps_one_compiler_and_a_tail_that_never_moves_back():
  ids = itertools.count()

  def router_reply(req):
    if _asked(req).startswith("ask helper"):
      return tool_call("transfer_to_agent", {"agent_name": "helper"}, f"t{next(ids)}")
    return "Router answer. " + "The harbour plan needs berths, cranes and dredging. " * 6

  def helper_reply(req):
    if _asked(req).startswith("back"):
      return tool_call("transfer_to_agent", {"agent_name": "router"}, f"b{next(ids)}")
    return "Helper answer. " + "Tides and depth matter for the harbour. " * 6

  async def go():
    router_model, helper_model = OfflineLlm(default=router_reply), OfflineLlm(default=helper_reply)
    helper = LlmAgent(name="helper", model=helper_model, instruction="You help.")
    router = LlmAgent(name="router", model=router_model, instruction="You route.", sub_agents=[helper])
    plugin = ContextPackPlugin(window=4096)
    runner = make_runner(router, [plugin])
    s = await new_session(runner)
    for i in range(6):
      for text in (f"router question {i}", f"ask helper {i}", f"helper question {i}", f"back to router {i}"):
        await say(runner, s.id, text)
    assert plugin.faults == 0
    assert [k[3] for k in plugin._sessions].count("router") == 1
    docs = [d for d in await manifests(runner, s.id) if d["agent"] == "router"]
    starts = [d["tail"]["start"] for d in docs]
    assert max(starts) > 0, "the window never overflowed: nothing was tested"
    assert starts == sorted(starts), starts  # the cut never moves back
    assert len(set(starts)) <= 4, starts  # and moves in chunks
  asyncio.run(go())
