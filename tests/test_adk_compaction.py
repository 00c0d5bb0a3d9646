"""The plugin next to ADK's events compaction, through a real Runner.

``App(events_compaction_config=...)`` replaces compacted events in the
request with a summary (a model-role content built from the compaction
event's ``compacted_content``; the event itself has no ``content``), either
after an invocation (the sliding window) or before a model call (the token
threshold, which reads the last ``prompt_token_count`` the agent's events
carry). The summarizer here is an ``OfflineLlm`` whose summary names the
codewords of the turns it was given, so what was compacted stays checkable.
"""

from __future__ import annotations

import re
import warnings

import pytest
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.guard import check_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import LAST_FAULT_KEY
from aether_frame.core.render import INTERPRETATION_CONTRACT
from aether_frame.offline_model import OfflineLlm, tool_call

from tests.adk_support import APP, USER, Recorder, agent, manifests, new_session, payload_of, say

pytestmark = pytest.mark.asyncio

VERBATIM = "USER REQUEST (VERBATIM):\n"
TOPICS = ["lighthouse", "orchard", "glacier", "harbour", "vineyard", "quarry", "meadow", "canyon", "estuary", "tundra"]
FILLER = " ".join(f"detail{i} of the story" for i in range(40))  # ~200 tokens


def _summarize(request, pad: str = "") -> str:
  """The summary the summarizer writes: the codewords and topics of the compacted turns."""
  prompt = request.contents[0].parts[0].text
  codes = sorted(set(re.findall(r"code-\d+", prompt)), key=lambda c: int(c[5:]))
  topics = sorted(set(re.findall(r"about the (\w+)", prompt)))
  return f"Summary so far: the user named {', '.join(codes)} about the {', '.join(topics)}.{pad}"


def _compaction(pad: str = "", **kw):
  from google.adk.apps._configs import EventsCompactionConfig
  from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
  summarizer = OfflineLlm(model="offline-summarizer", default=lambda request: _summarize(request, pad))
  with warnings.catch_warnings():  # experimental in ADK 2.13
    warnings.simplefilter("ignore")
    return EventsCompactionConfig(summarizer=LlmEventSummarizer(llm=summarizer), **kw), summarizer


def _runner(root, plugins, config) -> Runner:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    app = App(name=APP, root_agent=root, plugins=list(plugins), events_compaction_config=config)
  return Runner(app=app, session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())


async def _session(runner, session_id: str):
  return await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)


def _compactions(session) -> list:
  return [e for e in session.events if e.actions and e.actions.compaction]


def _texts(contents) -> list[str]:
  return [p.text for c in contents for p in c.parts or () if p.text]


def _is_summary(content: types.Content) -> bool:
  return any((p.text or "").startswith("Summary so far:") for p in content.parts or ())


def _turn(i: int) -> str:
  return f"turn {i}: code-{i} about the {TOPICS[i % len(TOPICS)]}. {FILLER}"


def lookup(city: str) -> dict:
  """Looks up facts about a city."""
  return {"city": city, "population": 1000 + len(city)}


