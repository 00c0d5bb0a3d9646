"""What the plugin must carry over from ADK's request unchanged.

The contents ADK adds for the agent's instructions (a static instruction's
files, the dynamic instruction) and the user's own parts, in their order and
with every field. Real ADK ``Runner``; ``OfflineLlm`` records what it received.
"""

from __future__ import annotations

from typing import Optional

import pytest
from google.adk.flows.llm_flows.instructions import _INSTRUCTION_BEGIN
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

import aether_frame.adk.plugin as plugin_module
from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.render import INTERPRETATION_CONTRACT
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter

from tests.adk_support import USER, Recorder, agent, make_runner, manifests, new_session, say

pytestmark = pytest.mark.asyncio

COUNTER = get_counter()
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
HANDBOOK = ("STATIC-FILE-BYTES policy handbook. " + "Refunds need a receipt and manager approval. " * 40).encode()
LONG_REPLY = "Noted. " + "Some long answer about rollout plans. " * 30


class _InflateOldReply(BasePlugin):
  """Ahead of ours: rewrites the oldest model reply in place, so the compiler's cached
  view of it is stale and the guard's recount sends the minimal safe pack."""

  def __init__(self):
    super().__init__("inflate_old_reply")
    self.active = False

  async def before_model_callback(self, *, callback_context, llm_request):
    if self.active:
      i = next(i for i, c in enumerate(llm_request.contents) if c.role == "model")
      llm_request.contents[i] = types.Content(role="model", parts=[types.Part(text="long answer " * 3000)])
    return None


def _image(data: bytes) -> types.Part:
  return types.Part(inline_data=types.Blob(mime_type="image/png", data=data))


def _dump(contents) -> list[str]:
  return [c.model_dump_json(exclude_none=True) for c in contents]


def _is_dynamic_instruction(content) -> bool:
  return any(_INSTRUCTION_BEGIN in (p.text or "") for p in content.parts or ())


def _payload_index(req) -> int:
  return next(i for i, c in enumerate(req.contents) if c.role == "user" and c.parts and c.parts[0].text
              and c.parts[0].text.startswith("CONTEXT PACK v1"))


def _static_file_agent(model):
  static = types.Content(role="user", parts=[
      types.Part(text="You are a static helper."),
      types.Part(inline_data=types.Blob(mime_type="text/plain", data=HANDBOOK)),
  ])
  return agent(model=model, static_instruction=static, instruction="DYNAMIC RULE: the user's name is {name}.")[0]


def _turn(t: int) -> str:
  return f"Turn {t}: " + "more notes on vendor pricing, support and rollout plans. " * 10


# ------------------------------------------------------------ instruction contents
async def test_static_file_and_dynamic_instruction_ride_every_request_of_a_trimmed_session():
  model = OfflineLlm(default=LONG_REPLY)
  recorder = Recorder()
  runner = make_runner(_static_file_agent(model), [recorder, ContextPackPlugin(window=4096)])
  session = await new_session(runner, state={"name": "Ada"})
  for t in range(12):
    await say(runner, session.id, _turn(t))
  docs = await manifests(runner, session.id)
  assert len(model.received) == len(recorder.requests) == len(docs) == 12
  assert any(d["tail"]["start"] > 0 for d in docs), "the fixture must trim the conversation"
  for call, (orig, sent) in enumerate(zip(recorder.requests, model.received)):
    # ADK put the file and the dynamic instruction first; they stay there, unchanged.
    assert _dump(orig.contents[:2]) == _dump(sent.contents[:2]), f"call {call}"
    assert sent.contents[0].parts[1].inline_data.data == HANDBOOK
    assert "DYNAMIC RULE: the user's name is Ada." in sent.contents[1].parts[0].text
    assert "inline_data_0" in sent.config.system_instruction
    assert sum(map(_is_dynamic_instruction, sent.contents)) == 1
    assert sum(any(p.inline_data for p in c.parts or ()) for c in sent.contents) == 1
  for sent, doc in zip(model.received, docs):
    # Charged to the budget: the pack fits without the guard's fallback.
    assert not doc["runtime"]["guard"]["fallback"], doc["runtime"]["guard"]
    assert count_request(sent.contents, sent.config, COUNTER) <= doc["usable"]
    rows = [r for r in doc["items"] if r["kind"] == "instruction"]
    assert len(rows) == 2 and all(r["status"] == "included" for r in rows)
    assert sum(r["tokens"] for r in rows) == count_request(sent.contents[:2], types.GenerateContentConfig(), COUNTER)


