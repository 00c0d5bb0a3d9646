"""Pending calls and the anchored user turn, through a real ADK Runner.

``OfflineLlm`` is not an id-pairing model, so ADK strips its ``adk-`` client
call ids before the request is built, as it does for Gemini: calls and
responses reach the plugin with ``id=None`` and pair by tool name only.
"""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from aether_frame.adk import sources
from aether_frame.adk.guard import check_request, pending_calls
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter

from tests.adk_support import USER, Recorder, agent, make_runner, manifests, new_session, say
from tests.test_plugin_e2e import PNG_1X1, _dump, _pack_text, _payload_index, get_weather

COUNTER = get_counter()
FILLER = "Notes on vendor pricing, support tiers and rollout dates for the comparison. " * 8


def _jobs(finished: set[str]):
  """A long-running tool: the named jobs finish at once, the others stay pending."""

  def long_job(x: str) -> dict:
    """Starts a long job."""
    return {"status": "done", "job": x} if x in finished else None

  return LongRunningFunctionTool(long_job)


def _calls(content: types.Content) -> list[tuple[str, dict]]:
  return [(p.function_call.name, dict(p.function_call.args or {})) for p in content.parts or () if p.function_call]


def _has_call(contents, name: str, args: dict) -> bool:
  return any((name, args) in _calls(c) for c in contents)


def _fc(*xs: str) -> types.Content:
  """One model turn calling ``long_job`` once per ``x`` (no id: ADK assigns an ``adk-`` one)."""
  return types.Content(role="model", parts=[
      types.Part(function_call=types.FunctionCall(name="long_job", args={"x": x})) for x in xs
  ])


def _guard(doc: dict) -> dict:
  return doc["runtime"]["guard"]


async def alpha_done_beta_pending(plugin: ContextPackPlugin):
  """A session where long job alpha finished and beta is still running; the model answers "4" next.
  Returns (runner, session, model, recorder): the recorder keeps each request as it came."""
  model = OfflineLlm(script=[_fc("alpha"), "alpha finished.", _fc("beta"), "beta is running.", "4"])
  ag, _ = agent(model=model, tools=[_jobs({"alpha"})])
  recorder = Recorder()
  runner = make_runner(ag, [recorder, plugin])
  session = await new_session(runner)
  await say(runner, session.id, "start job alpha")
  await say(runner, session.id, "start job beta")
  return runner, session, model, recorder


async def test_a_pending_long_running_call_keeps_the_history():
  """The reviewer's repro: an earlier answered call to the same tool must not make the
  pending one look answered, which failed the guard and sent the minimal pack."""
  plugin = ContextPackPlugin(window=100_000)
  runner, session, model, recorder = await alpha_done_beta_pending(plugin)
  await say(runner, session.id, "meanwhile, what's 2+2?")

  orig, sent = recorder.requests[-1], model.received[-1]
  assert all(p.function_call.id is None for c in orig.contents for p in c.parts or () if p.function_call)
  assert _has_call(orig.contents, "long_job", {"x": "beta"})
  doc = (await manifests(runner, session.id))[-1]
  assert _guard(doc) == {"ok": True, "problems": [], "fallback": False}
  # With a 100k window the whole history goes out, the pending call included.
  p = _payload_index(sent)
  assert p == len(orig.contents) - 1
  assert _dump(sent.contents[:p]) == _dump(orig.contents[:p])
  assert _pack_text(sent).endswith("USER REQUEST (VERBATIM):\nmeanwhile, what's 2+2?")
  # Grouped the way the plugin groups it, the pending call is pinned and the answered one is not.
  history = orig.contents[:p]
  fps = [sources.fingerprint(c) for c in history]
  groups = [sources.group_item(history, span, COUNTER, None, fps)
            for span in sources.group_spans(history)]
  pinned = {tuple(g.meta["span"]): g.pinned for g in groups}
  beta = next(i for i, c in enumerate(history) if ("long_job", {"x": "beta"}) in _calls(c))
  alpha = next(i for i, c in enumerate(history) if ("long_job", {"x": "alpha"}) in _calls(c))
  assert pinned[(beta, beta + 1)] is True
  assert pinned[(alpha, alpha + 2)] is False
  assert plugin.faults == 0