async def test_sliding_window_summaries_are_packed_with_their_compaction_events_provenance():
  """The summary ADK puts in place of compacted invocations is history like any
  other turn: it rides in the tail, the payload replaces the user turn, every
  call writes a valid manifest, and the summary's group names the compaction
  event it came from (its ``content`` is empty: the index must read
  ``compacted_content``), dated at the range's end as ADK orders it."""
  config, summarizer = _compaction(compaction_interval=2, overlap_size=1)
  model = OfflineLlm(default=lambda req: f"reply {len(model.received)}")
  ag, _ = agent(model=model)
  recorder, plugin = Recorder(), ContextPackPlugin(window=16_000)
  runner = _runner(ag, [recorder, plugin], config)
  session = await new_session(runner)
  for i in range(6):
    await say(runner, session.id, _turn(i))

  stored = await _session(runner, session.id)
  compactions = _compactions(stored)
  assert len(compactions) == 3 and len(summarizer.received) == 3
  docs = await manifests(runner, session.id)
  assert len(docs) == len(model.received) == 6
  assert all(d["valid"] and d["runtime"]["guard"]["ok"] for d in docs)
  assert plugin.faults == 0 and LAST_FAULT_KEY not in stored.state

  # The last call: ADK sent two (overlapping) summaries, then turn 4, then turn 5.
  original, sent = recorder.requests[-1], model.received[-1]
  assert [_is_summary(c) for c in original.contents] == [True, True, False, False, False]
  assert sent.contents[:-1] == original.contents[:-1], "the whole history fits: sent as ADK built it"
  assert INTERPRETATION_CONTRACT in sent.config.system_instruction
  assert payload_of(sent).endswith(VERBATIM + _turn(5))
  # The plugin does not bring back what ADK compacted (turns 0 to 3).
  sent_text = "\n".join(_texts(sent.contents))
  assert not any(f"turn {i}:" in sent_text for i in range(4))

  by_id = {e.id: e for e in stored.events}
  (cache,) = plugin._sessions.values()
  groups = cache.compiler.history
  assert len(groups) == 4
  assert all(g.provenance.source in by_id for g in groups), [g.provenance for g in groups]
  for group, compaction in zip(groups[:2], compactions[:2]):
    assert group.provenance.source == compaction.id
    assert group.provenance.timestamp == compaction.actions.compaction.end_timestamp
    assert group.text.split("] ", 1)[1].startswith("compaction: Summary so far: the user named code-")
  # Retained raw turns keep their own events, though compacted events share the session.
  user4 = by_id[groups[2].provenance.source]
  assert user4.author == "user" and user4.content.parts[0].text == _turn(4)
  assert by_id[groups[3].provenance.source].author == "assistant"