async def test_instruction_contents_survive_the_minimal_safe_pack(monkeypatch):
  monkeypatch.setattr(plugin_module, "_same_payloads", lambda history, known: True)  # a stale history view (see test_plugin_e2e)
  model = OfflineLlm(default="Short answer.")
  recorder = Recorder()
  inflate = _InflateOldReply()
  plugin = ContextPackPlugin(window=4096)
  runner = make_runner(_static_file_agent(model), [inflate, recorder, plugin])
  session = await new_session(runner, state={"name": "Ada"})
  for t in range(3):
    await say(runner, session.id, f"Turn {t}: a short question.")
  inflate.active = True
  await say(runner, session.id, "Turn 3: and now?")
  orig, sent = recorder.requests[-1], model.received[-1]
  doc = (await manifests(runner, session.id))[-1]
  assert doc["runtime"]["guard"]["fallback"] is True
  assert _dump(sent.contents[:2]) == _dump(orig.contents[:2])
  assert len(sent.contents) == 3 and _payload_index(sent) == 2
  assert count_request(sent.contents, sent.config, COUNTER) <= doc["usable"]
  assert plugin.faults == 0


async def test_a_text_only_static_instructions_dynamic_instruction_survives_the_minimal_pack(monkeypatch):
  monkeypatch.setattr(plugin_module, "_same_payloads", lambda history, known: True)  # a stale history view (see test_plugin_e2e)
  model = OfflineLlm(default="Short answer.")
  inflate = _InflateOldReply()
  ag, _ = agent(model=model, static_instruction="You are a static helper.", instruction="DYNAMIC RULE: the user's name is {name}.")
  runner = make_runner(ag, [inflate, ContextPackPlugin(window=4096)])
  session = await new_session(runner, state={"name": "Ada"})
  for t in range(3):
    await say(runner, session.id, f"Turn {t}: a short question.")
  inflate.active = True
  await say(runner, session.id, "Turn 3: and now?")
  doc = (await manifests(runner, session.id))[-1]
  assert doc["runtime"]["guard"]["fallback"] is True
  for sent in model.received:
    i = _payload_index(sent)
    assert _is_dynamic_instruction(sent.contents[i - 1])  # where ADK put it: just before the user turn
    assert sum(map(_is_dynamic_instruction, sent.contents)) == 1
  assert len(model.received[-1].contents) == 2


async def test_the_dynamic_instruction_is_not_synced_as_history():
  """As history it sat last, and then was gone on the next turn: a rewritten history every turn."""
  model = OfflineLlm(default="Short answer.")
  ag, _ = agent(model=model, static_instruction="You are a static helper.", instruction="DYNAMIC RULE: the user's name is {name}.")
  runner = make_runner(ag, [ContextPackPlugin(window=8192)])
  session = await new_session(runner, state={"name": "Ada"})
  for t in range(4):
    await say(runner, session.id, f"Turn {t}: a short question.")
  docs = await manifests(runner, session.id)
  assert [d["tail"]["history_len"] for d in docs] == [0, 2, 4, 6]  # user and model turns only


