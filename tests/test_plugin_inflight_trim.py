"""One invocation that outgrows the window on its own, through a real Runner.

Everything after the invocation's user turn was an in-flight step, pinned and
never trimmed: a ``LoopAgent`` iterating in one invocation (or a long tool
loop) grew until the pinned steps alone overflowed the window, and from then
on every call faulted and went out unpacked, at twice the window. Complete
steps are now trimmed oldest first (after older history), in chunks, while
the payload stays on the user turn and the latest step and open calls stay.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings

from google.adk.agents import LlmAgent, LoopAgent
from google.adk.artifacts import FileArtifactService
from google.adk.plugins.base_plugin import BasePlugin

from aether_frame.adk.guard import check_request
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from aether_frame.offline_model import OfflineLlm, tool_call
from aether_frame.tokenizers import get_counter
from tests.adk_support import fits, make_runner, manifests, new_session, payload_of, say

WINDOW = 8192


def _pack_text(req) -> str:
  return next(p.text for c in req.contents for p in c.parts or () if (p.text or "").startswith("CONTEXT PACK v1"))


def _sent_steps(doc) -> list[str]:
  return [i for i in doc["tail"]["inflight_ids"] if i.startswith("inflight:")]


def test_a_long_loop_agent_run_is_trimmed_in_chunks_and_stays_packed(tmp_path):
  async def go():
    writer_model = OfflineLlm(default="Draft revision: " + "the harbour design gains berths and cranes. " * 20)
    critic_model = OfflineLlm(default="Critique: " + "needs more on tides and dredging depth. " * 20)
    writer = LlmAgent(name="writer", model=writer_model, instruction="Improve the draft.")
    critic = LlmAgent(name="critic", model=critic_model, instruction="Critique the draft.")
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      loop = LoopAgent(name="loop", sub_agents=[writer, critic], max_iterations=30)
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(loop, [plugin], artifact_service=FileArtifactService(str(tmp_path / "store")))
    s = await new_session(runner)
    await say(runner, s.id, "Design a harbour.")
    assert plugin.faults == 0
    docs = await manifests(runner, s.id)
    assert len(docs) == 60  # every call packed
    for model in (writer_model, critic_model):
      assert len(model.received) == 30
      for req in model.received:
        assert "Design a harbour." in _pack_text(req).rsplit("USER REQUEST (VERBATIM):\n", 1)[1]
        fits(req, WINDOW, docs[0]["reserve"])
        assert check_request(req.contents, req.config, get_counter(), usable=10**9).ok
    for agent in ("writer", "critic"):
      mine = [d for d in docs if d["agent"] == agent]
      dropped = [e for e in mine[-1]["truncation_events"] if e["layer"] == "conversation" and "in-flight" in e["reason"]]
      assert dropped and sum(len(e["item_ids"]) for e in dropped) >= 10  # older iterations left, named
      rows = {r["id"]: r for r in mine[-1]["items"]}
      assert all(rows[i]["status"] == "dropped" for e in dropped for i in e["item_ids"])
      # Chunks: the oldest step sent moves on a few calls, not on every one.
      firsts = [_sent_steps(d)[0] for d in mine if _sent_steps(d)]
      moves = sum(1 for a, b in zip(firsts, firsts[1:]) if a != b)
      assert 1 <= moves <= len(mine) // 3, moves
    reports = await replay(open_location(str(tmp_path / "store")))
    assert [r.status for r in reports] == ["identical"] * 60
  asyncio.run(go())


def _reader(pages: int = 40) -> tuple[LlmAgent, OfflineLlm]:
  """An agent that reads ``pages`` pages, one tool call each, in one invocation."""
  counter = itertools.count()

  def reply(req):
    n = next(counter)
    return tool_call("fetch_page", {"page": n}, f"c{n}") if n < pages else "All pages read."

  def fetch_page(page: int) -> dict:
    """Returns one page of the report."""
    return {"page": page, "text": f"Page {page}: " + "quarterly figures and their notes. " * 30}

  model = OfflineLlm(default=reply)
  return LlmAgent(name="reader", model=model, instruction="Read the report.", tools=[fetch_page]), model


def test_a_long_tool_loop_keeps_its_open_step_and_trims_finished_ones():
  async def go():
    agent, model = _reader()
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(agent, [plugin])
    s = await new_session(runner)
    await say(runner, s.id, "Read the whole report.")
    assert plugin.faults == 0
    assert len(model.received) == 41
    docs = await manifests(runner, s.id)
    for req, doc in zip(model.received, docs):
      fits(req, WINDOW, doc["reserve"])
      assert check_request(req.contents, req.config, get_counter(), usable=10**9).ok
      # The latest step (the call just answered) is always sent, right after its call.
      last = req.contents[-1].parts[0].function_response
      if last is not None:
        assert req.contents[-2].parts[0].function_call.id == last.id
    assert any("in-flight" in e["reason"] for e in docs[-1]["truncation_events"])
    assert "omitted" in _pack_text(model.received[-1]).split("BUDGET", 1)[1].split("\n", 2)[1]
  asyncio.run(go())


def test_a_cold_worker_keeps_the_in_flight_cut_a_warm_one_made():
  """The cut's hysteresis lived in the process only: a worker without the session's cache
  (evicted, another worker, a second thread) trimmed again on every call, moving the
  cached prefix each time. It is kept in state, like the history's cut."""
  def run(evict: bool):
    plugin = ContextPackPlugin(window=WINDOW)

    class Evictor(BasePlugin):
      async def before_model_callback(self, *, callback_context, llm_request):
        plugin._sessions.clear()  # as if another worker took every call
        return None

    async def go():
      agent, model = _reader()
      runner = make_runner(agent, [Evictor("evictor"), plugin] if evict else [plugin])
      s = await new_session(runner)
      await say(runner, s.id, "Read the whole report.")
      return [[c.model_dump(mode="json", exclude_none=True) for c in r.contents] for r in model.received]
    return asyncio.run(go())

  warm, cold = run(False), run(True)
  responses = [sum(1 for c in req for p in c["parts"] if "function_response" in p) for req in warm]
  assert responses[-1] < 40, "no step was trimmed: nothing was tested"
  assert len(warm) == 41 and warm == cold