async def test_token_threshold_compaction_of_the_users_own_turn_still_gets_a_pack():
  """The token threshold compacts before a model call and keeps only the last
  ``event_retention_size`` raw events: in a tool loop it summarizes the
  invocation's own user message, and ADK's request has no user turn left. The
  pack puts it back, verbatim, after the summary and before the tool steps;
  without it such calls went out unpacked and wrote no manifest."""
  config, summarizer = _compaction(token_threshold=300, event_retention_size=1)
  script = []
  for i in range(3):
    script += [tool_call("lookup", {"city": f"city{i}"}), f"done {i}"]
  model = OfflineLlm(script=script)
  ag, _ = agent(model=model, tools=[lookup])
  recorder, plugin = Recorder(), ContextPackPlugin(window=16_000)
  runner = _runner(ag, [recorder, plugin], config)
  session = await new_session(runner)
  for i in range(3):
    await say(runner, session.id, _turn(i))

  stored = await _session(runner, session.id)
  assert summarizer.received, "the threshold was reached"
  docs = await manifests(runner, session.id)
  assert len(docs) == len(model.received) == 6, "every call is packed"
  assert all(d["valid"] and d["runtime"]["guard"]["ok"] and not d["runtime"]["guard"]["fallback"] for d in docs)
  assert plugin.faults == 0 and LAST_FAULT_KEY not in stored.state

  checked = 0
  for n, (original, sent) in enumerate(zip(recorder.requests, model.received)):
    turn = _turn(n // 2)
    if not any(turn in t for t in _texts(original.contents)):
      # ADK compacted the user turn away: summary, then the call and its response.
      assert [_is_summary(c) for c in original.contents] == [True, False, False]
      assert [c.role for c in sent.contents] == ["model", "user", "model", "user"]
      assert sent.contents[0] == original.contents[0]
      assert sent.contents[2:] == original.contents[1:], "the tool steps follow the payload unchanged"
      assert sent.contents[1].parts[0].text.endswith(VERBATIM + turn)
      assert docs[n]["runtime"]["restored_user_turn"] == 1
      checked += 1
    else:
      assert "restored_user_turn" not in docs[n]["runtime"]
    assert payload_of(sent).count(VERBATIM) == 1
    ok = check_request(sent.contents, sent.config, plugin.counter, usable=10**9, last_role=original.contents[-1].role)
    assert ok.ok, ok.problems
  assert checked >= 2


async def test_token_threshold_reads_the_prompt_the_pack_sent():
  """ADK's threshold compares the ``prompt_token_count`` the model reported for
  the agent's last call, and that call was the pack: a window that keeps the
  pack under the threshold keeps ADK from compacting, though the raw history
  is well over it. A model that reports no usage leaves ADK its own estimate
  of the raw events, which does compact."""

  async def run(report_usage: bool, plugins_for):
    config, summarizer = _compaction(token_threshold=1_500, event_retention_size=2)
    model = OfflineLlm(default="noted", report_usage=report_usage)
    ag, _ = agent(model=model)
    runner = _runner(ag, plugins_for(), config)
    session = await new_session(runner)
    for i in range(10):
      await say(runner, session.id, _turn(i))
    return await _session(runner, session.id), model

  packed, model = await run(True, lambda: [ContextPackPlugin(window=1_600)])
  counts = [e.usage_metadata.prompt_token_count for e in packed.events if e.author == "assistant"]
  assert _compactions(packed) == []
  assert max(counts) < 1_500, counts
  assert sum(len(t) for t in _texts(model.received[-1].contents[:-1])) < sum(len(_turn(i)) for i in range(9))

  raw, _ = await run(True, lambda: [])
  assert len(_compactions(raw)) >= 1, "the same conversation unpacked is over the threshold"

  estimated, model = await run(False, lambda: [ContextPackPlugin(window=1_600)])
  assert len(_compactions(estimated)) >= 1
  assert _is_summary(model.received[-1].contents[0])


async def test_trimmed_summaries_are_recalled_and_compacted_turns_are_not_resurrected():
  """Sliding-window summaries accumulate (each covers new invocations), so in a
  small window the pack trims the oldest summaries like any turn and can
  recall one into MEMORY; the raw turns ADK compacted are gone from the
  request and the recall index alike, and nothing recalled is in the tail."""
  pad = " The story went on: " + FILLER[:len(FILLER) // 2]  # shorter than a turn: ADK keeps every summary
  config, _ = _compaction(pad, compaction_interval=1, overlap_size=0)
  model = OfflineLlm(default="noted")
  ag, _ = agent(model=model)
  plugin = ContextPackPlugin(window=2_048)
  runner = _runner(ag, [plugin], config)
  session = await new_session(runner)
  for i in range(12):
    await say(runner, session.id, _turn(i) + f" The {TOPICS[i % len(TOPICS)]} ticket is code-{i}.")
  await say(runner, session.id, "Which code did I give for the glacier?")

  stored = await _session(runner, session.id)
  assert len(_compactions(stored)) == 12
  docs = await manifests(runner, session.id)
  assert all(d["valid"] for d in docs) and plugin.faults == 0
  last, sent = docs[-1], model.received[-1]
  assert last["tail"]["start"] > 0, "the oldest summaries were trimmed"
  recalled = [row for row in last["items"] if row["kind"] == "recall" and row["status"] == "included"]
  assert recalled, last["items"]
  compaction_ids = {e.id for e in _compactions(stored)}
  assert all(row["pointer"] in compaction_ids for row in recalled), "a recalled summary names its compaction event"
  payload = payload_of(sent)
  assert "code-2 about the glacier" in payload
  # Recalled lines are not in the tail, and no raw compacted turn came back.
  tail_text = "\n".join(_texts(sent.contents[:-1]))
  assert "code-2 about the glacier" not in tail_text
  assert not any(f"turn {i}:" in payload + tail_text for i in range(12))


async def test_trims_and_compaction_keep_tool_calls_paired_and_the_prefix_stable_between_them():
  """Chunked trims and ADK's compaction both cut the history's front; neither
  may split a call from its response, and between them the sent history only
  grows (a provider cache prefix breaks only where one of them cut)."""
  config, summarizer = _compaction(compaction_interval=3, overlap_size=1)
  script = []
  for i in range(12):
    script += [tool_call("lookup", {"city": f"city{i}"}), f"city{i} looked up. {FILLER}"]
  model = OfflineLlm(script=script)
  ag, _ = agent(model=model, tools=[lookup])
  recorder, plugin = Recorder(), ContextPackPlugin(window=1_800)
  runner = _runner(ag, [recorder, plugin], config)
  session = await new_session(runner)
  for i in range(12):
    await say(runner, session.id, _turn(i))

  stored = await _session(runner, session.id)
  assert len(_compactions(stored)) >= 3
  docs = await manifests(runner, session.id)
  assert len(docs) == len(model.received) == 24
  assert all(d["valid"] and d["runtime"]["guard"]["ok"] and not d["runtime"]["guard"]["fallback"] for d in docs)
  assert plugin.faults == 0
  trims = breaks = 0
  previous = None
  for doc, original, sent in zip(docs, recorder.requests, model.received):
    ok = check_request(sent.contents, sent.config, plugin.counter, usable=doc["usable"], last_role=original.contents[-1].role)
    assert ok.ok, ok.problems
    history = sent.contents[:_payload_at(sent)]
    trimmed = any("chunked trim" in e.get("reason", "") for e in doc["truncation_events"])
    compacted_since = previous is not None and _summaries(original) != previous[1]
    if previous is not None and history[:len(previous[0])] != previous[0]:
      breaks += 1
      assert trimmed or compacted_since, "the sent history changed its front with no trim or compaction"
    trims += trimmed
    previous = (history, _summaries(original))
  assert trims >= 1 and breaks >= 1


def _payload_at(request) -> int:
  return next(i for i, c in enumerate(request.contents) if any(VERBATIM in (p.text or "") for p in c.parts or ()))


def _summaries(request) -> list[str]:
  return [t for t in _texts(request.contents) if t.startswith("Summary so far:")]


async def test_a_compaction_that_keeps_the_historys_length_and_ends_is_still_a_rewrite():
  """With a fixed ``event_retention_size`` every compaction leaves a history of
  the same length: a summarizer that writes the same placeholder each time and
  a model that answers alike give it the same first and last content too. The
  append-only sync compared only those, kept the first retained turn it had
  seen for good, and costed, indexed and attributed that turn in place of the
  one ADK sent."""
  config, summarizer = _compaction(token_threshold=150, event_retention_size=2)
  summarizer.default = "Earlier turns were compacted."
  model = OfflineLlm(default="ok")
  ag, _ = agent(model=model)
  recorder, plugin = Recorder(), ContextPackPlugin(window=16_000)
  runner = _runner(ag, [recorder, plugin], config)
  session = await new_session(runner)
  synced = 0
  for i in range(6):
    await say(runner, session.id, _turn(i)[:60])
    (cache,) = plugin._sessions.values()
    history = recorder.requests[-1].contents[:-1]
    sent = [p.model_dump(mode="json", exclude_none=True) for c in history for p in c.parts or ()]
    assert [p for g in cache.compiler.history for p in g.parts] == sent, i
    stored = await _session(runner, session.id)
    by_id = {e.id: e for e in stored.events}
    for group, content in zip(cache.compiler.history, history):
      event = by_id[group.provenance.source]
      assert (event.content or event.actions.compaction.compacted_content).parts[0].text == content.parts[0].text
    synced += len(history) == 3 and history[0].parts[0].text == summarizer.default
  assert len(_compactions(await _session(runner, session.id))) >= 4
  assert synced >= 3, "the history kept its length and ends across compactions"