@pytest.mark.parametrize("restarted", [False, True], ids=["warm", "restarted"])
@pytest.mark.parametrize("parallel", [False, True], ids=["single", "parallel"])
async def test_a_pending_call_is_pinned_when_the_history_is_trimmed(parallel, restarted):
  """Under a tight window older turns are trimmed, but never the pending call.

  ``parallel``: beta and gamma are called in one turn; gamma is answered,
  beta stays pending in the same group. ``restarted``: the last message goes
  through a new plugin (a new process), which groups the whole history at once.
  """
  pending_turn = _fc("beta", "gamma") if parallel else _fc("beta")
  script = [_fc("alpha"), "alpha finished.", pending_turn, "beta is running."] + [f"Reply {t}. " + FILLER for t in range(10)]
  model = OfflineLlm(script=script, default="4")
  ag, _ = agent(model=model, tools=[_jobs({"alpha", "gamma"})])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=2048)
  runner = make_runner(ag, [recorder, plugin])
  session = await new_session(runner)
  await say(runner, session.id, "start job alpha")
  await say(runner, session.id, "start jobs" if parallel else "start job beta")
  for t in range(10):
    await say(runner, session.id, f"Turn {t}: " + FILLER)
  if restarted:
    model = OfflineLlm(default="4")
    ag, _ = agent(model=model, tools=[_jobs({"alpha", "gamma"})])
    plugin = ContextPackPlugin(window=2048)
    runner = make_runner(ag, [recorder, plugin], session_service=runner.session_service,
                         artifact_service=runner.artifact_service)
  await say(runner, session.id, "meanwhile, what's 2+2?")

  orig, sent = recorder.requests[-1], model.received[-1]
  p = _payload_index(sent)
  doc = (await manifests(runner, session.id))[-1]
  assert _guard(doc)["ok"] and not _guard(doc)["fallback"], _guard(doc)
  # The history was trimmed: the answered alpha call and early filler are gone ...
  assert len(sent.contents) < len(orig.contents)
  assert not _has_call(sent.contents, "long_job", {"x": "alpha"})
  # ... but the pending call is still there, pinned, with its answered sibling and that answer.
  assert _has_call(sent.contents[:p], "long_job", {"x": "beta"})
  pinned = [r for r in doc["items"] if r["kind"] == "pending"]
  assert len(pinned) == 1 and pinned[0]["status"] == "included", pinned
  if parallel:
    resp = next(c for c in sent.contents[:p] if sources.has_response(c))
    assert [q.function_response.response for q in resp.parts] == [{"status": "done", "job": "gamma"}]
  assert pending_calls(orig.contents) == frozenset({"name:long_job"})
  assert check_request(sent.contents, sent.config, COUNTER, usable=doc["usable"], pending=pending_calls(orig.contents)).ok
  assert plugin.faults == 0


async def test_parallel_calls_to_one_tool_pair_one_for_one():
  """Two calls to one tool in one turn, both answered in one turn, ids stripped: each
  response closes one call, so the guard passes and the history is kept."""
  parallel = types.Content(role="model", parts=[
      types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": city})) for city in ("Paris", "Oslo")
  ])
  model = OfflineLlm(script=[parallel, "Paris 21, Oslo 21.", "Both mild."])
  ag, _ = agent(model=model, tools=[get_weather])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(ag, [recorder, plugin])
  session = await new_session(runner)
  await say(runner, session.id, "Weather in Paris and Oslo?")
  await say(runner, session.id, "Which is warmer?")

  orig, sent = recorder.requests[-1], model.received[-1]
  resp = next(c for c in orig.contents if sources.has_response(c))
  assert [q.function_response.name for q in resp.parts] == ["get_weather", "get_weather"]
  assert all(q.function_response.id is None for q in resp.parts)
  assert pending_calls(orig.contents) == frozenset()
  doc = (await manifests(runner, session.id))[-1]
  assert _guard(doc) == {"ok": True, "problems": [], "fallback": False}
  p = _payload_index(sent)
  assert _dump(sent.contents[:p]) == _dump(orig.contents[:p])
  assert not any(r["kind"] == "pending" for r in doc["items"])
  assert plugin.faults == 0


def test_pending_calls_pair_in_order_and_count_each_open_call():
  """A response answers the latest open call with its key, and one pending ``long_job``
  does not excuse a second open one."""
  call = types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name="long_job", args={}))])
  resp = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(name="long_job", response={}))])
  user = types.Content(role="user", parts=[types.Part(text="next")])
  original = [user, call, user, call, resp, user]  # the first call is still pending
  pending = pending_calls(original)
  assert pending == frozenset({"name:long_job"})
  config = types.GenerateContentConfig()
  assert check_request(original, config, COUNTER, usable=10_000, pending=pending).ok
  # Dropping the response leaves two calls open where the original had one.
  broken = [user, call, user, call, user]
  assert check_request(broken, config, COUNTER, usable=10_000, pending=pending).problems == [
      "function_call name:long_job#2 lost its function_response"
  ]