def _paging_reply(pages: int):
  """A model that asks for the page after the one it was just given, up to ``pages``."""
  def reply(req):
    last = next((p.function_response for p in req.contents[-1].parts or () if p.function_response), None)
    n = 0 if last is None else last.response["page"] + 1
    return tool_call("fetch_page", {"page": n}, f"c{n}") if n < pages else "All pages read."
  return reply


def _parallel_readers(model: OfflineLlm, fetch_page) -> tuple:
  """A workflow that runs one agent as two ``parallel_worker`` lanes, and its plugin."""
  from google.adk.workflow import START, Workflow

  worker = LlmAgent(name="worker", model=model, instruction="Read the item.", tools=[fetch_page], parallel_worker=True)
  plugin = ContextPackPlugin(window=WINDOW)

  def split(node_input: str) -> list:
    return ["one", "two"]

  return make_runner(Workflow(name="wf", edges=[(START, split, worker)]), [plugin]), plugin


def test_parallel_runs_of_one_agent_cut_their_own_steps():
  """Two ``parallel_worker`` runs of one agent in one invocation: the run with short pages
  fits and must send every step, whatever the run with long pages had to trim."""
  from google.adk.tools import ToolContext

  def fetch_page(page: int, tool_context: ToolContext) -> dict:
    """Returns one page of the item."""
    long = str(tool_context._invocation_context.branch).endswith("@1")
    return {"page": page, "text": f"Page {page}: " + "quarterly figures and their notes. " * (30 if long else 2)}

  async def go():
    runner, plugin = _parallel_readers(OfflineLlm(default=_paging_reply(40)), fetch_page)
    s = await new_session(runner)
    await say(runner, s.id, "Read the items.")
    assert plugin.faults == 0
    trimmed, whole = 0, 0
    for d in await manifests(runner, s.id):
      steps = [r for r in d["items"] if r["id"].startswith("inflight:")]
      dropped = [r for r in steps if r["status"] == "dropped"]
      if steps and max(r["tokens"] for r in steps) > 150:
        trimmed += bool(dropped)
      elif steps:
        assert not dropped, f"the short run dropped {len(dropped)} steps it had room for"
        whole += 1
    assert trimmed and whole >= 30
    lanes = {d.get("lane") for d in await manifests(runner, s.id)}
    assert len(lanes) == 2 and None not in lanes  # each run's manifests say which run they are
  asyncio.run(go())


def test_a_blocked_call_takes_its_in_flight_cut_back():
  """A guardrail after the plugin answers the first call whose pack trims steps: no model
  saw that cut, so the state must not keep it for the next call."""
  from google.adk.models.llm_response import LlmResponse

  from aether_frame.adk.state_schema import steps_key

  key = steps_key("reader")
  seen: list = []

  class Spy(BasePlugin):
    async def before_model_callback(self, *, callback_context, llm_request):
      seen.append(callback_context.state.get(key))

  class Guardrail(BasePlugin):
    async def before_model_callback(self, *, callback_context, llm_request):
      if blocked and len(seen) - 1 == blocked[0]:
        return LlmResponse(content=tool_call("fetch_page", {"page": 999}, "guard"))

  async def go(block_at):
    seen.clear()
    blocked[:] = [block_at] if block_at is not None else []
    agent, _ = _reader()
    plugin = ContextPackPlugin(window=WINDOW)
    runner = make_runner(agent, [Spy("spy"), plugin, Guardrail("guardrail")])
    s = await new_session(runner)
    await say(runner, s.id, "Read the whole report.")
    return list(seen)

  blocked: list = []
  free = asyncio.run(go(None))
  first_cut = next(i for i, v in enumerate(free) if v is not None) - 1  # the call that first wrote a cut
  taken = asyncio.run(go(first_cut))
  assert taken[first_cut + 1] is None, "the blocked call's cut stayed in state"


