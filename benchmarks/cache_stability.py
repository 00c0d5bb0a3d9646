"""Reusable-prefix share of successive model requests in one 8K-window chat.

The same deterministic chat (60 turns of varied length) is sent through:

- ``none``: a plain ADK Runner, no trimming (reference only: it overflows 8K);
- ``adk-filter``: ADK's ``ContextFilterPlugin(num_invocations_to_keep=K)``, K the
  largest that keeps every request of this chat within the budget;
- ``langchain``: LangChain's ``trim_messages`` (strategy "last", system kept,
  starting on a human turn) applied to each full request, with our o200k count
  as its token counter (only if ``langchain-core`` is importable; it is not a
  project dependency);
- ``ours``: ``ContextPackPlugin(window=8192)``.

Every request is what a scripted ``OfflineLlm`` received through a real ADK
Runner (LangChain's trim is applied to the requests of the ``none`` run).
A request is rendered canonically as segments - the system instruction, then
each content as role + canonical JSON of its parts - each tokenized with
o200k_base. For every call after the first: share = (longest common token
prefix with the previous request) / (previous request's tokens). The budget for
the baselines is the window minus our output reserve (10%), i.e. what ours may
use.

  python benchmarks/cache_stability.py
  python benchmarks/cache_stability.py --turns 60 --window 8192 --seed 11
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import statistics
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk import sources
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.core.canonical import canonical_json
from aether_frame.core.costing import count_content
from aether_frame.core.policy import PackPolicy
from aether_frame.offline_model import OfflineLlm
from aether_frame.tokenizers import get_counter
from _args import at_least
from compile_bench import synth_text  # run as a script: benchmarks/ is on sys.path

APP, USER = "cachebench", "u1"
INSTRUCTION = (
    "You are a helpful assistant for a small logistics company. Answer briefly, cite order numbers, "
    "and ask for clarification when a request is ambiguous."
)


# -- the chat -------------------------------------------------------------------


def make_chat(turns: int, seed: int) -> tuple[list[str], list[str]]:
  """(user messages, model replies): short and long turns mixed, deterministic."""
  rng = random.Random(seed)
  users, replies = [], []
  for i in range(turns):
    long_user = rng.random() < 0.15
    users.append(f"Turn {i + 1}. " + synth_text(rng, 150, 400) if long_user else f"Turn {i + 1}. " + synth_text(rng, 10, 90))
    long_reply = rng.random() < 0.25
    replies.append(synth_text(rng, 200, 500) if long_reply else synth_text(rng, 30, 200))
  return users, replies


async def run_chat(users: Sequence[str], replies: Sequence[str], plugins: list) -> list[Any]:
  """Runs the chat through a real ADK Runner; returns the requests the model received."""
  model = OfflineLlm(script=list(replies), report_usage=True)
  agent = LlmAgent(name="assistant", model=model, instruction=INSTRUCTION)
  runner = Runner(
      app=App(name=APP, root_agent=agent, plugins=plugins),
      session_service=InMemorySessionService(),
      artifact_service=InMemoryArtifactService(),
  )
  session = await runner.session_service.create_session(app_name=APP, user_id=USER)
  for text in users:
    msg = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=msg):
      pass
  return list(model.received)


# -- canonical rendering --------------------------------------------------------


@dataclass
class Rendered:
  segments: list[str]
  tokens: list[list[int]]

  @property
  def total(self) -> int:
    return sum(len(t) for t in self.tokens)


class Renderer:
  """Canonical linear rendering, one tokenized segment per system/content."""

  def __init__(self):
    counter = get_counter("o200k_base")
    enc = getattr(counter, "_encoding", None)
    if enc is None:
      raise SystemExit("cache_stability needs tiktoken's o200k_base (set TIKTOKEN_CACHE_DIR)")
    self._encode = enc.encode_ordinary
    self._memo: dict[str, list[int]] = {}

  def _tok(self, s: str) -> list[int]:
    t = self._memo.get(s)
    if t is None:
      t = self._memo[s] = self._encode(s)
    return t

  def render(self, system: str, contents: Sequence[types.Content]) -> Rendered:
    segs = [f"system\n{system}\n"]
    for c in contents:
      parts = [p.model_dump(mode="json", exclude_none=True) for p in c.parts or ()]
      segs.append(f"{c.role}\n{canonical_json(parts)}\n")
    return Rendered(segs, [self._tok(s) for s in segs])

  def request(self, req) -> Rendered:
    system = sources.system_text(req.config) if req.config is not None else ""
    return self.render(system, list(req.contents or []))


def common_prefix(a: Rendered, b: Rendered) -> int:
  """Longest common token prefix of two renderings."""
  n = 0
  for sa, sb, ta, tb in zip(a.segments, b.segments, a.tokens, b.tokens):
    if sa == sb:
      n += len(ta)
      continue
    for x, y in zip(ta, tb):
      if x != y:
        break
      n += 1
    break
  return n


@dataclass
class Row:
  method: str
  calls: int
  mean_share: float
  median_share: float
  over_share: float
  breaks: int
  mean_tokens: float
  max_tokens: int
  note: str = ""


def score(method: str, rendered: list[Rendered], over: Sequence[bool], note: str = "") -> Row:
  """``over[i]``: call i's untrimmed history exceeds the budget (trimming must happen)."""
  shares = [common_prefix(prev, cur) / prev.total for prev, cur in zip(rendered, rendered[1:])]
  late = [s for s, o in zip(shares, over[1:]) if o]
  return Row(
      method, len(rendered), statistics.fmean(shares), statistics.median(shares),
      statistics.fmean(late) if late else float("nan"), sum(1 for s in shares if s < 0.5),
      statistics.fmean(r.total for r in rendered), max(r.total for r in rendered), note,
  )


