"""ADK request features the pack must carry through, on a real Runner.

SSE streaming (partial responses, then the final one), planners (thinking
config, thought parts with signatures, PlanReAct's planning text), code
executors (code and its result in the history), a user's image saved as an
artifact, and ``max_llm_calls`` stopping a tool loop. ``OfflineLlm`` records
what reached it; a ``Recorder`` ahead of the plugin keeps what ADK built.
"""

from __future__ import annotations

import warnings

import pytest
from google.adk.agents import SequentialAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.code_executors import BuiltInCodeExecutor, UnsafeLocalCodeExecutor
from google.adk.planners import BuiltInPlanner, PlanReActPlanner
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.save_files_as_artifacts_plugin import SaveFilesAsArtifactsPlugin
from google.genai import types

from aether_frame.adk.guard import count_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY, LAST_FAULT_KEY, LAST_PACK_KEY
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter

from tests.adk_support import (
    APP, USER, Recorder, agent, fits, independent_tokens, make_runner, manifests, new_session, payload_of, png_bytes,
    say,
)

pytestmark = pytest.mark.asyncio

VERBATIM = "USER REQUEST (VERBATIM):\n"


def lookup(city: str) -> dict:
  """Looks up the weather of a city."""
  return {"city": city, "temp_c": 21, "sky": "clear"}


async def _run(runner, session_id: str, text: str, run_config: RunConfig, parts=()) -> list:
  msg = types.Content(role="user", parts=[types.Part(text=text), *parts])
  return [ev async for ev in runner.run_async(user_id=USER, session_id=session_id, new_message=msg, run_config=run_config)]


async def _session(runner, session_id: str):
  return await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)


def _is_payload(content) -> bool:
  return content.role == "user" and bool(content.parts) and (content.parts[0].text or "").startswith("CONTEXT PACK v1")


def _kept_in_order(original, sent) -> list[int]:
  """Where each sent content other than the payload is in ADK's request: every one
  equal to ADK's (every field, signatures included) and in ADK's order."""
  at, out = 0, []
  for c in sent.contents:
    if _is_payload(c):
      continue
    while at < len(original.contents) and original.contents[at] != c:
      at += 1
    assert at < len(original.contents), f"sent content is not one ADK built, in order: {c}"
    out.append(at)
    at += 1
  return out


def _costed(docs, received) -> None:
  """Every call's estimate covers an independent count of what was sent, and fits."""
  assert len(docs) == len(received)
  for i, (doc, req) in enumerate(zip(docs, received)):
    assert doc["runtime"]["request_tokens_estimate"] >= independent_tokens(req), i
    fits(req, doc["window"], doc["reserve"])


class _AfterModelLog(BasePlugin):
  """Listed after the pack plugin: sees each response ADK hands the after-model callbacks."""

  def __init__(self):
    super().__init__("after_model_log")
    self.responses = []

  async def after_model_callback(self, *, callback_context, llm_response):
    self.responses.append(llm_response)
    return None