# ------------------------------------------------------------- anchored turn
async def test_an_image_only_message_after_a_transfer_is_the_user_request():
  """After a transfer the helper's request holds ADK's "For context:" transcript of the
  router as later user-role contents. The user's message has no text; it, not the
  transcript, is the request."""
  helper_model = OfflineLlm(default="A small image.")
  helper = LlmAgent(name="helper", model=helper_model, instruction="You describe images.", description="Handles images.")
  root_model = OfflineLlm(script=[tool_call("transfer_to_agent", {"agent_name": "helper"})])
  root = LlmAgent(name="router", model=root_model, instruction="You route requests.", sub_agents=[helper])
  recorder = Recorder()
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(root, [recorder, plugin])
  session = await new_session(runner)
  image = types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG_1X1))
  async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=types.Content(role="user", parts=[image])):
    pass

  orig, sent = recorder.requests[-1], helper_model.received[-1]
  assert orig.contents[0].parts[0].inline_data.data == PNG_1X1
  assert orig.contents[1].parts[0].text.startswith("For context:")
  p = _payload_index(sent)
  assert p == 0
  payload = sent.contents[p]
  request = payload.parts[0].text.split("USER REQUEST (VERBATIM):", 1)[1]
  assert "For context" not in request and "transfer_to_agent" not in request
  # The image rides with the payload; the transcript follows it unchanged, as in-flight context.
  assert len(payload.parts) == 2 and payload.parts[1].inline_data.data == PNG_1X1
  assert _dump(sent.contents[p + 1:]) == _dump(orig.contents[1:])
  assert plugin.faults == 0


def test_the_anchor_fallback_skips_other_agents_context():
  """Without a matching user content the anchor falls back to the last human turn,
  which is never ADK's relay of another agent's output (1.x or 2.x wording)."""
  image = types.Content(role="user", parts=[types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG_1X1))])
  relay_1x = types.Content(role="user", parts=[
      types.Part(text="For context:"), types.Part(text="[router] called tool `transfer_to_agent` with parameters: {}"),
  ])
  relay_2x = types.Content(role="user", parts=[
      types.Part(text=sources.OTHER_AGENT_CONTEXT_PREAMBLE), types.Part(text="[router] said:\n<<<BEGIN_QUOTED_AGENT_CONTENT>>>"),
      types.Part(inline_data=types.Blob(mime_type="image/png", data=PNG_1X1)),
  ])
  contents = [types.Content(role="user", parts=[types.Part(text="hi")]), types.Content(role="model", parts=[types.Part(text="hello")]),
              image, relay_1x, relay_2x]
  assert sources.anchor_index(contents) == 2
  assert sources.anchor_index(contents, image.model_copy(deep=True)) == 2
  # A user who types "For context: ..." is still the user.
  typed = types.Content(role="user", parts=[types.Part(text="For context: I run the Oslo office.")])
  assert sources.anchor_index(contents + [typed]) == 5


def test_group_spans_pair_by_order_per_key():
  """Grouping pairs as the guard does: a response joins the latest open call with its
  key (across contents in between), and only a call left open is pinned."""
  def call(*names, cid=None):
    return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=n, id=cid)) for n in names])

  def resp(*names, cid=None):
    return types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(name=n, id=cid, response={})) for n in names
    ])

  user = types.Content(role="user", parts=[types.Part(text="go")])
  contents = [user, call("x"), user, call("x"), resp("x"), call("x", "x"), resp("x", "x"), call("y", cid="c9"), user,
              resp("y", cid="c9"), user]
  spans = sources.group_spans(contents)
  assert spans == [(0, 1), (1, 2), (2, 3), (3, 5), (5, 7), (7, 10), (10, 11)]
  fps = [sources.fingerprint(c) for c in contents]
  pinned = [s for s in spans if sources.group_item(contents, s, COUNTER, None, fps).pinned]
  assert pinned == [(1, 2)]
  assert sources.unanswered_calls(contents) == [(1, "name:x")]


