"""ADK's ``PreloadMemoryTool`` next to the plugin, through a real Runner.

The tool inserts every memory hit for the user turn as one transient user
content before it. The plugin took that block for a conversation turn: the
memories went out twice (the block and the pack's MEMORY section), unbudgeted
and unfenced, and since the block is gone from the next call's history, every
call re-synced (and re-costed) the whole session. Now the MEMORY layer
replaces a block that holds exactly its hits, and any other block is charged
as pinned input context.
"""

from __future__ import annotations

import asyncio

from google.adk.memory import InMemoryMemoryService
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool
from google.adk.tools.preload_memory_tool import PreloadMemoryTool

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import USER, Recorder, agent, fits, make_runner, manifests, payload_of, say

BLOCK_HEAD = "The following content is from your previous conversations with the user."
FACTS = ["the budget for the offsite is 4000 euros", "the offsite budget excludes travel to Lisbon"]


class _GrowingMemory(InMemoryMemoryService):
  """A real in-memory service that another worker writes to between two searches."""

  def __init__(self, late_fact: str):
    super().__init__()
    self.searches = 0
    self.late_fact = late_fact
    self.late_session = None

  async def search_memory(self, **kw):
    self.searches += 1
    if self.searches == 2 and self.late_session is not None:  # after PreloadMemoryTool's search, before ours
      await self.add_session_to_memory(self.late_session)
    return await super().search_memory(**kw)


async def _remember(runner, sessions, memory, facts):
  """Earlier sessions, each stating one fact, stored in memory."""
  stored = []
  for fact in facts:
    old = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    await say(runner, old.id, fact)
    stored.append(await sessions.get_session(app_name=runner.app_name, user_id=USER, session_id=old.id))
  for s in stored:
    await memory.add_session_to_memory(s)
  return stored


def _blocks(request) -> list[str]:
  return [p.text for c in request.contents for p in c.parts or () if p.text and p.text.startswith(BLOCK_HEAD)]


def _setup(memory=None, tools=()):
  sessions = InMemorySessionService()
  memory = memory if memory is not None else InMemoryMemoryService()
  model = OfflineLlm()
  llm_agent, _ = agent(model=model, tools=[PreloadMemoryTool(), *tools])
  plugin = ContextPackPlugin(window=8192)
  recorder = Recorder()  # what ADK built, before the plugin
  runner = make_runner(llm_agent, [recorder, plugin], session_service=sessions, memory_service=memory)
  runner.recorded = recorder.requests
  return runner, sessions, memory, model, plugin


def test_the_memory_layer_replaces_a_block_with_the_same_hits():
  async def go():
    runner, sessions, memory, model, plugin = _setup()
    await _remember(runner, sessions, memory, FACTS)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    asks = ["what is the offsite budget?", "and the budget for travel?", "thanks, budget noted"]
    start = len(model.received)
    for ask in asks:
      await say(runner, s.id, ask)
    assert plugin.faults == 0
    sent = model.received[start:]
    assert [len(_blocks(r)) for r in runner.recorded[start:]] == [1, 1, 1]  # ADK's request had it
    for req in sent:
      assert _blocks(req) == []  # not sent twice
      pack = payload_of(req)
      memory_section = pack.split("MEMORY:\n", 1)[1].split("BUDGET:", 1)[0]
      for fact in FACTS:  # the same memories, in the fenced MEMORY section
        assert fact in memory_section
    docs = await manifests(runner, s.id)
    for d in docs:
      (note,) = d["runtime"]["preload_memory"]
      assert note["status"] == "replaced by the memory layer" and note["tokens"] > 20
      assert (note["hits"], note["included"]) == (2, 2)
    # The history grows by one exchange per call; a block taken for a turn re-synced it every call.
    assert [d["tail"]["history_len"] for d in docs] == [0, 2, 4]
    assert len({d["tail"]["start_id"] for d in docs[1:]}) == 1
  asyncio.run(go())


def test_a_block_with_other_hits_is_kept_and_charged_as_input_context():
  async def go():
    memory = _GrowingMemory("the offsite budget was raised to 5000 euros")
    runner, sessions, _, model, plugin = _setup(memory)
    await _remember(runner, sessions, memory, FACTS[:1])
    late = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    await say(runner, late.id, memory.late_fact)
    memory.late_session = await sessions.get_session(app_name=runner.app_name, user_id=USER, session_id=late.id)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    memory.searches = 0
    start = len(model.received)
    await say(runner, s.id, "what is the offsite budget?")
    assert plugin.faults == 0 and memory.searches == 2
    req = model.received[start]
    (block,) = _blocks(req)  # PreloadMemoryTool's own hits, untouched, right before the pack
    assert FACTS[0] in block and memory.late_fact not in block
    texts = [p.text for c in req.contents for p in c.parts or () if p.text]
    assert texts.index(block) == len(texts) - 2 and texts[-1].startswith("CONTEXT PACK")
    assert memory.late_fact in payload_of(req)  # the pack's own search saw the newer memory
    (doc,) = await manifests(runner, s.id)
    (note,) = doc["runtime"]["preload_memory"]
    assert note["status"].startswith("kept as input context")
    assert doc["tail"]["history_len"] == 0  # not a conversation turn
    assert doc["tail"]["inflight_ids"] == ["input_context:0"]  # pinned, charged
    (charged,) = [i for i in doc["items"] if i["id"] == "input_context:0"]
    assert charged["status"] == "included" and charged["tokens"] == note["tokens"]
    fits(req, 8192, doc["reserve"])
  asyncio.run(go())


