"""``Runner.rewind_async`` through a real Runner, with a second worker.

A rewind appends an event; ADK then leaves the rewound invocations out of
the contents. A plugin that did not see the calls in between (another worker
served them) recognized an append-only history by its first and last
contents: after a rewind and new turns with the same replies, both matched
while the middle had changed.
"""

from __future__ import annotations

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import USER, Recorder, agent, independent_tokens, make_runner, manifests, new_session, say


def _texts(contents) -> list[str]:
  return [f"{c.role}:{''.join(p.text or '' for p in c.parts or ())}" for c in contents]


def _history(request) -> list[str]:
  out = []
  for t in _texts(request.contents):
    if t.startswith("user:CONTEXT PACK v1"):
      break
    out.append(t)
  return out


async def test_a_worker_that_missed_a_rewind_compiles_the_history_adk_sends():
  model = OfflineLlm(default="ok")  # the same reply every turn: the ends of two histories can match
  ag, _ = agent(model=model)
  rec_a, rec_b = Recorder(), Recorder()
  worker_a = make_runner(ag, [rec_a, ContextPackPlugin(window=100_000)])
  ag_b, _ = agent(model=model)
  worker_b = make_runner(ag_b, [rec_b, ContextPackPlugin(window=100_000)], session_service=worker_a.session_service,
                         artifact_service=worker_a.artifact_service)
  session = await new_session(worker_a)
  for t in range(4):
    await say(worker_a, session.id, f"turn {t}")
  # Worker B rewinds before turn 2 and serves new turns until the history is as long as A last saw.
  stored = await worker_a.session_service.get_session(app_name=worker_a.app_name, user_id=USER, session_id=session.id)
  turn2 = next(e.invocation_id for e in stored.events if e.author == "user" and e.content.parts[0].text == "turn 2")
  await worker_b.rewind_async(user_id=USER, session_id=session.id, rewind_before_invocation_id=turn2)
  for t in ("other 2 " + "with a long attachment pasted in. " * 300, "other 3"):
    await say(worker_b, session.id, t)
  # A's last call saw [turn 0, ok, turn 1, ok, turn 2, ok] plus its turn; so does this one, by length and ends.
  await say(worker_a, session.id, "turn 5")
  sent, original = model.received[-1], rec_a.requests[-1]
  assert any(t.startswith("user:other 2") for t in _texts(original.contents))
  assert "user:turn 2" not in _texts(original.contents)
  assert _history(sent) == _texts(original.contents)[:-1]
  doc = (await manifests(worker_a, session.id))[-1]
  assert doc["tail"]["history_len"] == len(original.contents) - 1
  # The compiler costs the history ADK sent (the long "other 2"), not the rewound "turn 2".
  history_tokens = independent_tokens(original.model_copy(update={"contents": original.contents[:-1]}))
  assert doc["layers"]["conversation"]["requested"] >= history_tokens - 4 * len(original.contents)
