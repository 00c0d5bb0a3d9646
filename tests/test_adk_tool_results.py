"""Tool results that are not plain JSON, through a real Runner.

A tool may return a datetime, NaN, bytes, a ``Part`` or text with a lone surrogate (ADK's
``MultimodalToolResultsPlugin`` leaves text parts inside the response). The
provider is sent their JSON dump; the plugin read the raw values for a
group's text, plain ``json.dumps`` refused them, and since the result stays in
the history every later call of the session faulted and went out unpacked.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest
from google.adk.artifacts import FileArtifactService
from google.genai import types

from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit.replay import replay
from aether_frame.audit.source import open_location
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import agent, make_runner, manifests, new_session, payload_of, say

RESULTS = {
    "part": lambda: {"parts": [types.Part(text="a caption")]},
    "datetime": lambda: {"at": datetime.datetime(2024, 1, 1, 9, 30)},
    "nan": lambda: {"score": float("nan"), "rest": float("inf")},
    "bytes": lambda: {"blob": b"\x00\x01binary"},
    # os.listdir of a name that is not UTF-8: a lone surrogate, no UTF-8 form.
    "surrogate": lambda: {"files": [b"report-\xe9t\xe9.txt".decode("utf-8", "surrogateescape"), "half \ud83d emoji"]},
}


@pytest.mark.parametrize("kind", sorted(RESULTS))
def test_a_tool_result_json_refuses_is_packed_now_and_later(kind, tmp_path):
  def probe() -> dict:
    """Returns the probe's reading."""
    return RESULTS[kind]()

  def reply(req):
    if any(p.function_response for p in req.contents[-1].parts or ()):
      return "done"
    return tool_call("probe", {}, "c1") if "use probe" in payload_of(req) else "plain"

  async def go():
    model = OfflineLlm(default=reply)
    plugin = ContextPackPlugin(window=16_000)
    runner = make_runner(agent(model=model, tools=[probe])[0], [plugin],
                         artifact_service=FileArtifactService(str(tmp_path / "store")))
    s = await new_session(runner)
    for text in ("use probe", "next turn", "another turn"):
      await say(runner, s.id, text)
    assert plugin.faults == 0
    assert len(model.received) == 4
    for req in model.received:
      assert any((p.text or "").startswith("CONTEXT PACK v1") for c in req.contents for p in c.parts or ())
    docs = await manifests(runner, s.id)
    assert len(docs) == 4
    tail = docs[-1]["tail"]
    assert tail["history_len"] >= 4 and tail["kept"] == tail["history_len"]  # the tool turn is history now, sent
    reports = await replay(open_location(str(tmp_path / "store")))
    assert [r.status for r in reports] == ["identical"] * 4
  asyncio.run(go())