# -- baselines ------------------------------------------------------------------


def request_tokens(system: str, contents: Sequence[types.Content], counter) -> int:
  """Our o200k request count (system + MESSAGE_OVERHEAD + parts per content)."""
  return counter.count(system) + sum(count_content(sources.content_dict(c), counter) for c in contents)


def largest_keep(full_requests: list[Any], budget: int, counter) -> int:
  """Largest num_invocations_to_keep that keeps every request of this chat within ``budget``."""
  from google.adk.plugins.context_filter_plugin import _get_invocation_start_indices

  best = 0
  for keep in range(1, len(full_requests) + 1):
    ok = True
    for req in full_requests:
      contents = list(req.contents)
      starts = _get_invocation_start_indices(contents)
      if len(starts) >= keep + 1:
        contents = contents[starts[-keep]:]
      if request_tokens(sources.system_text(req.config), contents, counter) > budget:
        ok = False
        break
    if not ok:
      break
    best = keep
  return best


def langchain_trim(full_requests: list[Any], budget: int, counter, renderer: Renderer) -> Optional[list[Rendered]]:
  """Applies trim_messages to each full request; maps kept messages back to the ADK contents."""
  try:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages
  except ImportError:
    return None

  def text_of(c: types.Content) -> str:
    return "".join(p.text or "" for p in c.parts or ())

  def count_messages(messages) -> int:
    total = 0
    for m in messages:
      total += counter.count(m.content) if isinstance(m, SystemMessage) else 4 + counter.count(m.content)
    return total

  out = []
  for req in full_requests:
    system = sources.system_text(req.config)
    contents = list(req.contents)
    msgs = [SystemMessage(content=system, id="system")]
    for i, c in enumerate(contents):
      cls = HumanMessage if c.role == "user" else AIMessage
      msgs.append(cls(content=text_of(c), id=str(i)))
    kept = trim_messages(msgs, max_tokens=budget, token_counter=count_messages, strategy="last",
                         include_system=True, start_on="human", allow_partial=False)
    idx = [int(m.id) for m in kept if m.id != "system"]
    out.append(renderer.render(system, [contents[i] for i in idx]))
  return out


# -- main -----------------------------------------------------------------------