# ------------------------------------------------------------------ streaming
@pytest.mark.parametrize("partial_usage", [True, False], ids=["usage-on-every-chunk", "usage-on-final"])
async def test_sse_stream_is_calibrated_once_per_call_against_that_calls_estimate(partial_usage):
  model = OfflineLlm(stream_chunks=4, partial_usage=partial_usage, script=[
      tool_call("lookup", {"city": "Oslo"}), "It is 21 degrees and clear in Oslo today, a fine day for a walk."])
  ag, _ = agent(model=model, tools=[lookup])
  log = _AfterModelLog()
  runner = make_runner(ag, [ContextPackPlugin(window=8192), log])
  s = await new_session(runner)
  sse = RunConfig(streaming_mode=StreamingMode.SSE)
  events = await _run(runner, s.id, "What is the weather in Oslo?", sse)

  # The answer streamed: the after-model callbacks ran on every chunk, then on the final response.
  assert [r.partial for r in log.responses] == [None, True, True, True, True, None]
  assert sum(1 for e in events if e.partial) == 4
  docs = await manifests(runner, s.id)
  assert len(docs) == len(model.received) == 2, "one manifest per model call, none per chunk"
  # One sample per call, each compared with the estimate of its own request.
  finals = [e.usage_metadata.prompt_token_count for e in events if not e.partial and e.usage_metadata]
  assert len(finals) == 2
  state = (await _session(runner, s.id)).state
  cal = state[CALIBRATION_KEY]["models"]["offline-model"]
  assert cal["samples"] == 2
  assert (cal["last_estimate"], cal["last_actual"]) == (docs[1]["runtime"]["request_tokens_estimate"], finals[1])
  snap = docs[1]["runtime"]["calibration"]
  assert (snap["last_estimate"], snap["last_actual"]) == (docs[0]["runtime"]["request_tokens_estimate"], finals[0])

  # Partial chunks are never history: the next turn sees the call, its result and the whole answer once.
  await _run(runner, s.id, "And tomorrow?", sse)
  stored = (await _session(runner, s.id)).events
  assert not any(e.partial for e in stored)
  nxt = model.received[-1]
  assert [c.role for c in nxt.contents] == ["user", "model", "user", "model", "user"]
  assert nxt.contents[3].parts[0].text == "It is 21 degrees and clear in Oslo today, a fine day for a walk."
  assert (await manifests(runner, s.id))[-1]["tail"]["history_len"] == 3  # user turn, call+result group, answer
  assert LAST_FAULT_KEY not in (await _session(runner, s.id)).state


# ------------------------------------------------------------------ planners
SIG_THOUGHT, SIG_CALL, SIG_EMPTY = b"sig-thought-\x00\x01", b"sig-call-\xff", b"sig-empty-\x7f"
THINKING = "I should look the city up before answering, then compare with the season. " * 4


def _thinking_call(request):
  return types.Content(role="model", parts=[
      types.Part(text=THINKING, thought=True, thought_signature=SIG_THOUGHT),
      types.Part(function_call=types.FunctionCall(name="lookup", args={"city": "Oslo"}), thought_signature=SIG_CALL),
  ])


def _thinking_answer(request):
  turn = sum(1 for c in request.contents if c.role == "user")
  return types.Content(role="model", parts=[
      types.Part(text=f"Reasoning about turn {turn}: " + "weigh the tool result against the question. " * 6, thought=True),
      types.Part(text="", thought_signature=SIG_EMPTY + bytes([turn])),
      types.Part(text=f"Answer {turn}: " + "it is mild and clear in Oslo, with a light breeze off the fjord. " * 6),
  ])


async def test_thought_parts_and_signatures_are_sent_unchanged_costed_and_kept_out_of_the_request_text():
  model = OfflineLlm(script=[_thinking_call], default=_thinking_answer)
  thinking = types.ThinkingConfig(include_thoughts=True, thinking_budget=512)
  ag, _ = agent(model=model, tools=[lookup], planner=BuiltInPlanner(thinking_config=thinking))
  rec = Recorder()
  runner = make_runner(ag, [rec, ContextPackPlugin(window=1400)])
  s = await new_session(runner)
  await say(runner, s.id, "What is the weather in Oslo?")
  for t in range(6):
    await say(runner, s.id, f"Follow-up {t}: and what about later today?")
  # A user turn that carries a thought part: it is the user's, sent as is, but not request text.
  await say(runner, s.id, "Last one: should I bring a coat?", parts=[types.Part(text="PRIVATE-NOTE", thought=True)])

  docs = await manifests(runner, s.id)
  _costed(docs, model.received)
  trimmed = 0
  for original, sent in zip(rec.requests, model.received):
    assert sent.config.thinking_config == thinking
    kept = _kept_in_order(original, sent)
    trimmed += len(kept) + 1 < len(original.contents)
    # A kept model turn travels whole: no thought, signature or part dropped or moved.
    sigs = [p.thought_signature for i in kept for p in original.contents[i].parts if p.thought_signature]
    assert sigs == [p.thought_signature for c in sent.contents for p in c.parts if p.thought_signature]
  assert trimmed >= 2, "the window trimmed old turns"
  # The in-flight step (thought + signed call) rides the tool loop's second call exactly as returned.
  assert model.received[1].contents[1] == _thinking_call(None)
  # ADK sends the thoughts back (``_costed`` above: the estimates cover their text).
  assert any(p.thought and p.text for c in rec.requests[2].contents for p in c.parts)
  last = model.received[-1]
  payload = next(c for c in last.contents if _is_payload(c))
  assert payload.parts[0].text.endswith(VERBATIM + "Last one: should I bring a coat?")
  assert "PRIVATE-NOTE" not in payload.parts[0].text
  assert payload.parts[1:] == [types.Part(text="PRIVATE-NOTE", thought=True)]
  assert LAST_FAULT_KEY not in (await _session(runner, s.id)).state