def test_an_invocation_resumed_by_its_first_worker_keeps_the_cut_another_moved():
  """One invocation pauses on a long-running checkpoint at calls 20 and 28. Worker B
  resumes the middle segment and trims finished steps further; worker A resumes the
  last. A's cache still held its own older cut for that invocation and preferred it to
  the state's, re-trimming from it: every call must be what one worker sends."""
  from google.adk.artifacts import InMemoryArtifactService
  from google.adk.platform import time as platform_time
  from google.adk.platform import uuid as platform_uuid
  from google.adk.sessions import InMemorySessionService
  from google.adk.tools.long_running_tool import LongRunningFunctionTool

  from tests.adk_support import APP, USER
  from tests.test_adk_session_services import _pin_clock
  from tests.test_adk_workflow import _answer, _resumable_runner, _run, _text

  def paused_reader():
    counter = itertools.count()

    def reply(req):
      n = next(counter)
      if n in (20, 28):
        return tool_call("checkpoint", {"at": n}, f"c{n}")
      return tool_call("fetch_page", {"page": n}, f"c{n}") if n < 40 else "All pages read."

    def fetch_page(page: int) -> dict:
      """Returns one page of the report."""
      return {"page": page, "text": f"Page {page}: " + "quarterly figures and their notes. " * 60}

    def checkpoint(at: int) -> dict:
      """Waits for a human checkpoint."""
      return None

    model = OfflineLlm(default=reply)
    return LlmAgent(name="reader", model=model, instruction="Read the report.",
                    tools=[fetch_page, LongRunningFunctionTool(checkpoint)]), model

  async def go(workers: list[int]) -> list[list[dict]]:
    """Segment ``s`` of the invocation is served by worker ``workers[s]`` (its own
    plugin and Runner; one session and artifact service, as two processes share)."""
    agent, model = paused_reader()
    sessions, artifacts = InMemorySessionService(), InMemoryArtifactService()
    runners: dict = {}

    def runner_for(w: int):
      if w not in runners:
        runners[w] = _resumable_runner(agent, [ContextPackPlugin(window=WINDOW)], sessions, artifacts)
      return runners[w]

    try:
      _pin_clock(0)
      await sessions.create_session(app_name=APP, user_id=USER, session_id="s")
      invocation = (await _run(runner_for(workers[0]), "s", _text("Read the whole report.")))[0].invocation_id
      for segment, at in enumerate((20, 28), start=1):
        _pin_clock(segment)
        await _run(runner_for(workers[segment]), "s", _answer("checkpoint", f"c{at}", {"ok": True}), invocation)
    finally:
      platform_time.reset_time_provider()
      platform_uuid.reset_id_provider()
    return [[c.model_dump(mode="json", exclude_none=True) for c in r.contents] for r in model.received]

  single, shared = asyncio.run(go([0, 0, 0])), asyncio.run(go([0, 1, 0]))
  assert len(single) == len(shared) == 41
  responses = [sum(1 for c in req for p in c["parts"] if "function_response" in p) for req in single]
  assert min(responses[21:]) < max(responses[21:]), "no step was trimmed after the first pause: nothing was tested"
  for n, (one, two) in enumerate(zip(single, shared)):
    assert two == one, f"call {n}"