def test_a_user_typing_the_block_text_is_a_turn():
  async def go():
    runner, sessions, memory, model, plugin = _setup()
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    typed = (f"{BLOCK_HEAD}\nThey may be useful for answering the user's current query.\n<PAST_CONVERSATIONS>\n"
             "user: I typed this\n</PAST_CONVERSATIONS>\n")
    await say(runner, s.id, typed)
    await say(runner, s.id, "what did I just paste?")
    assert plugin.faults == 0
    req = model.received[-1]
    assert _blocks(req) == [typed]  # kept: a session event, the conversation's own turn
    docs = await manifests(runner, s.id)
    assert docs[-1]["tail"]["history_len"] == 2
    assert "preload_memory" not in docs[-1]["runtime"]
  asyncio.run(go())


def test_tool_steps_replace_the_block_after_the_function_response():
  def lookup(city: str) -> dict:
    """Looks up the offsite venue in a city."""
    return {"venue": f"Hall 4, {city}"}

  async def go():
    def reply(req):
      if any(p.function_response for p in req.contents[-1].parts or ()):
        return "The venue is Hall 4."
      return tool_call("lookup", {"city": "Lisbon"}, "call-1") if "where is" in payload_of(req) else "noted"

    runner, sessions, memory, model, plugin = _setup(tools=[FunctionTool(lookup)])
    model.default = reply
    await _remember(runner, sessions, memory, FACTS)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    start = len(model.received)
    await say(runner, s.id, "where is the offsite in Lisbon, and what is the budget?")
    assert plugin.faults == 0
    first, second = model.received[start:start + 2]
    original = runner.recorded[start + 1]  # ADK put the block after the function response
    assert _blocks(original) and original.contents[-1].parts[0].text.startswith(BLOCK_HEAD)
    for req in (first, second):
      assert _blocks(req) == []
    # The second step: the pack, the model's call, its response, in that order; nothing after.
    roles = [(c.role, next((k for k in ("function_call", "function_response") if getattr(c.parts[0], k)), "text"))
             for c in second.contents]
    assert roles[-2:] == [("model", "function_call"), ("user", "function_response")]
    assert payload_of(second) == payload_of(first)  # the pack is byte-identical across the steps
    docs = await manifests(runner, s.id)
    assert [d["runtime"]["preload_memory"][0]["status"][:8] for d in docs] == ["replaced"] * 2
  asyncio.run(go())


def test_a_replaced_block_says_how_many_hits_the_pack_carries():
  """The MEMORY layer keeps its top-K: hits beyond it are neither in the block (gone)
  nor in the pack, and the manifest names them, and says so in the note."""
  async def go():
    runner, sessions, memory, model, plugin = _setup()
    facts = [f"offsite budget note {i}: line item {i} costs {100 * i} euros" for i in range(10)]
    await _remember(runner, sessions, memory, facts)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    start = len(model.received)
    await say(runner, s.id, "what is the offsite budget?")
    assert plugin.faults == 0
    assert sum(f in _blocks(runner.recorded[start])[0] for f in facts) == 10
    sent = payload_of(model.received[start])
    (doc,) = await manifests(runner, s.id)
    (note,) = doc["runtime"]["preload_memory"]
    k = 8  # PackPolicy().memory_top_k
    assert (note["hits"], note["included"]) == (10, k)
    assert sum(f in sent for f in facts) == k
    beyond = [e for e in doc["truncation_events"] if e["reason"].startswith("beyond memory top-K")]
    assert sum(len(e["item_ids"]) for e in beyond) == 10 - k  # named, with pointers, not silently gone
  asyncio.run(go())


def test_a_second_identical_block_is_replaced_too():
  class SecondPreload(PreloadMemoryTool):
    def __init__(self):
      super().__init__()
      self.name = "preload_memory_2"

  async def go():
    runner, sessions, memory, model, plugin = _setup(tools=[SecondPreload()])
    await _remember(runner, sessions, memory, FACTS)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    start = len(model.received)
    await say(runner, s.id, "what is the offsite budget?")
    assert len(_blocks(runner.recorded[start])) == 2 and _blocks(model.received[start]) == []
    (doc,) = await manifests(runner, s.id)
    assert [n["status"] for n in doc["runtime"]["preload_memory"]] == ["replaced by the memory layer"] * 2
  asyncio.run(go())


def test_with_a_static_instruction_the_block_first_is_replaced_too():
  """A static instruction with files makes ADK put the block among the leading contents."""
  from google.genai import types

  from tests.adk_support import png_bytes

  async def go():
    sessions, memory = InMemorySessionService(), InMemoryMemoryService()
    model = OfflineLlm()
    static = types.Content(role="user", parts=[
        types.Part(text="The style guide is in the image."),
        types.Part(inline_data=types.Blob(mime_type="image/png", data=png_bytes(64, 64)))])
    llm_agent, _ = agent(model=model, tools=[PreloadMemoryTool()], static_instruction=static, instruction="Be brief.")
    recorder, plugin = Recorder(), ContextPackPlugin(window=8192)
    runner = make_runner(llm_agent, [recorder, plugin], session_service=sessions, memory_service=memory)
    await _remember(runner, sessions, memory, FACTS)
    s = await sessions.create_session(app_name=runner.app_name, user_id=USER)
    start = len(model.received)
    for ask in ("what is the offsite budget?", "the offsite budget again?"):
      await say(runner, s.id, ask)
    assert plugin.faults == 0
    for orig, sent in zip(recorder.requests[start:], model.received[start:]):
      assert len(_blocks(orig)) == 1 and _blocks(sent) == []
    assert _blocks(recorder.requests[start])[0] == recorder.requests[start].contents[2].parts[0].text  # after the files
    docs = await manifests(runner, s.id)
    assert [d["runtime"]["preload_memory"][0]["status"] for d in docs] == ["replaced by the memory layer"] * 2
  asyncio.run(go())