async def test_plan_react_history_is_sent_as_adk_rewrote_it_and_keeps_its_events_provenance():
  """ADK splits a PlanReAct answer into thought-marked planning parts and the answer,
  then sends them back with the thought flags cleared: a request copy no longer
  equals its event. The plugin sends ADK's copy, and still dates it by its event."""
  model = OfflineLlm(default=lambda request: (
      "/*PLANNING*/\n1. Recall what was asked.\n/*REASONING*/\nThe user wants a short answer.\n"
      f"/*FINAL_ANSWER*/\nShort answer number {len(request.contents)}."))
  ag, _ = agent(model=model, planner=PlanReActPlanner())
  rec = Recorder()
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(ag, [rec, plugin])
  s = await new_session(runner)
  for t in range(3):
    await say(runner, s.id, f"Question {t}?")

  stored = (await _session(runner, s.id)).events
  answers = [e for e in stored if e.author == "assistant"]
  assert answers and all(any(p.thought for p in e.content.parts) for e in answers), "ADK marked the planning as thought"
  for original, sent in zip(rec.requests, model.received):
    assert "/*PLANNING*/" in sent.config.system_instruction  # ADK's planning instruction, inside the budget
    assert len(_kept_in_order(original, sent)) + 1 == len(original.contents)
    assert not any(p.thought for c in sent.contents for p in c.parts)
  _costed(await manifests(runner, s.id), model.received)
  (cache,) = plugin._sessions.values()
  by_id = {e.id: e for e in stored}
  groups = cache.compiler.history
  assert [g.role for g in groups] == ["user", "model", "user", "model"]
  for g in groups:
    event = by_id[g.provenance.source]
    assert g.provenance.timestamp == event.timestamp
    assert g.provenance.author == ("user" if g.role == "user" else "assistant")


# ------------------------------------------------------------- code executors
async def test_built_in_code_execution_parts_ride_whole_and_are_costed(monkeypatch):
  monkeypatch.setenv("ADK_DISABLE_GEMINI_MODEL_ID_CHECK", "1")  # BuiltInCodeExecutor checks for a Gemini name
  code = "rows = [n * n for n in range(40)]\nprint(sum(rows), rows[:20])"
  output = "20540 " + str([n * n for n in range(20)]) + "\n"

  def solve(request):
    turn = sum(1 for c in request.contents if c.role == "user")
    return types.Content(role="model", parts=[
        types.Part(text=f"Turn {turn}: let me compute that."),
        types.Part(executable_code=types.ExecutableCode(language="PYTHON", code=code + f"  # turn {turn}")),
        types.Part(code_execution_result=types.CodeExecutionResult(outcome="OUTCOME_OK", output=output * 8)),
        types.Part(text="The sum of the first forty squares is 20540."),
    ])

  model = OfflineLlm(default=solve)
  ag, _ = agent(model=model, code_executor=BuiltInCodeExecutor())
  rec = Recorder()
  runner = make_runner(ag, [rec, ContextPackPlugin(window=2600)])
  s = await new_session(runner)
  for t in range(8):
    await say(runner, s.id, f"Question {t}: sum the first forty squares.")

  docs = await manifests(runner, s.id)
  _costed(docs, model.received)
  trimmed = 0
  for original, sent in zip(rec.requests, model.received):
    assert any(t.code_execution is not None for t in sent.config.tools)
    kept = _kept_in_order(original, sent)
    trimmed += len(kept) + 1 < len(original.contents)
    for c in sent.contents:
      if any(p.executable_code for p in c.parts):  # code, result and text stay one content, in order
        assert [bool(p.executable_code) for p in c.parts] == [False, True, False, False]
        assert c.parts[2].code_execution_result.output == output * 8
  assert trimmed >= 2