async def test_per_turn_model_input_context_is_pinned_not_history():
  """``RunConfig.model_input_context`` rides before the user turn of one invocation only:
  as history it was trimmable and reset the incremental sync on every turn."""
  from google.adk.agents.run_config import RunConfig

  model = OfflineLlm(default="Short answer.")
  runner = make_runner(agent(model=model)[0], [ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  for t in range(4):
    context = types.Content(role="user", parts=[types.Part(text=f"PAGE CONTEXT: the user is on page {t}.")])
    msg = types.Content(role="user", parts=[types.Part(text=f"Turn {t}: a short question.")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=msg,
                                    run_config=RunConfig(model_input_context=[context])):
      pass
    sent = model.received[-1]
    at = _payload_index(sent)
    assert sent.contents[at - 1].parts[0].text == f"PAGE CONTEXT: the user is on page {t}."
    assert sum("PAGE CONTEXT" in (p.text or "") for c in sent.contents for p in c.parts or ()) == 1
  docs = await manifests(runner, session.id)
  assert [d["tail"]["history_len"] for d in docs] == [0, 2, 4, 6]  # user and model turns only
  for doc in docs:
    rows = [r for r in doc["items"] if r["kind"] == "input_context"]
    assert len(rows) == 1 and rows[0]["status"] == "included" and rows[0]["tokens"] > 0


# ------------------------------------------------------------ the user's parts
async def test_interleaved_text_and_images_keep_their_order():
  model = OfflineLlm(default="The second one.")
  recorder = Recorder()
  runner = make_runner(agent(model=model)[0], [recorder, ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  await say(runner, session.id, "Before photo:", parts=[
      _image(PNG_1X1 + b"before"), types.Part(text="After photo:"), _image(PNG_1X1 + b"after"),
      types.Part(text="Which one is damaged?"),
  ])
  orig, sent = recorder.requests[0], model.received[0]
  user = orig.contents[-1]
  msg = sent.contents[_payload_index(sent)]
  assert msg.parts[0].text.endswith("USER REQUEST (VERBATIM):\nBefore photo:")
  assert _dump([types.Content(parts=msg.parts[1:])]) == _dump([types.Content(parts=user.parts[1:])])
  assert [p.inline_data.data[-5:] if p.inline_data else p.text for p in msg.parts[1:]] == [
      b"efore", "After photo:", b"after", "Which one is damaged?",
  ]
  doc = (await manifests(runner, session.id))[-1]
  assert count_request(sent.contents, sent.config, COUNTER) <= doc["usable"]


async def test_text_parts_keep_their_other_fields():
  model = OfflineLlm(default="Fine.")
  recorder = Recorder()
  runner = make_runner(agent(model=model)[0], [recorder, ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  msg = types.Content(role="user", parts=[
      types.Part(text="Compare these.", thought_signature=b"sig-1"), _image(PNG_1X1),
      types.Part(text="Be brief.", thought_signature=b"sig-2"),
  ])
  async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=msg):
    pass
  user, sent = recorder.requests[0].contents[-1], model.received[0]
  assert user.parts[0].thought_signature == b"sig-1"  # ADK itself kept it
  payload = sent.contents[_payload_index(sent)]
  # The pack is a part of its own; the user's parts follow it, field for field.
  assert payload.parts[0].text.endswith("USER REQUEST (VERBATIM):\n")
  assert _dump([types.Content(parts=payload.parts[1:])]) == _dump([types.Content(parts=user.parts)])


async def test_the_payload_message_is_byte_identical_across_the_steps_of_an_invocation():
  model = OfflineLlm(script=[tool_call("lookup", {"q": "damage"}, "c1"), "Done."])

  def lookup(q: str) -> dict:
    """Looks something up."""
    return {"q": q, "found": True}

  runner = make_runner(agent(model=model, tools=[lookup])[0], [ContextPackPlugin(window=8192)])
  session = await new_session(runner)
  await say(runner, session.id, "Before photo:", parts=[_image(PNG_1X1), types.Part(text="After photo:"), _image(PNG_1X1)])
  first, second = model.received
  a, b = first.contents[_payload_index(first)], second.contents[_payload_index(second)]
  assert _dump([a]) == _dump([b])
  assert [bool(p.inline_data) for p in a.parts] == [False, True, False, True]
  assert second.contents[-1].parts[0].function_response.id == "c1"


async def test_a_system_instruction_with_a_file_keeps_it_and_charges_it():
  """A plugin before ours may give the system instruction as a Content with a file or an
  image: the rewrite sent its text alone, and nothing said the file was gone."""
  from tests.adk_support import png_bytes

  image = types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png")

  class AttachPolicy(BasePlugin):
    def __init__(self):
      super().__init__("attach_policy")

    async def before_model_callback(self, *, callback_context, llm_request):
      text = llm_request.config.system_instruction
      llm_request.config.system_instruction = types.Content(role="user", parts=[types.Part(text=text), image])
      return None

  model = OfflineLlm(default="Short answer.")
  ag, _ = agent(model=model)
  runner = make_runner(ag, [AttachPolicy(), ContextPackPlugin(window=4096)])
  session = await new_session(runner)
  await say(runner, session.id, "What does the diagram show?")
  sent = model.received[-1]
  si = sent.config.system_instruction
  assert isinstance(si, types.Content) and si.parts[-1].inline_data.data == image.inline_data.data
  assert INTERPRETATION_CONTRACT in si.parts[0].text
  doc = (await manifests(runner, session.id))[-1]
  rows = {r["id"]: r for r in doc["items"]}
  assert rows["system:instruction_media"]["tokens"] == 258 and rows["system:instruction_media"]["status"] == "included"
  assert doc["layers"]["system"]["used"] == rows["system:instruction"]["tokens"] + 258
  assert count_request(sent.contents, sent.config, COUNTER) >= 258 + COUNTER.count(si.parts[0].text)


class _SystemParts(BasePlugin):
  """Ahead of ours: gives ADK's system instruction (``text``, a string) as the parts ``layout`` names."""

  def __init__(self, layout: str, image: Optional[types.Part] = None):
    super().__init__("system_parts")
    self.layout, self.image, self.text = layout, image, None

  async def before_model_callback(self, *, callback_context, llm_request):
    self.text = llm_request.config.system_instruction
    text, head = types.Part(text=self.text), types.Part(text="Follow the handbook below.")
    parts = {"string": None, "one text part": [text],
             "text file text": [head, self.image, text], "text text file": [head, text, self.image]}[self.layout]
    if parts is not None:
      llm_request.config.system_instruction = types.Content(role="user", parts=parts)
    return None


async def _run_system_parts(layout: str, image: Optional[types.Part] = None, turns: int = 2):
  model = OfflineLlm(default="Short answer.")
  given = _SystemParts(layout, image)
  runner = make_runner(agent(model=model)[0], [given, ContextPackPlugin(window=4096)])
  session = await new_session(runner)
  for t in range(turns):
    await say(runner, session.id, f"Turn {t}: what does the diagram show?")
  return given.text, model.received, await manifests(runner, session.id)


async def test_a_system_instruction_of_several_parts_keeps_their_order():
  """``[text, file, text]`` went out as ``[text + text + contract, file]``: the file moved behind
  every text. The parts keep their order and the contract joins the last text, the same on
  every call; the system layer is charged for exactly the texts and the file sent."""
  from tests.adk_support import png_bytes

  image = types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png")
  adk_text, received, docs = await _run_system_parts("text file text", image)
  assert adk_text.startswith("You are a helpful assistant.")
  expected = types.Content(role="user", parts=[
      types.Part(text="Follow the handbook below."), image, types.Part(text=adk_text + "\n\n" + INTERPRETATION_CONTRACT),
  ])
  for sent, doc in zip(received, docs):
    si = sent.config.system_instruction
    assert isinstance(si, types.Content) and si.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert si.model_dump_json() == received[0].config.system_instruction.model_dump_json()  # the cached prefix holds
    rows = {r["id"]: r for r in doc["items"]}
    texts = "Follow the handbook below.\n" + adk_text + "\n\n" + INTERPRETATION_CONTRACT
    assert rows["system:instruction"]["tokens"] == COUNTER.count(texts)
    assert rows["system:instruction_media"]["tokens"] == 258
    assert doc["layers"]["system"]["used"] == COUNTER.count(texts) + 258
    assert not doc["runtime"]["guard"]["fallback"]
    assert count_request(sent.contents, sent.config, COUNTER) <= doc["usable"]
  # Where the file sits is part of the cached prefix: the same texts and file in another order
  # hash apart (first calls of two sessions: the same prefix but for that).
  _, _, moved = await _run_system_parts("text text file", image, turns=1)
  assert [r["tokens"] for r in moved[0]["items"]] == [r["tokens"] for r in docs[0]["items"]]
  assert moved[0]["prefix_sha256"] != docs[0]["prefix_sha256"]


@pytest.mark.parametrize("layout", ["string", "one text part"])
async def test_a_system_instruction_without_a_file_still_goes_out_as_one_string(layout):
  """The common cases are sent as before, byte for byte: one string, the contract appended."""
  adk_text, received, _ = await _run_system_parts(layout, turns=1)
  assert received[0].config.system_instruction == adk_text + "\n\n" + INTERPRETATION_CONTRACT


async def test_an_empty_text_part_of_a_system_instruction_is_not_media():
  from aether_frame.adk import sources

  config = types.GenerateContentConfig(system_instruction=types.Content(role="user", parts=[
      types.Part(text="Be brief."), types.Part(text=""), types.Part(file_data=types.FileData(file_uri="gs://b/p.pdf", mime_type="application/pdf"))]))
  media = sources.system_media(config)
  assert [p.file_data.file_uri for p in media] == ["gs://b/p.pdf"]


class _GivenSystem(BasePlugin):
  """Ahead of ours: replaces the system instruction with the parts given ("FILE" marks the image)."""

  def __init__(self, layout: list[str], image: types.Part):
    super().__init__("given_system")
    self.parts = [image if x == "FILE" else types.Part(text=x) for x in layout]

  async def before_model_callback(self, *, callback_context, llm_request):
    llm_request.config.system_instruction = types.Content(role="user", parts=list(self.parts))
    return None


async def _first_call(layout: list[str]):
  from tests.adk_support import png_bytes

  image = types.Part.from_bytes(data=png_bytes(64, 64), mime_type="image/png")
  model = OfflineLlm(default="Short answer.")
  runner = make_runner(agent(model=model)[0], [_GivenSystem(layout, image), ContextPackPlugin(window=4096)])
  session = await new_session(runner)
  await say(runner, session.id, "What does the diagram show?")
  si = model.received[0].config.system_instruction
  return [("FILE" if p.inline_data else p.text) for p in si.parts], (await manifests(runner, session.id))[0]


async def test_texts_before_a_file_go_out_joined_as_before():
  """Files after every text: the texts are sent as one part, as earlier versions sent them,
  so an upgrade neither changes the bytes nor the prefix hash of such an instruction."""
  split, doc = await _first_call(["Be brief.", "Use the handbook.", "FILE"])
  joined, doc2 = await _first_call(["Be brief.\nUse the handbook.", "FILE"])
  assert split == joined == ["Be brief.\nUse the handbook.\n\n" + INTERPRETATION_CONTRACT, "FILE"]
  assert doc["prefix_sha256"] == doc2["prefix_sha256"]
  assert "meta" not in {r["id"]: r for r in doc["items"]}["system:instruction_media"]


async def test_the_prefix_hash_tells_apart_every_layout_sent_differently():
  """The texts joined are the same in each pair below; what is sent is the same only in the
  first pair (adjacent texts are sent joined), and so is the hash."""
  a, doc_a = await _first_call(["Be brief.", "FILE", "One.\nTwo.", "Three."])
  b, doc_b = await _first_call(["Be brief.", "FILE", "One.", "Two.\nThree."])
  assert a == b == ["Be brief.", "FILE", "One.\nTwo.\nThree.\n\n" + INTERPRETATION_CONTRACT]
  assert doc_a["prefix_sha256"] == doc_b["prefix_sha256"]
  c, doc_c = await _first_call(["Be brief.", "FILE", "One.\nTwo."])
  d, doc_d = await _first_call(["Be brief.\nOne.", "FILE", "Two."])
  assert c != d
  assert doc_c["prefix_sha256"] != doc_d["prefix_sha256"]
