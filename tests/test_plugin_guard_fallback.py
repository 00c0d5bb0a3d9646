"""The validity guard's fallback is checked too.

When the rewritten request fails the guard, the plugin sends the smallest
safe pack. That pack went out unchecked: a user message of many text parts
(costed joined, sent part by part) made it 3,275 tokens + a 300 reserve against
a 3,000 window, with no fault and ``totals.tokens`` saying 830. Now the ladder
sends it (nothing smaller exists) and records the overflow as a fault;
``fail_loud`` refuses it.
"""

from __future__ import annotations

import asyncio

import pytest
from google.genai import types

from aether_frame.adk.plugin import ContextPackOverflow, ContextPackPlugin
from aether_frame.adk.state_schema import LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import USER, agent, make_runner, manifests, new_session, say

WINDOW = 3_000
PARTS = [types.Part(text="\n\n") for _ in range(3_000)]  # one token each, sent apart; newline runs are cheap joined


def test_a_minimal_pack_over_the_window_is_sent_and_recorded_as_a_fault():
  async def go():
    ag, model = agent(model=OfflineLlm(default="ok"))
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(ag, [plugin])
    s = await new_session(runner)
    await say(runner, s.id, "Summarise the following:", PARTS)
    sent = model.received[0]
    assert sent.contents[-1].parts[0].text.startswith("CONTEXT PACK v1")  # the minimal pack, not the original
    doc = (await manifests(runner, s.id))[0]
    guard = doc["runtime"]["guard"]
    assert guard["fallback"] is True and guard["fallback_fits"] is False
    assert guard["fallback_tokens"] > doc["usable"]
    assert plugin.faults == 1
    state = (await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=s.id)).state
    assert state[LAST_FAULT_KEY]["error"] == "ContextBudgetExhausted"
    assert "minimal safe pack is over the usable window" in state[LAST_FAULT_KEY]["message"]
    assert state[LAST_PACK_KEY]["tokens"] == guard["fallback_tokens"]
  asyncio.run(go())


def test_fail_loud_refuses_a_minimal_pack_over_the_window():
  async def go():
    ag, model = agent(model=OfflineLlm(default="ok"))
    runner = make_runner(ag, [ContextPackPlugin(window=WINDOW, policy=PackPolicy(overflow="fail_loud"))])
    s = await new_session(runner)
    with pytest.raises(RuntimeError) as raised:
      await say(runner, s.id, "Summarise the following:", PARTS)
    assert isinstance(raised.value.__cause__, ContextPackOverflow)
    assert "minimal safe pack is over the usable window" in str(raised.value.__cause__)
    assert model.received == []
  asyncio.run(go())


def test_a_fallback_that_fits_is_no_fault():
  """The guard's usual fallback (history kept, then the parts push it over; the minimal pack fits):
  no fault, ``fallback_fits`` true."""
  async def go():
    ag, model = agent(model=OfflineLlm(default="ok"))
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(ag, [plugin])
    s = await new_session(runner)
    for i in range(4):
      await say(runner, s.id, f"Note {i}: " + " ".join(f"the shipment {i}-{j} left the depot on time." for j in range(25)))
    await say(runner, s.id, "Summarise the following:", PARTS[:1_200])
    doc = (await manifests(runner, s.id))[-1]
    guard = doc["runtime"]["guard"]
    assert guard["fallback"] is True, "the pack fit: this test checks nothing"
    assert guard["fallback_fits"] is True and guard["fallback_tokens"] <= doc["usable"]
    assert plugin.faults == 0
    assert len(model.received[-1].contents) < len(model.received[-2].contents)  # history went, as the minimal pack does
  asyncio.run(go())