def _tool_code_reply(request):
  last = request.contents[-1]
  if last.role == "user" and (last.parts[0].text or "").startswith("```tool_output"):
    return "Done: " + "the rows printed above are all accounted for. " * 8
  return "Computing.\n```tool_code\nprint('row ' * 150)\n```"


async def test_local_code_result_is_never_cut_from_the_code_that_produced_it():
  """ADK sends a local executor's result as a user text after the model's code.
  Trimmed as a turn of its own, the tail could start with output whose code
  was dropped."""
  model = OfflineLlm(default=_tool_code_reply)
  ag, _ = agent(model=model, code_executor=UnsafeLocalCodeExecutor())
  rec = Recorder()
  runner = make_runner(ag, [rec, ContextPackPlugin(window=2000)])
  s = await new_session(runner)
  for t in range(12):
    await say(runner, s.id, f"Turn {t}: print the rows again.")

  assert len(model.received) == 24  # code, then the answer after its result, each turn
  docs = await manifests(runner, s.id)
  _costed(docs, model.received)
  trimmed = 0
  for n, (original, sent) in enumerate(zip(rec.requests, model.received)):
    kept = _kept_in_order(original, sent)
    trimmed += len(kept) + 1 < len(original.contents)
    for i, c in enumerate(sent.contents):
      if c.role == "user" and (c.parts[0].text or "").startswith("```tool_output\n"):
        assert "row row" in c.parts[0].text, "the code really ran"
        assert i > 0 and sent.contents[i - 1].parts[-1].text.startswith("```tool_code\n"), f"call {n}: orphan result at {i}"
  assert trimmed >= 6


# ------------------------------------------------------------- input blobs
def _photo(name=None) -> types.Part:
  return types.Part(inline_data=types.Blob(mime_type="image/png", data=png_bytes(800, 600), display_name=name))


