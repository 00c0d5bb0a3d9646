"""Append and read latency of session services as sessions grow.

Compares aether-frame's RedisSessionService with ADK's built-in Redis service
(google.adk.integrations.redis.RedisSessionService) on the same throwaway
redis-server, and with ADK's SqliteSessionService on a temp file.

For each size N (100, 1,000, 10,000 events) a session holding N events gets
ROUNDS more appends, each timed alone, then GETS get_session calls with
num_recent_events=50. All sessions of all services are measured interleaved,
in a shuffled order each round, so load from other processes on the machine
hits every size alike. Ours reaches each size through its own append_event.
ADK's services would need O(N^2) work (built-in Redis) or minutes (SQLite)
to get there by appending, so their sessions are written directly in their
own storage format, then measured through their public API.

Ratios: ours at 10,000 / at 100 events (append p50 over all rounds, with the
range over blocks of rounds), and built-in / ours at the built-in's largest
size (median of per-append ratios of appends timed next to each other).

The redis-server and the temp dir (SQLite file) are removed on exit, also on
Ctrl-C and SIGTERM.

  python benchmarks/redis_sessions.py               # about 1-2 minutes, loopback only
  python benchmarks/redis_sessions.py --rounds 60 --gets 20   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path
import random
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.integrations.redis import RedisSessionService as AdkRedis  # noqa: E402
from google.adk.integrations.redis import RedisSessionServiceConfig  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402
import redis.asyncio as redis_asyncio  # noqa: E402

from aether_frame.stores import RedisSessionService  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402

from _args import positive  # benchmarks/ is on sys.path when run as a script

SIZES = (100, 1_000, 10_000)
ROUNDS = 300          # timed appends per (service, size)
BUILTIN_EVERY = 6     # the built-in appends on every 6th round only (~50)
GETS = 100
BUILTIN_MAX_P50_MS = 20.0  # above this at 1,000 events, skip the built-in's 10k
TEXT = ("The user asked about shard rebalancing; the agent checked the "
        "cluster topology, found two hot slots and proposed moving them. ") * 2
APP, USER = "bench", "user"


def make_event(i: int) -> Event:
  return Event(
      invocation_id=f"inv-{i // 4}",
      author="user" if i % 2 == 0 else "agent",
      content=types.Content(
          role="user" if i % 2 == 0 else "model",
          parts=[types.Part(text=f"[{i}] {TEXT}")],
      ),
      actions=EventActions(state_delta={"turn": i}),
  )


def pct(samples: list[float], q: float) -> float:
  """Nearest-rank percentile (``q`` in (0, 1]) of samples in seconds, in ms."""
  ordered = sorted(samples)
  return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


class Target:
  """One session of one service at one size, measured round-robin with the
  others so machine load hits every size alike."""

  def __init__(self, name: str, size: int, svc: Any, session: Session,
               every: int = 1) -> None:
    self.name, self.size, self.svc, self.session = name, size, svc, session
    self.every = every
    self.appends: list[float] = []
    self.gets: list[float] = []

  async def append(self) -> None:
    event = make_event(self.size + len(self.appends))
    t = time.perf_counter()
    await self.svc.append_event(self.session, event)
    self.appends.append(time.perf_counter() - t)
    if len(self.session.events) > 100:  # only the caller's copy; keep it small
      self.session.events = self.session.events[-50:]

  async def get(self) -> None:
    t = time.perf_counter()
    got = await self.svc.get_session(
        app_name=APP, user_id=USER, session_id=self.session.id,
        config=GetSessionConfig(num_recent_events=50))
    self.gets.append(time.perf_counter() - t)
    assert len(got.events) == 50

  def result(self) -> dict[str, float]:
    return {
        "append_p50": pct(self.appends, 0.5),
        "append_p99": pct(self.appends, 0.99),
        "get_p50": pct(self.gets, 0.5), "get_p99": pct(self.gets, 0.99),
    }


async def run_rounds(targets: list[Target], rounds: int = ROUNDS, gets: int = GETS) -> None:
  """Shuffles the order every round (seeded) so no target always follows a
  heavy one, e.g. SQLite, whose connection closes in a background thread."""
  rng = random.Random(7)
  for r in range(rounds):
    for t in rng.sample(targets, len(targets)):
      if r % t.every == 0:
        await t.append()
  for _ in range(gets):
    for t in rng.sample(targets, len(targets)):
      await t.get()


async def ours_targets(url: str) -> list[Target]:
  """Sessions grown through the real append path."""
  svc = RedisSessionService(url, key_prefix="ours")
  targets = []
  for size in SIZES:
    session = await svc.create_session(app_name=APP, user_id=USER)
    for i in range(size):
      await svc.append_event(session, make_event(i))
      if len(session.events) > 100:
        session.events = session.events[-50:]
    targets.append(Target("ours", size, svc, session))
  return targets


def builtin_session_json(size: int, sid: str) -> str:
  events = [make_event(i) for i in range(size)]
  return Session(id=sid, app_name=APP, user_id=USER,
                 state={"turn": size - 1}, events=events,
                 last_update_time=time.time()).model_dump_json()


async def builtin_target(svc: AdkRedis, client: Any, size: int,
                         every: int) -> Target:
  """The built-in's own storage format, written in one SET."""
  sid = f"builtin-{size}"
  await client.set(f"adk:session:{APP}:{USER}:{sid}",
                   builtin_session_json(size, sid))
  session = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
  return Target("builtin", size, svc, session, every=every)