def test_a_lane_sends_the_same_steps_however_another_lanes_calls_interleave():
  """Two ``parallel_worker`` lanes both trim their steps. A lane's state writes land when its
  model answers; kept under one key per agent, lane 1's slow answer wrote back lane 2's
  older cut, and lane 2 re-trimmed from it. Each lane's requests must not depend on how
  long the other lane's model takes."""
  from google.adk.tools import ToolContext

  from aether_frame.adk.state_schema import steps_key

  def fetch_page(page: int, tool_context: ToolContext) -> dict:
    """Returns one page of the item."""
    return {"page": page, "lane": str(tool_context._invocation_context.branch)[-1],
            "text": f"Page {page}: " + "quarterly figures and their notes. " * 30}

  class Stalling(OfflineLlm):
    """Lane 1's answer to page 40 waits until lane 2 has read page 80."""
    async def generate_content_async(self, llm_request, stream=False):
      last = next((p.function_response for p in llm_request.contents[-1].parts or () if p.function_response), None)
      if stall and last is not None:
        if last.response["lane"] == "2" and last.response["page"] == 80:
          lane_2_ahead.set()
        if last.response["lane"] == "1" and last.response["page"] == 40:
          await asyncio.wait_for(lane_2_ahead.wait(), timeout=60)
      async for r in super().generate_content_async(llm_request, stream):
        yield r

  async def go():
    model = Stalling(default=_paging_reply(90))
    runner, plugin = _parallel_readers(model, fetch_page)
    s = await new_session(runner)
    await say(runner, s.id, "Read the items.")
    assert plugin.faults == 0
    by_lane: dict = {}
    for req in model.received:
      pages = [p.function_response.response for c in req.contents for p in c.parts or () if p.function_response]
      if pages:
        by_lane.setdefault(pages[-1]["lane"], []).append([c.model_dump(mode="json", exclude_none=True) for c in req.contents])
    state = (await runner.session_service.get_session(app_name=s.app_name, user_id=s.user_id, session_id=s.id)).state
    return by_lane, sorted(k for k in state if k.startswith(steps_key("worker")))

  stall, lane_2_ahead = False, None
  free, free_keys = asyncio.run(go())
  stall = True

  async def stalled():
    nonlocal lane_2_ahead
    lane_2_ahead = asyncio.Event()
    return await go()
  stalled_run, keys = asyncio.run(stalled())
  assert sorted(free) == ["1", "2"] and all(len(v) == 90 for v in free.values())
  steps = [sum(1 for c in req for p in c["parts"] if "function_response" in p) for req in free["2"]]
  assert max(steps[80:]) < 80, "lane 2 must trim its steps after page 80: nothing was tested"
  for lane in ("1", "2"):
    for n, (one, two) in enumerate(zip(free[lane], stalled_run[lane], strict=True)):
      assert two == one, f"lane {lane}, call {n}"
  assert len(keys) == len(free_keys) == 2, keys  # one in-flight cut per lane


def test_a_loop_whose_window_holds_few_more_steps_than_recent_turns_trims_in_chunks():
  """The low-water cut would eat into the last ``recent_turns`` steps: the cut goes as
  deep as they allow. It used to drop one step per iteration, so every call's cached
  prefix broke right after the payload."""
  async def go():
    drafts = itertools.count()
    model = OfflineLlm(default=lambda req: f"Draft {next(drafts)}: " + "a line of verse about the sea. " * 15)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      loop = LoopAgent(name="loop", sub_agents=[LlmAgent(name="w", model=model)], max_iterations=16)
    plugin = ContextPackPlugin(window=1500)
    runner = make_runner(loop, [plugin])
    s = await new_session(runner, state={"plan": {"goal": "Write a poem", "step": "iterate", "acceptance": ["short"]}})
    await say(runner, s.id, "Write.")
    assert plugin.faults == 0 and len(model.received) == 16
    oldest = [next((p.text.split(":")[0] for c in req.contents if c.role == "model" for p in c.parts or () if p.text),
                   None) for req in model.received]
    moves = [i for i in range(2, len(oldest)) if oldest[i] != oldest[i - 1]]
    assert moves, oldest  # the fixture must overflow
    assert len(moves) <= 4, oldest  # was a move on every call once the window filled
    for req in model.received:
      fits(req, 1500, 0)
  asyncio.run(go())


def test_inspect_says_the_budget_line_leaves_out_the_invocations_steps(tmp_path, capsys):
  """inspect printed 'total 1192 (93% of usable; BUDGET line said 15%)' with nothing to say the
  BUDGET line counts the pack and the history before it, not the steps after the pack."""
  from aether_frame import cli

  def lookup(q: str) -> dict:
    """Looks a thing up."""
    return {"q": q, "answer": "forty two " * 200}

  async def go():
    model = OfflineLlm(script=[tool_call("lookup", {"q": "x"}), "Done."])
    ag = LlmAgent(name="a", model=model, tools=[lookup])
    runner = make_runner(ag, [ContextPackPlugin(window=WINDOW)], artifact_service=FileArtifactService(str(tmp_path)))
    s = await new_session(runner)
    await say(runner, s.id, "Look it up.")
    return await manifests(runner, s.id)

  first, second = asyncio.run(go())
  assert not first["tail"]["inflight_ids"] and second["tail"]["inflight_ids"]
  rows = []
  for version in (0, 1):
    assert cli.main(["inspect", f"{tmp_path}@{version}"]) == 0
    rows.append(next(ln for ln in capsys.readouterr().out.splitlines() if "BUDGET line said" in ln))
  assert "before this invocation's steps" not in rows[0]
  assert f"BUDGET line said {second['totals']['pct_used']}%, before this invocation's steps)" in rows[1]
