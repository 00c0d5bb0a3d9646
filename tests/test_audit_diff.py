"""``diff`` between calls of a growing session, checked against what the model really received.

The cache-break byte is checked independently: the test renders the requests
the OfflineLlm recorded (its own code, from the live ``LlmRequest`` objects,
not from stored inputs) and finds their common prefix by a plain loop.
"""

from __future__ import annotations

import asyncio
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from google.adk.artifacts import FileArtifactService
from google.genai import types

from aether_frame.audit.diff import context_diff
from aether_frame.audit.replay import new_rebuilds, rebuild
from aether_frame.audit.source import open_location
from aether_frame.cli import main
from aether_frame.core.request_text import common_prefix_len, request_text
from tests.fixtures.audit_session import APP, USER, run_session


def _cj(v) -> str:
  return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def render_live(req) -> str:
  """The documented layout, built from a live LlmRequest (one content = one segment;
  a system Content's non-text parts follow its text, as one segment)."""
  si = req.config.system_instruction
  if isinstance(si, types.Content):
    media = [p.model_dump(mode="json", exclude_none=True) for p in si.parts if p.text is None]
    out = [f"<<system>>\n{si.parts[0].text}\n"] + ([f"<<system>>\n{_cj(media)}\n"] if media else [])
  else:
    out = [f"<<system>>\n{si}\n"]
  for tool in req.config.tools or ():
    for d in tool.function_declarations or ():
      out.append(f"<<tool>>\n{_cj(d.model_dump(mode='json', exclude_none=True))}\n")
  for c in req.contents:
    out.append(f"<<{c.role}>>\n{_cj([p.model_dump(mode='json', exclude_none=True) for p in c.parts])}\n")
  return "".join(out)


async def rebuild_all(root):
  """Every call of the one session stored under ``root``, rebuilt from its stored inputs."""
  src = open_location(str(root))
  ref = (await src.sessions())[0]
  rebuilds = new_rebuilds()
  return [await rebuild(src, c, rebuilds=rebuilds) for c in await src.calls(ref)]


def naive_common_prefix(a: bytes, b: bytes) -> int:
  for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
      return i
  return min(len(a), len(b))


@settings(max_examples=200)
@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=9000))
def test_common_prefix_len_matches_a_plain_loop(a, b, shared):
  assert common_prefix_len(shared + a, shared + b) == naive_common_prefix(shared + a, shared + b)


def test_the_rendering_puts_instruction_contents_where_the_request_carries_them(tmp_path):
  """A static instruction's file rides first and the dynamic instruction just before the
  user turn; the rebuilt rendering (and so the cache-break byte) must put them there too."""
  root = tmp_path / "artifacts"
  static = types.Content(role="user", parts=[
      types.Part(text="You are a static helper."),
      types.Part(inline_data=types.Blob(mime_type="text/plain", data=b"HANDBOOK: refunds need a receipt. " * 60)),
  ])
  run = asyncio.run(run_session(FileArtifactService(str(root)), 8, tools=False, window=3072, static_instruction=static))
  live = [render_live(r) for r in run.model.received]
  assert len(live) == 8 and run.plugin.faults == 0

  rebuilt = asyncio.run(rebuild_all(root))
  assert len(rebuilt) == len(live)
  for rb, sent in zip(rebuilt, live):
    assert rb.pack.manifest["prefix_sha256"] == rb.call.doc["prefix_sha256"]
    assert request_text(rb.inputs, rb.pack) == sent


def test_the_prefix_hash_covers_the_instruction_contents(tmp_path):
  """Two agents that differ only in a static instruction file send different cached prefixes."""
  def first_manifest(data: bytes) -> dict:
    static = types.Content(role="user", parts=[types.Part(text="Helper."), types.Part(
        inline_data=types.Blob(mime_type="text/plain", data=data))])
    run = asyncio.run(run_session(FileArtifactService(str(tmp_path / data.decode()[:4])), 1, tools=False,
                                  window=3072, static_instruction=static))
    return run.documents[0]

  a, b = first_manifest(b"AAAA handbook"), first_manifest(b"BBBB handbook")
  assert a["input_sha256"] != b["input_sha256"]
  assert a["prefix_sha256"] != b["prefix_sha256"]


def test_diff_of_consecutive_calls_finds_the_cache_break(tmp_path, capsys):
  root = tmp_path / "artifacts"
  run = asyncio.run(run_session(FileArtifactService(str(root)), 16, tools=False, window=3072))
  live = [render_live(r).encode("utf-8") for r in run.model.received]
  assert len(live) == 16 and run.plugin.faults == 0

  calls = asyncio.run(rebuild_all(root))
  assert len(calls) == len(live)
  # The rendering rebuilt from stored inputs is byte-for-byte the request the model received.
  for rb, sent in zip(calls, live):
    assert request_text(rb.inputs, rb.pack).encode("utf-8") == sent

  trimmed = 0
  for i in range(1, len(calls)):
    d = context_diff(calls[i - 1], calls[i])
    expected = naive_common_prefix(live[i - 1], live[i])
    assert d.cache.break_byte == expected == d.cache.common_prefix_bytes
    assert d.cache.tokens_after == calls[i].counter.count(live[i][expected:].decode("utf-8", errors="ignore"))
    assert d.total_delta == d.tokens_b - d.tokens_a == sum(ld.delta for ld in d.layers)
    conv = next(ld for ld in d.layers if ld.layer == "conversation")
    assert {r.id for r in conv.added} == set(calls[i].pack.conversation_ids) - set(calls[i - 1].pack.conversation_ids)
    if conv.removed:  # the tail was trimmed: the break moves into the conversation, near its start
      trimmed += 1
      assert d.cache.segment.startswith("conversation ")
    else:  # append-only: all of A up to its payload stays cached; B breaks in its first new turn
      payload_seg = ("<<user>>\n" + _cj([{"text": calls[i - 1].pack.payload}]) + "\n").encode()
      assert live[i - 1].endswith(payload_seg) and expected >= len(live[i - 1]) - len(payload_seg)
      assert d.cache.segment == f"conversation {conv.added[0].id}"
  assert trimmed >= 1, "the 3072-token window should force at least one trim in 16 long turns"

  # The CLI: two calls of one session (LOCATION A B), and two manifests by reference.
  sess = root / "apps" / APP / "users" / USER / "sessions" / run.session_id
  assert main(["diff", str(sess), "14", "15"]) == 0
  out = capsys.readouterr().out
  want = naive_common_prefix(live[14], live[15])
  assert f"cache break at byte {want} of B ({len(live[15])} bytes" in out
  assert re.search(r"^conversation\s+\d+\s+\d+\s+[+-]\d+", out, re.M) and "utilisation: A " in out
  assert main(["diff", f"{sess}@3", f"{sess}@4", "--json"]) == 0
  d = json.loads(capsys.readouterr().out)
  assert d["cache"]["break_byte"] == naive_common_prefix(live[3], live[4])
  assert {x["layer"] for x in d["layers"]} == {"system", "task", "tools", "evidence", "memory", "conversation"}
  assert 0 < d["utilization_a"] < 1 and 0 < d["utilization_b"] < 1