async def test_input_blob_saved_as_artifact_is_listed_once_and_the_request_text_kept_verbatim():
  """``RunConfig(save_input_blobs_as_artifacts=True)``: honoured by the Runner's agent
  path (a workflow agent at the root); the image becomes an artifact and a placeholder."""
  ag, model = agent()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    root = SequentialAgent(name="flow", sub_agents=[ag])
    config = RunConfig(save_input_blobs_as_artifacts=True)
  rec = Recorder()
  runner = make_runner(root, [rec, ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    await _run(runner, s.id, "What is in this picture?", config, parts=[_photo()])

  (original,), (sent,) = rec.requests, model.received
  (placeholder,) = [p for p in original.contents[-1].parts[1:]]
  assert placeholder.text.startswith("Uploaded file: artifact_") and not any(
      p.inline_data for c in sent.contents for p in c.parts)
  key = placeholder.text.split(": ", 1)[1].split(".", 1)[0]
  payload = sent.contents[-1]
  assert payload.parts[0].text.endswith(VERBATIM + "What is in this picture?")
  assert payload.parts[1:] == [placeholder]
  assert f"artifact://{key}" in payload.parts[0].text.split("EVIDENCE:")[1].split("MEMORY:")[0]
  # The placeholder is sent (and charged) once; no image is charged for it.
  sent_text = "".join(p.text or "" for c in sent.contents for p in c.parts)
  assert sent_text.count(placeholder.text) == 1
  (doc,) = await manifests(runner, s.id)
  assert doc["runtime"]["request_tokens_estimate"] == count_request(sent.contents, sent.config, get_counter())
  assert independent_tokens(sent) <= doc["runtime"]["request_tokens_estimate"] < independent_tokens(sent) + 258
  assert f"artifact://{key}" in doc["artifact_uris"]


async def test_input_blob_under_an_llm_agent_root_and_with_the_artifacts_plugin():
  """At an LlmAgent root ADK 2.13 ignores the deprecated flag (the image reaches the
  model inline, and is charged); ``SaveFilesAsArtifactsPlugin`` is its replacement."""
  ag, model = agent()
  runner = make_runner(ag, [ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    await _run(runner, s.id, "What is in this picture?", RunConfig(save_input_blobs_as_artifacts=True), parts=[_photo()])
  sent = model.received[-1]
  assert sent.contents[-1].parts[1].inline_data is not None
  assert (await manifests(runner, s.id))[-1]["runtime"]["request_tokens_estimate"] >= independent_tokens(sent)

  ag, model = agent()
  runner = make_runner(ag, [SaveFilesAsArtifactsPlugin(), ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  await say(runner, s.id, "What is in this picture?", parts=[_photo("harbour.png")])
  await say(runner, s.id, "Describe it again.")
  first, second = model.received
  assert first.contents[-1].parts[0].text.endswith(VERBATIM + "What is in this picture?")
  assert first.contents[-1].parts[1:] == [types.Part(text='[Uploaded Artifact: "harbour.png"]')]
  for req in (first, second):
    assert "artifact://harbour.png" in payload_of(req).split("EVIDENCE:")[1].split("MEMORY:")[0]
    assert not any(p.inline_data for c in req.contents for p in c.parts)
  # The next turn's history carries the user's turn as stored: text and placeholder.
  assert second.contents[0].parts == [types.Part(text="What is in this picture?"),
                                      types.Part(text='[Uploaded Artifact: "harbour.png"]')]
  _costed(await manifests(runner, s.id), model.received)


# ------------------------------------------------------------- max_llm_calls
async def test_max_llm_calls_mid_tool_loop_leaves_no_manifest_or_estimate_for_the_refused_call():
  """ADK counts a call after the before-model callbacks: the call past the limit
  is refused after the plugin ran. A pack for it is never sent, so it must not
  leave a manifest, a tail hint or an estimate behind."""
  model = OfflineLlm(script=[tool_call("lookup", {"city": "Oslo"}), tool_call("lookup", {"city": "Bergen"}),
                             tool_call("lookup", {"city": "Tromso"})], default="All three are mild today.")
  ag, _ = agent(model=model, tools=[lookup])
  plugin = ContextPackPlugin(window=8192)
  runner = make_runner(ag, [plugin])
  s = await new_session(runner)
  with pytest.raises(LlmCallsLimitExceededError):
    await _run(runner, s.id, "Weather in Oslo, Bergen and Tromso?", RunConfig(max_llm_calls=2))

  assert len(model.received) == 2
  docs = await manifests(runner, s.id)
  assert len(docs) == 2, "no manifest for the refused call"
  # One record per call that went out, each answered; none for the refused call.
  assert len(plugin._calls) == 2 and all(c.observed for c in plugin._calls.values())
  state = (await _session(runner, s.id)).state
  assert state[LAST_PACK_KEY]["version"] == 1 and state[LAST_PACK_KEY]["pack_id"] == docs[-1]["pack_id"]
  assert state[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 2

  # The next turn calibrates each call against its own estimate.
  await say(runner, s.id, "Just Oslo, then.")
  docs = await manifests(runner, s.id)
  assert len(docs) == len(model.received) == 4
  for prev, nxt in zip(docs, docs[1:]):
    assert nxt["runtime"]["calibration"]["last_estimate"] == prev["runtime"]["request_tokens_estimate"]
  state = (await _session(runner, s.id)).state
  assert state[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 4
  assert LAST_FAULT_KEY not in state and plugin.faults == 0