async def amain(args) -> int:
  logging.getLogger("google_adk").setLevel(logging.ERROR)
  counter = get_counter("o200k_base")
  renderer = Renderer()
  users, replies = make_chat(args.turns, args.seed)
  reserve = math.ceil(PackPolicy().floors.slack_min * args.window)
  budget = args.window - reserve

  full = await run_chat(users, replies, [])
  full_r = [renderer.request(r) for r in full]
  keep = largest_keep(full, budget, counter)
  keep_note = f"num_invocations_to_keep={keep}"
  if keep == 0:  # not even the last invocation alone fits: the filter's tightest setting
    keep, keep_note = 1, "num_invocations_to_keep=1 (no value keeps every request within the budget)"
  filtered = await run_chat(users, replies, [ContextFilterPlugin(num_invocations_to_keep=keep)])
  ours_plugin = ContextPackPlugin(window=args.window)
  ours = await run_chat(users, replies, [ours_plugin])

  over = [request_tokens(sources.system_text(r.config), list(r.contents), counter) > budget for r in full]
  rows = [score("none (full history)", full_r, over, f"reference only: max {max(r.total for r in full_r)} tokens")]
  rows.append(score("ADK ContextFilterPlugin", [renderer.request(r) for r in filtered], over,
                    keep_note))
  lc = langchain_trim(full, budget, counter, renderer)
  if lc is None:
    print("langchain-core not importable: LangChain trim_messages skipped")
  else:
    import langchain_core

    rows.append(score("LangChain trim_messages", lc, over, f"langchain-core {langchain_core.__version__}, max_tokens={budget}"))
  ours_r = [renderer.request(r) for r in ours]
  rows.append(score("ours: ContextPackPlugin", ours_r, over, f"window={args.window}, faults={ours_plugin.faults}"))
  payload_share = statistics.fmean(len(r.tokens[-1]) / r.total for r in ours_r)

  chat_tokens = sum(counter.count(t) for t in users + replies)
  print(f"cache_stability: {args.turns} turns ({chat_tokens} o200k tokens of chat text), window {args.window}, "
        f"baseline budget {budget} (window - {reserve} output reserve), seed {args.seed}")
  print("share = longest common token prefix with the previous request / previous request's tokens")
  print(f"'over budget' = the {sum(over[1:])} calls whose untrimmed history exceeds the budget\n")
  hdr = (f"{'method':<26} {'calls':>5} {'mean share':>10} {'median':>7} {'over budget':>11} {'<50%':>5} "
         f"{'mean tok':>8} {'max tok':>7}  note")
  print(hdr)
  print("-" * len(hdr))
  for r in rows:
    print(f"{r.method:<26} {r.calls:>5} {r.mean_share:>10.3f} {r.median_share:>7.3f} {r.over_share:>11.3f} "
          f"{r.breaks:>5} {r.mean_tokens:>8.0f} {r.max_tokens:>7}  {r.note}")
  print("(tokens: o200k of the canonical rendering; mean share over all calls after the first, and over the "
        "over-budget calls only)")
  ours_row = rows[-1]
  print()
  def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 and not math.isnan(a) else "n/a"

  for r in rows[1:-1]:
    print(f"ours / {r.method}: {ratio(ours_row.mean_share, r.mean_share)} mean share, "
          f"{ratio(ours_row.over_share, r.over_share)} over budget")
  if ours_plugin.faults:
    print(f"WARNING: ours faulted on {ours_plugin.faults} calls (those requests went out unmodified): "
          "its row does not measure the plugin")
  print(f"ours: the pack payload (last message, rebuilt every call) is on average {payload_share:.0%} of the request,"
        f" so a call's share is at most ~{1 - payload_share:.0%} even without a trim")
  return 1 if ours_plugin.faults else 0



def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--turns", type=at_least(2), default=60)
  ap.add_argument("--window", type=at_least(1), default=8192)
  ap.add_argument("--seed", type=int, default=11)
  return asyncio.run(amain(ap.parse_args(argv)))


if __name__ == "__main__":
  sys.exit(main())
