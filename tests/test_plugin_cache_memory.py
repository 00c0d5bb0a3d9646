"""The plugin's warm session caches are bounded by memory, not only by count.

A warm cache holds a session's costed history and its recall index: ~85 bytes
per history token (a 10,000-event session: ~84 MB). 256 such sessions would be
~21 GB, so the plugin also evicts the least recently used caches past
``session_cache_bytes``. An evicted session is rebuilt from its events on its
next call, and that pack is the one a warm cache would have sent.
"""

from __future__ import annotations

import pytest

from aether_frame import ContextPackPlugin
from aether_frame.adk import plugin as plugin_mod

from .adk_support import agent, make_runner, manifests, new_session, payload_of, say

_TURN = "Please summarise the shipment record for warehouse {i} and the invoice totals of week {i}. " * 3


def _held(plugin) -> int:
  return sum(c.compiler.history_tokens for c in plugin._sessions.values()) * plugin_mod.CACHE_BYTES_PER_TOKEN


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2GB", None])
def test_session_cache_bytes_is_checked_at_construction(bad):
  with pytest.raises((TypeError, ValueError), match="session_cache_bytes"):
    ContextPackPlugin(window=8192, session_cache_bytes=bad)


async def test_caches_stay_under_the_byte_cap_and_evicted_sessions_still_pack():
  cap = 120_000  # ~1,200 history tokens: about two of the three sessions below
  plugin = ContextPackPlugin(window=32_768, session_cache_bytes=cap)
  a, model = agent()
  runner = make_runner(a, [plugin])
  ids = [(await new_session(runner)).id for _ in range(3)]
  evicted = False
  for turn in range(6):
    for sid in ids:
      await say(runner, sid, _TURN.format(i=f"{sid[:4]}-{turn}"))
      # The session just served always stays; the others go oldest first once over the cap.
      current = max(plugin._sessions.values(), key=lambda c: c.compiler.history_tokens)
      assert _held(plugin) <= max(cap, current.compiler.history_tokens * plugin_mod.CACHE_BYTES_PER_TOKEN)
      evicted = evicted or len(plugin._sessions) < 3
      session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u1", session_id=sid)
      assert "aether_frame:last_fault" not in session.state, session.state.get("aether_frame:last_fault")
  assert evicted, "three growing sessions never passed the cap"
  assert plugin.faults == 0
  # Every call went out as a pack, with its manifest, evicted sessions included.
  assert len(model.received) == 18
  assert all("USER REQUEST (VERBATIM):" in payload_of(r) for r in model.received)
  for sid in ids:
    assert len(await manifests(runner, sid)) == 6


async def test_a_rebuilt_session_sends_the_pack_a_warm_one_would():
  """Two plugins serve the same three sessions (same ids and events): one never evicts,
  one evicts on every turn. Each call's pack input hash and payload are equal."""
  results = []
  for cap in (2**40, 1):
    plugin = ContextPackPlugin(window=4_096, session_cache_bytes=cap)
    a, model = agent()
    runner = make_runner(a, [plugin])
    ids = [(await new_session(runner, session_id=f"s{k}")).id for k in range(3)]
    for turn in range(5):
      for sid in ids:
        await say(runner, sid, _TURN.format(i=f"{sid}-{turn}"))
    docs = [await manifests(runner, sid) for sid in ids]
    results.append((plugin, model, docs))
  (warm, warm_model, warm_docs), (cold, cold_model, cold_docs) = results
  assert len(warm._sessions) == 3 and len(cold._sessions) == 1
  # Event ids differ between the two runs (ADK makes them up); what the pack was built
  # from and how it was budgeted must not.
  for w_docs, c_docs in zip(warm_docs, cold_docs):
    for w, c in zip(w_docs, c_docs):
      assert w["layers"] == c["layers"]
      assert w["tail"]["start"] == c["tail"]["start"] and w["tail"]["kept"] == c["tail"]["kept"]
      assert [(i["kind"], i["status"], i["tokens"]) for i in w["items"]] == [
          (i["kind"], i["status"], i["tokens"]) for i in c["items"]]
  assert [len(r.contents) for r in warm_model.received] == [len(r.contents) for r in cold_model.received]
