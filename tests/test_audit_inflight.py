"""``inspect``, ``diff``, ``report`` and the request rendering on today's manifest shapes.

Trimmed in-flight steps of a long tool loop, a system instruction with an image,
and an AgentTool child's calls in its caller's session. The rendering is checked
against what the model really received (``render_live``: its own code, from the
live ``LlmRequest``).
"""

from __future__ import annotations

import asyncio
import itertools

from google.adk.agents import LlmAgent
from google.adk.artifacts import FileArtifactService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.genai import types

from aether_frame.audit.cli import layer_table
from aether_frame.audit.diff import context_diff
from aether_frame.audit.replay import new_rebuilds, rebuild
from aether_frame.audit.report import collect
from aether_frame.audit.source import open_location
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.request_text import request_text
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import make_runner, new_session, png_bytes, say
from tests.test_audit_diff import render_live
from tests.test_plugin_inflight_trim import _reader

WINDOW = 6000


async def _rebuilt(root) -> list:
  src = open_location(str(root))
  (ref,) = await src.sessions()
  rebuilds = new_rebuilds()
  return [await rebuild(src, c, rebuilds=rebuilds) for c in await src.calls(ref)]


def _tool_loop(root, pages: int = 24):
  async def go():
    agent, model = _reader(pages)
    runner = make_runner(agent, [ContextPackPlugin(window=WINDOW)], artifact_service=FileArtifactService(str(root)))
    s = await new_session(runner)
    await say(runner, s.id, "Read the whole report.")
    return model
  return asyncio.run(go())


def test_trimmed_steps_are_counted_rendered_as_sent_and_not_reported_as_changed(tmp_path):
  model = _tool_loop(tmp_path / "store")
  calls = asyncio.run(_rebuilt(tmp_path / "store"))
  assert len(calls) == len(model.received) == 25
  last = calls[-1].call.doc
  steps_dropped = [r for r in last["items"] if r["layer"] == "conversation" and r["status"] == "dropped"]
  assert steps_dropped, "no in-flight step was trimmed: nothing was tested"
  # inspect: the conversation's dropped column counts the trimmed steps and their tokens.
  conv = next(row for row in layer_table(last) if row[0] == "conversation")
  history_cut = last["tail"]["history_len"] - last["tail"]["kept"]
  assert conv[4] == history_cut + len(steps_dropped)
  assert conv[5] >= sum(r["tokens"] for r in steps_dropped)
  # The rendering (the cache-break analysis) is the request as sent: trimmed steps left out.
  # (A call and its result form one group, one segment: compared by the pages they carry.)
  for rb, req in zip(calls, model.received):
    sent_pages = {p.function_response.response["page"] for c in req.contents for p in c.parts if p.function_response}
    text = request_text(rb.inputs, rb.pack)
    rendered_pages = {n for n in range(25) if f'"text":"Page {n}: ' in text}
    assert rendered_pages == sent_pages
  # A step that only stopped being the latest (so no longer pinned) is not a change.
  for a, b in zip(calls, calls[1:]):
    conversation = next(ld for ld in context_diff(a, b).layers if ld.layer == "conversation")
    assert not conversation.modified, conversation.modified


def test_a_system_image_is_in_the_rendering_and_the_prefix_hash(tmp_path):
  pixels = {"size": 64}

  class AttachDiagram(BasePlugin):
    def __init__(self):
      super().__init__("attach")

    async def before_model_callback(self, *, callback_context, llm_request):
      image = types.Part.from_bytes(data=png_bytes(pixels["size"], 64), mime_type="image/png")
      text = llm_request.config.system_instruction
      llm_request.config.system_instruction = types.Content(role="user", parts=[types.Part(text=text), image])
      return None

  async def go():
    model = OfflineLlm(default="It shows a harbour.")
    agent = LlmAgent(name="a", model=model, instruction="Explain the diagram.")
    runner = make_runner(agent, [AttachDiagram(), ContextPackPlugin(window=WINDOW)],
                         artifact_service=FileArtifactService(str(tmp_path / "store")))
    s = await new_session(runner)
    await say(runner, s.id, "What does it show?")
    pixels["size"] = 65  # another diagram, the same cost
    await say(runner, s.id, "And now?")
    return model

  model = asyncio.run(go())
  a, b = asyncio.run(_rebuilt(tmp_path / "store"))
  for rb, req in zip((a, b), model.received):
    assert request_text(rb.inputs, rb.pack) == render_live(req)
    assert rb.pack.manifest["prefix_sha256"] == rb.call.doc["prefix_sha256"]
  assert a.call.doc["prefix_sha256"] != b.call.doc["prefix_sha256"]
  assert context_diff(a, b).cache.segment == "system"


def test_the_report_compares_each_call_with_its_own_agents_previous_call(tmp_path):
  child = LlmAgent(name="researcher", model=OfflineLlm(default="The capital is Paris."), instruction="You look up facts.",
                   description="Looks up facts")
  ids = itertools.count()

  def root_reply(req):
    if any(p.function_response for p in req.contents[-1].parts or ()):
      return "Answer: Paris."
    return tool_call("researcher", {"request": "capital?"}, f"c{next(ids)}")

  async def go():
    root = LlmAgent(name="root", model=OfflineLlm(default=root_reply), instruction="You answer.", tools=[AgentTool(child)])
    runner = make_runner(root, [ContextPackPlugin(window=WINDOW)], artifact_service=FileArtifactService(str(tmp_path / "store")))
    s = await new_session(runner)
    for text in ("capital of France?", "and of Spain?"):
      await say(runner, s.id, text)
    src = open_location(str(tmp_path / "store"))
    (ref,) = await src.sessions()
    return await collect(src, ref)

  rows = asyncio.run(go())
  agents = [r.body["agent"] for r in rows]
  assert agents == ["root", "researcher", "root", "root", "researcher", "root"]
  assert [r.first for r in rows] == [True, True, False, False, False, False]
  for row in rows[2:]:  # against the same agent's call: the system instruction and tools are shared
    assert row.cache is not None and row.cache.segment not in ("system",) and not row.cache.segment.startswith("tool")
