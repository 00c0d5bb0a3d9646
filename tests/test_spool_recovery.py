"""The spool gets out of a healthy store's way, and says what it is doing.

Found by the crash-consistency review, each checked on a real Runner with
ADK's FileArtifactService and a spool folder:
- a spool whose lock cannot be opened (a read-only disk) held every new
  manifest behind its old entries, though the store took writes: they were
  held in memory, then lost, and the log blamed the store;
- one damaged entry stopped every flush for good, each new manifest spooled
  behind it, and the error naming it was never logged;
- a second outage in one process was spooled without a log line.
"""

from __future__ import annotations

import logging

from aether_frame.audit.spool import DAMAGED_DIR, Spool
from tests.fixtures.audit_session import say, start_session, turns
from tests.test_leftovers_audit import _break, _mend, _setup, _stored


async def _two_spooled(tmp_path, n_turns: int):
  """A run whose first two manifests were spooled while the store was down, then mended."""
  svc, store_root, blocker, writer, runner, plugin = _setup(tmp_path)
  sid = await start_session(runner)
  texts = turns(n_turns, tools=False)
  _break(store_root)
  for t in texts[:2]:
    await say(runner, sid, t)
  assert writer.stats["spooled"] == 2 and len(writer.spool.pending()) == 2
  _mend(store_root)
  return svc, writer, runner, plugin, sid, texts


async def test_a_spool_that_cannot_be_locked_does_not_hold_back_a_working_store(tmp_path, caplog):
  svc, writer, runner, plugin, sid, texts = await _two_spooled(tmp_path, 6)
  spool = writer.spool
  lock = spool.root / ".lock"
  lock.unlink(missing_ok=True)
  lock.mkdir()  # the lock file cannot be opened (as on a read-only disk); the entries can be read
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.manifest_store"):
    for t in texts[2:5]:
      await say(runner, sid, t)
  stored = [d["pack_id"] for d in await _stored(svc, sid)]
  assert stored == [d["pack_id"] for d in writer.documents[2:5]]  # straight to the store
  assert writer.stats["held"] == 0 and writer.stats["lost"] == 0 and plugin.faults == 0
  errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
  assert len(errors) == 1 and "cannot be used" in errors[0] and "2 manifests wait" in errors[0], errors
  lock.rmdir()
  await say(runner, sid, texts[5])  # the spool works again: its two go first, then this call's
  stored = [d["pack_id"] for d in await _stored(svc, sid)]
  assert sorted(stored) == sorted(d["pack_id"] for d in writer.documents) and len(stored) == 6
  assert stored[3:] == [writer.documents[i]["pack_id"] for i in (0, 1, 5)]
  assert spool.pending() == []


async def test_a_damaged_spool_entry_is_set_aside_and_the_rest_flows(tmp_path, caplog):
  svc, writer, runner, plugin, sid, texts = await _two_spooled(tmp_path, 5)
  spool = writer.spool
  first, second = spool.pending()
  first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])  # half written by a dying disk
  with caplog.at_level(logging.WARNING, logger="aether_frame.adk.manifest_store"):
    for t in texts[2:5]:
      await say(runner, sid, t)
  stored = [d["pack_id"] for d in await _stored(svc, sid)]
  assert stored == [d["pack_id"] for d in writer.documents[1:5]]  # all but the damaged one, in order
  assert spool.pending() == []
  aside = spool.root / DAMAGED_DIR / first.name
  assert aside.exists() and not first.exists()  # kept for a look, out of the way
  errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
  assert len(errors) == 1 and first.name in errors[0] and str(aside) in errors[0], errors
  assert Spool(spool.root).paths() == []  # never listed as an entry again


async def test_a_second_outage_is_reported_again_and_the_flush_is_logged(tmp_path, caplog):
  svc, store_root, blocker, writer, runner, plugin = _setup(tmp_path)
  sid = await start_session(runner)
  texts = turns(6, tools=False)
  with caplog.at_level(logging.INFO, logger="aether_frame.adk.manifest_store"):
    _break(store_root)
    await say(runner, sid, texts[0])
    _mend(store_root)
    await say(runner, sid, texts[1])
    _break(store_root)
    await say(runner, sid, texts[2])
    _mend(store_root)
    await say(runner, sid, texts[3])
  lines = [r.getMessage() for r in caplog.records]
  spooled = [m for m in lines if "spooled to" in m]
  flushed = [m for m in lines if "took 1 spooled context-pack manifests" in m]
  assert len(spooled) == 2, lines  # was 1: the second outage went unreported
  assert len(flushed) == 2, lines
  assert len(await _stored(svc, sid)) == 4 and writer.spool.pending() == []