def sqlite_prefill(path: str, sid: str, size: int) -> None:
  """Rows exactly as SqliteSessionService.append_event writes them."""
  with sqlite3.connect(path) as db:
    rows = []
    for i in range(size):
      e = make_event(i)
      rows.append((e.id, APP, USER, sid, e.invocation_id, e.timestamp,
                   e.model_dump_json(exclude_none=True)))
    db.executemany(
        "INSERT INTO events (id, app_name, user_id, session_id,"
        " invocation_id, timestamp, event_data) VALUES (?,?,?,?,?,?,?)", rows)
    db.execute("UPDATE sessions SET state=?, update_time=? WHERE id=?",
               (json.dumps({"turn": size - 1}), time.time(), sid))


async def sqlite_targets(tmp: str) -> list[Target]:
  path = str(Path(tmp) / "sessions.db")
  svc = SqliteSessionService(path)
  targets = []
  for size in SIZES:
    created = await svc.create_session(app_name=APP, user_id=USER)
    sqlite_prefill(path, created.id, size)
    session = await svc.get_session(
        app_name=APP, user_id=USER, session_id=created.id,
        config=GetSessionConfig(num_recent_events=50))
    targets.append(Target("sqlite", size, svc, session))
  return targets


def block_ratios(hi: Target, lo: Target, blocks: int = 5) -> list[float]:
  """append p50(hi) / p50(lo) over consecutive blocks of the interleaved rounds."""
  n = min(len(hi.appends), len(lo.appends))
  size = max(1, n // blocks)
  return [pct(hi.appends[i:i + size], 0.5) / pct(lo.appends[i:i + size], 0.5)
          for i in range(0, n - size + 1, size)]


async def run_all(url: str, tmp: str, rounds: int = ROUNDS, gets: int = GETS) -> tuple[dict, dict, dict, str, dict]:
  client = redis_asyncio.from_url(url, decode_responses=True)
  builtin = AdkRedis(RedisSessionServiceConfig(key_prefix="adk:session:"),
                     redis_client=client)
  ours = await ours_targets(url)
  sqlite = await sqlite_targets(tmp)
  small = [await builtin_target(builtin, client, n, BUILTIN_EVERY)
           for n in SIZES[:2]]
  await run_rounds(ours + sqlite + small, rounds, gets)
  by = lambda ts: {t.size: t.result() for t in ts}  # noqa: E731
  builtin_res = by(small)
  note = ""
  flat = block_ratios(ours[-1], ours[0])
  # built-in / ours at the built-in's largest size, from appends timed in the same rounds
  # (the built-in appends in rounds 0, BUILTIN_EVERY, 2 * BUILTIN_EVERY, ...; ours in every round)
  top = SIZES[1]
  speedup = [a / b for a, b in zip(small[-1].appends, ours[1].appends[::BUILTIN_EVERY])]
  p50 = builtin_res[SIZES[1]]["append_p50"]
  if p50 > BUILTIN_MAX_P50_MS:
    note = (f"built-in stopped at {SIZES[1]:,} events: append p50 is already"
            f" {p50:.1f} ms and grows linearly (it rewrites the whole session"
            " JSON on every append)")
  else:
    # The built-in at the largest size, alternating with as many appends to
    # ours at that size (timed apart from ours' table numbers), so the speedup
    # compares appends made seconds apart.
    top = SIZES[2]
    big = await builtin_target(builtin, client, top, 1)
    paired = Target("ours", top + len(ours[-1].appends), ours[-1].svc, ours[-1].session)
    for i in range(20):
      for t in ((big, paired) if i % 2 == 0 else (paired, big)):
        await t.append()
    for _ in range(20):
      await big.get()
    builtin_res[top] = big.result()
    speedup = [a / b for a, b in zip(big.appends, paired.appends)]
  await client.aclose()
  await ours[0].svc.close()
  await sqlite[0].svc.close()
  return by(ours), builtin_res, by(sqlite), note, {"flat": flat, "speedup": speedup, "top": top}


def table(rows: list[tuple[str, dict[int, dict[str, float]]]]) -> str:
  head = (f"{'service':<30} {'events':>7} {'append p50':>11} {'append p99':>11}"
          f" {'get50 p50':>10} {'get50 p99':>10}")
  lines = [head, "-" * len(head)]
  for name, res in rows:
    for size in SIZES:
      if size not in res:
        lines.append(f"{name:<30} {size:>7,} {'skipped':>11}")
        continue
      r = res[size]
      lines.append(
          f"{name:<30} {size:>7,} {r['append_p50']:>8.3f} ms"
          f" {r['append_p99']:>8.3f} ms {r['get_p50']:>7.3f} ms"
          f" {r['get_p99']:>7.3f} ms")
  return "\n".join(lines)



_signalled: list[int] = []


def _terminate(signum, frame):
  _signalled.append(signum)
  raise KeyboardInterrupt  # unwinds through the finally blocks: redis-server stopped, temp dir removed


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=positive, default=ROUNDS,
                  help=f"timed appends per session (the built-in: every {BUILTIN_EVERY}th round); default {ROUNDS}")
  ap.add_argument("--gets", type=positive, default=GETS, help=f"timed get_session calls per session; default {GETS}")
  args = ap.parse_args(argv)
  # Both raise at once (asyncio's own SIGINT handling only cancels the main
  # task, which a library may swallow, so the run would carry on).
  for sig in (signal.SIGINT, signal.SIGTERM):
    if signal.getsignal(sig) is not signal.SIG_IGN:
      signal.signal(sig, _terminate)
  started = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix="redis_sessions-") as tmp:
    try:
      server = RedisServer(Path(tmp) / "redis").start()
    except (OSError, RuntimeError) as e:
      raise SystemExit(f"redis_sessions: cannot start redis-server: {e}")
    try:
      ours, builtin, sqlite, note, paired = asyncio.run(run_all(server.url, tmp, args.rounds, args.gets))
    except BaseException:
      if _signalled or sys.exc_info()[0] is KeyboardInterrupt:  # (a library may wrap the interrupt)
        raise SystemExit("redis_sessions: interrupted; redis-server stopped, temp dir removed")
      raise
    finally:
      server.stop()
  print(f"redis-server on 127.0.0.1:{server.port} (loopback, no persistence);"
        f" {args.rounds} timed appends per size (every {BUILTIN_EVERY}th round for"
        f" the built-in), {args.gets} get_session(num_recent_events=50) calls;"
        " all sizes and services interleaved, shuffled each round")
  print(table([
      ("aether_frame RedisSessionService", ours),
      ("ADK integrations.redis (built-in)", builtin),
      ("ADK SqliteSessionService", sqlite),
  ]))
  flat = ours[SIZES[-1]]["append_p50"] / ours[SIZES[0]]["append_p50"]
  blocks = paired["flat"]
  print(f"ours: append p50 at {SIZES[-1]:,} / at {SIZES[0]:,} events ="
        f" {flat:.2f}  (target <= 1.2; per block of {max(1, args.rounds // 5)} rounds:"
        f" {min(blocks):.2f}-{max(blocks):.2f})")
  top, speedup = paired["top"], paired["speedup"]
  print(f"built-in / ours: append time at {top:,} events (built-in's largest"
        f" size), median of {len(speedup)} appends timed next to each other ="
        f" {statistics.median(speedup):.0f}x  (range {min(speedup):.0f}-{max(speedup):.0f}x; target >= 100x)")
  if note:
    print(note)
  print(f"total runtime {time.perf_counter() - started:.1f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