@pytest.mark.parametrize("parallel", [False, True], ids=["single", "parallel"])
async def test_the_synced_historys_open_calls_give_the_pending_calls_of_a_whole_walk(parallel, monkeypatch):
  """The rewrite pairs calls from the ledger kept with the synced history, walking only what
  came after it (a whole-request walk per call grew with the session). On every call of a
  trimmed chat with answered, pending and parallel calls, a rewind and a restarted plugin,
  it gives what walking the whole request gives."""
  checked = _pending_checked_against_a_whole_walk(monkeypatch)
  pending_turn = _fc("beta", "gamma") if parallel else _fc("beta")
  script = [_fc("alpha"), "alpha finished.", pending_turn, "beta is running."]
  for t in range(8):
    script += [_fc(f"job{t}"), f"Reply {t}. " + FILLER]
  model = OfflineLlm(script=script, default="4")
  ag, _ = agent(model=model, tools=[_jobs({"alpha", "gamma", *(f"job{t}" for t in range(0, 8, 2))})])
  plugin = ContextPackPlugin(window=2048)
  runner = make_runner(ag, [plugin])
  session = await new_session(runner)
  await say(runner, session.id, "start job alpha")
  await say(runner, session.id, "start jobs" if parallel else "start job beta")
  for t in range(8):
    await say(runner, session.id, f"Turn {t}: " + FILLER)
  # A rewind drops the last turns: the next sync starts over from the stored session.
  stored = await runner.session_service.get_session(app_name=runner.app_name, user_id=USER, session_id=session.id)
  invocations = list(dict.fromkeys(e.invocation_id for e in stored.events))
  await runner.rewind_async(user_id=USER, session_id=session.id, rewind_before_invocation_id=invocations[-2])
  await say(runner, session.id, "after the rewind")
  restarted = ContextPackPlugin(window=2048)
  runner = make_runner(ag, [restarted], session_service=runner.session_service, artifact_service=runner.artifact_service)
  await say(runner, session.id, "meanwhile, what's 2+2?")
  assert len(checked) == len(model.received) >= 14  # a long job that stays pending ends its turn
  assert sum(1 for c in checked if c) >= 10  # beta (and odd jobs) stay pending on most calls
  assert plugin.faults == restarted.faults == 0


async def test_call_ids_that_change_mid_session_resync_the_pending_call_ledger(monkeypatch):
  """The ledger kept with the synced history pairs calls by id. When the history's ids change (the
  agent's model changed from one ADK strips ids for to one it keeps them for, or a plugin before
  this one sets them), the history re-syncs, and the pending calls stay a whole walk's."""
  from google.adk.plugins.base_plugin import BasePlugin

  checked = _pending_checked_against_a_whole_walk(monkeypatch)

  class SetIds(BasePlugin):  # from the sixth call on, the pending call (mid-history by then) has an id
    def __init__(self):
      super().__init__("set_ids")
      self.calls = 0

    async def before_model_callback(self, *, callback_context, llm_request):
      self.calls += 1
      if self.calls < 6:
        return None
      for content in llm_request.contents:
        for part in content.parts or ():
          if part.function_call is not None and part.function_call.args.get("x") == "beta":
            part.function_call = part.function_call.model_copy(update={"id": "id-beta"})
      return None

  script = [_fc("alpha"), "alpha finished.", _fc("beta"), "beta is running."] + [f"Reply {t}." for t in range(4)]
  model = OfflineLlm(script=script, default="4")
  ag, _ = agent(model=model, tools=[_jobs({"alpha"})])
  plugin = ContextPackPlugin(window=100_000)
  runner = make_runner(ag, [SetIds(), plugin])
  session = await new_session(runner)
  for text in ("start job alpha", "start job beta", "one", "two", "three"):
    await say(runner, session.id, text)
  assert len(checked) == len(model.received) >= 6
  assert checked[-1] == frozenset({"id-beta"}), checked  # beta, now by its id
  docs = await manifests(runner, session.id)
  assert all(_guard(d)["ok"] and not _guard(d)["fallback"] for d in docs), [_guard(d) for d in docs]
  assert plugin.faults == 0


def _pending_checked_against_a_whole_walk(monkeypatch) -> list[frozenset]:
  """Makes the plugin check each call's pending calls from its ledger against a walk of the whole
  request (a mismatch faults that call); returns the list the checked results go to."""
  from aether_frame.adk import plugin as plugin_module

  checked: list[frozenset] = []
  incremental = plugin_module._pending_calls

  def both(cache, contents, convo, anchor, outside):
    got = incremental(cache, contents, convo, anchor, outside)
    assert got == pending_calls(contents), (got, pending_calls(contents))
    checked.append(got)
    return got

  monkeypatch.setattr(plugin_module, "_pending_calls", both)
  return checked
