"""A ``mode="task"`` agent's conversation with the user, through a real Runner.

ADK starts a task agent's contents with the delegating call's arguments as a
user message (never a session event), and ``ctx.user_content`` is that message.
The plugin anchored the pack on it for good: every later user reply and answer
became an in-flight step, pinned and never trimmed, until the fixed tiers
overflowed the window and each call went out unpacked, over the window.
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import fits, make_runner, manifests, new_session, payload_of, say

WINDOW = 2500
SPEC = "TASK-SPEC: compare vendors A and B on price"


def test_a_task_conversation_is_trimmed_with_its_task_kept_first():
  async def go():
    coord_model = OfflineLlm(script=[tool_call("tasker", {"request": SPEC}, "deleg-1")], default="coordinated")
    task_model = OfflineLlm(default="A question back to the user? " + "Clarifying detail. " * 60)
    tasker = LlmAgent(name="tasker", model=task_model, instruction="Do the task.", mode="task", description="does tasks")
    coord = LlmAgent(name="coord", model=coord_model, instruction="Coordinate.", sub_agents=[tasker])
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(coord, [plugin])
    s = await new_session(runner)
    replies = [f"Reply {t}: more detail " + "blah " * 20 for t in range(10)]
    for text in replies:
      await say(runner, s.id, text)
    assert plugin.faults == 0
    assert len(task_model.received) == 10
    docs = [d for d in await manifests(runner, s.id) if d["agent"] == "tasker"]
    assert len(docs) == 10  # every call packed
    for n, (req, doc) in enumerate(zip(task_model.received, docs)):
      fits(req, WINDOW, doc["reserve"])
      request = payload_of(req).rsplit("USER REQUEST (VERBATIM):\n", 1)[1]
      if n == 0:
        assert SPEC in request  # the task is the first turn's request
        continue
      assert request == replies[n]  # then the user's latest reply is
      first = req.contents[0].parts[0].text
      assert SPEC in first and not first.startswith("CONTEXT PACK")  # the task stays first, as ADK wrote it
      assert doc["tail"]["inflight_ids"][0] == "task_input:0"  # pinned and charged
    assert docs[-1]["tail"]["start"] > 0  # older turns were trimmed, in chunks
    assert len({d["tail"]["start_id"] for d in docs[1:]}) < len(docs) - 1
  asyncio.run(go())
