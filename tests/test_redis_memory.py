"""RedisMemoryService against a real redis-server.

Rankings are checked against a from-scratch BM25 over the same tokenizer, and
the index invariants (document count, total length, postings) are checked
after every kind of write, including concurrent ones.
"""

from __future__ import annotations

import asyncio
from collections import Counter
import json
import itertools
import math

from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types
from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from aether_frame.retrieval.text import tokenize
from aether_frame.stores._redis_util import enc
from aether_frame.stores import CorruptDataError
from aether_frame.stores import RedisMemoryService
from aether_frame.stores import WorkingMemory
from aether_frame.retrieval.text import content_hash
from aether_frame.stores.redis_memory import SCORE_KEY, document_terms
from tests.fixtures.redis_server import cluster_redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_server  # noqa: F401
from tests.fixtures.redis_server import redis_url  # noqa: F401
from tests.strategies import IN_CI

APP, USER = "app", "u"


def event(eid: str, text: str, ts: float, author: str = "user",
          thought: str | None = None) -> Event:
  parts = [types.Part(text=text)]
  if thought:
    parts.append(types.Part(text=thought, thought=True))
  return Event(
      id=eid, invocation_id=f"inv-{eid}", author=author, timestamp=ts,
      content=types.Content(role="user", parts=parts),
  )


def bm25_reference(docs, query, k1=1.2, b=0.75):
  """docs: id -> (text, ts). Returns [(id, score)] best first."""
  toks = {i: tokenize(t) for i, (t, _) in docs.items()}
  n = len(docs)
  avgdl = sum(len(t) for t in toks.values()) / n if n else 0
  avgdl = avgdl if avgdl > 0 else 1
  scores: dict[str, float] = {}
  for term in dict.fromkeys(tokenize(query)):
    df = sum(1 for t in toks.values() if term in t)
    if not df:
      continue
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    for i, t in toks.items():
      tf = t.count(term)
      if tf:
        scores[i] = scores.get(i, 0.0) + idf * tf * (k1 + 1) / (
            tf + k1 * (1 - b + b * len(t) / avgdl))
  return sorted(scores.items(),
                key=lambda kv: (-kv[1], -docs[kv[0]][1], kv[0]))


def check_index(url: str, prefix: str = "aether", app=APP, user=USER):
  """Stats, lengths and postings agree with the stored documents."""
  r = redis.Redis.from_url(url)
  base = f"{prefix}:{{{app}:{user}}}:mem"
  docs = r.hgetall(f"{base}:docs")
  lens = {k: int(v) for k, v in r.hgetall(f"{base}:lens").items()}
  terms = r.hgetall(f"{base}:terms")
  stats = r.hgetall(f"{base}:stats")
  assert set(docs) == set(lens) == set(terms)
  sums = r.hgetall(f"{base}:sums")
  assert set(sums) <= set(docs)  # a document stored before digests existed has none until re-added
  for key, digest in sums.items():
    assert digest.decode() == content_hash(docs[key].decode())
  for memory_id, listed in r.hgetall(f"{base}:alias").items():  # other sessions' events under one id
    for key in json.loads(listed):
      assert key.encode().startswith(memory_id + b"\x1f") and key.encode() in docs
  assert int(stats.get(b"n", 0)) == len(docs)
  assert int(stats.get(b"len", 0)) == sum(lens.values())
  postings = {}
  for key in r.scan_iter(f"{base}:t:*"):
    term = key.rsplit(b":t:", 1)[1]
    postings[term] = {d: int(tf) for d, tf in r.hgetall(key).items()}
    assert postings[term], f"empty posting list left behind: {key}"
  for doc, doc_terms in terms.items():
    entry = MemoryEntry.model_validate_json(docs[doc])
    text = " ".join(p.text for p in entry.content.parts
                    if p.text and not p.thought)
    expected = Counter(document_terms(text))
    assert {enc(t).encode(): c for t, c in expected.items()} == {
        t: postings[t][doc] for t in doc_terms.split()}
    assert lens[doc] == sum(expected.values())
  r.close()
  return len(docs)


@pytest.fixture
async def mem(redis_url):
  service = RedisMemoryService(redis_url)
  yield service
  await service.close()


CORPUS = [
    "The deploy failed because the redis password rotated overnight",
    "Ada likes graph algorithms and shortest path problems",
    "Shortest paths: Dijkstra for positive weights, Bellman-Ford otherwise",
    "Lunch order: two pizzas, one without cheese",
    "Redis cluster slots are computed with CRC16 of the hash tag",
    "The graph has 10k nodes; BFS finished in 40 ms",
    "Password rotation runs every Sunday at 02:00 UTC",
    "Pizza pizza pizza: the team really likes pizza",
    "Graph coloring is NP-hard in general",
    "Deploys are blocked on Fridays",
]


async def test_ranking_matches_reference_bm25(mem):
  events = [event(f"e{i}", t, 1000.0 + i) for i, t in enumerate(CORPUS)]
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER, events=events, session_id="s1")
  docs = {e.id: (t, e.timestamp) for e, t in zip(events, CORPUS)}
  for query in ("graph shortest path", "redis password", "pizza",
                "deploy failed on friday", "cheese pizzas graphs",
                "nothing matches xyzzy"):
    got = await mem.search_memory(app_name=APP, user_id=USER, query=query)
    want = bm25_reference(docs, query)[:10]
    assert [m.id for m in got.memories] == [i for i, _ in want], query
    assert [m.custom_metadata[SCORE_KEY] for m in got.memories] == [
        pytest.approx(s, rel=1e-12) for _, s in want]
  top = await mem.search_memory(app_name=APP, user_id=USER, query="pizza")
  assert top.memories[0].id == "e7"  # four mentions beat one


@settings(max_examples=300 if IN_CI else 60, deadline=None,  # a real Redis round trip each
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.lists(st.sampled_from(
            ["alpha", "beta", "gamma", "delta", "kappa", "omega", "the"]),
            min_size=0, max_size=8).map(" ".join),
        min_size=1, max_size=12),
    query=st.lists(st.sampled_from(["alpha", "beta", "gamma", "omega", "zeta"]),
                   min_size=1, max_size=3).map(" ".join),
)
def test_ranking_matches_reference_on_random_corpora(redis_url, texts, query):
  async def run():
    service = RedisMemoryService(redis_url, key_prefix=f"h{next(_counter)}")
    events = [event(f"d{i}", t or "the", 2000.0 + i)
              for i, t in enumerate(texts)]
    await service.add_events_to_memory(
        app_name=APP, user_id=USER, events=events, session_id="s")
    got = await service.search_memory(app_name=APP, user_id=USER, query=query)
    await service.close()
    return got

  got = asyncio.run(run())
  docs = {f"d{i}": (t or "the", 2000.0 + i) for i, t in enumerate(texts)}
  want = bm25_reference(docs, query)[:10]
  assert [(m.id, pytest.approx(m.custom_metadata[SCORE_KEY], rel=1e-12))
          for m in got.memories] == want


_counter = itertools.count()


async def test_provenance_and_custom_metadata(mem):
  e = event("ev-1", "The blue key opens the cellar", 1700000000.25,
            author="scout", thought="private chain of thought")
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER, events=[e], session_id="sess-9",
      custom_metadata={"source": "unit", "session_id": "not-this"})
  [m] = (await mem.search_memory(
      app_name=APP, user_id=USER, query="cellar key")).memories
  assert m.id == "ev-1" and m.author == "scout"
  # UTC with its offset: a worker in any zone reads the same instant.
  assert m.timestamp == "2023-11-14T22:13:20.250000+00:00"
  assert m.content == e.content  # thought part kept, just not indexed
  assert m.custom_metadata == {
      "source": "unit", "session_id": "sess-9", "event_id": "ev-1",
      "invocation_id": "inv-ev-1", "event_timestamp": 1700000000.25,
      SCORE_KEY: m.custom_metadata[SCORE_KEY],
  }
  found = await mem.search_memory(
      app_name=APP, user_id=USER, query="private chain thought")
  assert found.memories == []


async def test_scopes_are_isolated_and_workers_share(redis_url, mem):
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER, events=[event("x", "secret plan", 1.0)])
  for app, user in ((APP, "other"), ("other", USER), ("app:u", ""),
                    ("app", "u:")):
    assert (await mem.search_memory(
        app_name=app, user_id=user, query="secret plan")).memories == []
  worker_b = RedisMemoryService(redis_url)  # another worker, own connection
  got = await worker_b.search_memory(app_name=APP, user_id=USER,
                                     query="secret")
  assert [m.id for m in got.memories] == ["x"]
  await worker_b.close()


async def test_readding_updating_and_deleting_keep_index_exact(redis_url, mem):
  events = [event(f"e{i}", t, 1000.0 + i) for i, t in enumerate(CORPUS)]
  session = Session(id="s1", app_name=APP, user_id=USER, events=events)
  await mem.add_session_to_memory(session)
  await mem.add_session_to_memory(session)  # sessions are re-added as they grow
  assert await mem.count(app_name=APP, user_id=USER) == len(CORPUS)
  assert check_index(redis_url) == len(CORPUS)

  # Same event id, new text: old terms must stop matching.
  events[3] = event("e3", "Dinner order: sushi", 1003.0)
  await mem.add_session_to_memory(session.model_copy(update={"events": events}))
  assert check_index(redis_url) == len(CORPUS)
  lunch = await mem.search_memory(app_name=APP, user_id=USER, query="lunch")
  assert lunch.memories == []
  sushi = await mem.search_memory(app_name=APP, user_id=USER, query="sushi")
  assert [m.id for m in sushi.memories] == ["e3"]

  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="e7")
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="missing")
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id=None)
  assert check_index(redis_url) == len(CORPUS) - 1
  pizza = await mem.search_memory(app_name=APP, user_id=USER, query="pizza")
  assert pizza.memories == []  # e7 was the only pizza left
  # Re-adding the session must not resurrect a deleted memory...
  await mem.add_session_to_memory(session)
  assert all(m.id != "e7" for m in (await mem.search_memory(
      app_name=APP, user_id=USER, query="pizza")).memories)
  # ...but an explicit write does.
  await mem.add_memory(app_name=APP, user_id=USER, memories=[MemoryEntry(
      id="e7", content=types.Content(parts=[types.Part(text="pizza again")]))])
  assert "e7" in [m.id for m in (await mem.search_memory(
      app_name=APP, user_id=USER, query="pizza")).memories]
  assert check_index(redis_url) == len(CORPUS)


async def test_add_memory_without_ids_is_idempotent(redis_url, mem):
  entries = [
      MemoryEntry(content=types.Content(parts=[types.Part(text=t)]),
                  author="notes", timestamp="2026-01-02T03:04:05")
      for t in ("Use CRC16 for slots", "Tags braces pick the slot")
  ]
  for _ in range(3):
    await mem.add_memory(app_name=APP, user_id=USER, memories=entries,
                         custom_metadata={"kind": "fact"})
  assert await mem.count(app_name=APP, user_id=USER) == 2
  got = await mem.search_memory(app_name=APP, user_id=USER, query="slot")
  assert len(got.memories) == 2
  assert all(m.id and m.custom_metadata["kind"] == "fact"
             for m in got.memories)
  check_index(redis_url)


async def test_skips_textless_events_and_limits_results(redis_url):
  service = RedisMemoryService(redis_url, max_results=3)
  empty = Event(id="empty", author="tool", invocation_id="i")
  await service.add_events_to_memory(
      app_name=APP, user_id=USER,
      events=[empty] + [event(f"w{i}", f"widget {i}", float(i))
                        for i in range(6)])
  assert await service.count(app_name=APP, user_id=USER) == 6
  got = await service.search_memory(app_name=APP, user_id=USER,
                                    query="widget")
  assert [m.id for m in got.memories] == ["w5", "w4", "w3"]  # ties: newest
  for q in ("", "   ", "the and of"):
    assert (await service.search_memory(
        app_name=APP, user_id=USER, query=q)).memories == []
  await service.close()


async def test_concurrent_writers_keep_the_index_consistent(redis_url):
  workers = [RedisMemoryService(redis_url) for _ in range(4)]

  async def write(w, k):
    for rnd in range(10):
      batch = [event(f"e{(k * 7 + rnd * 3 + j) % 40}",
                     f"{CORPUS[(k + rnd + j) % len(CORPUS)]} {k}", float(j))
               for j in range(5)]
      await w.add_events_to_memory(app_name=APP, user_id=USER, events=batch)
      if rnd % 3 == 0:
        await w.delete_memory(app_name=APP, user_id=USER,
                              memory_id=f"e{(k + rnd) % 40}")

  await asyncio.gather(*(write(w, k) for k, w in enumerate(workers)))
  n = check_index(redis_url)
  assert 0 < n <= 40
  for w in workers:
    await w.close()


async def test_corrupt_documents_raise_naming_the_key(redis_url, mem):
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER, events=[event("e1", "orange cat", 1.0)])
  r = redis.Redis.from_url(redis_url)
  r.hset("aether:{app:u}:mem:docs", "e1", "{broken")
  with pytest.raises(CorruptDataError, match=r"aether:\{app:u\}:mem:docs"):
    await mem.search_memory(app_name=APP, user_id=USER, query="cat")
  r.hset("aether:{app:u}:mem:stats", "n", "many")
  with pytest.raises(CorruptDataError, match="mem:stats"):
    await mem.search_memory(app_name=APP, user_id=USER, query="cat")
  r.close()


async def test_memory_and_notes_run_on_redis_cluster(cluster_redis_server):
  # Every script keeps to the (app, user) hash tag, or Cluster refuses it.
  cluster_redis_server.flush()
  client = RedisCluster(host="127.0.0.1", port=cluster_redis_server.port)
  mem = RedisMemoryService(client)
  notes = WorkingMemory(client)
  events = [event(f"e{i}", t, 1000.0 + i) for i, t in enumerate(CORPUS)]
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=events)
  events[1] = event("e1", "Ada now likes databases", 1001.0)
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=events)
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="e5")
  await notes.add_note(APP, USER, "s", "step", "graph notes from a step")
  assert await notes.checkpoint(APP, USER, "s", "step", mem) == 1
  got = await mem.search_memory(app_name=APP, user_id=USER, query="graph")
  note = got.memories[0]  # shortest document mentioning "graph"
  assert note.content.parts[0].text == "graph notes from a step"
  docs = {e.id: (e.content.parts[0].text, e.timestamp) for e in events
          if e.id != "e5"}
  docs[note.id] = ("graph notes from a step",
                   note.custom_metadata["event_timestamp"])
  want = bm25_reference(docs, "graph")
  assert [(m.id, pytest.approx(m.custom_metadata[SCORE_KEY], rel=1e-12))
          for m in got.memories] == want
  assert await notes.list_notes(APP, USER, "s") == []
  await client.aclose()


async def test_non_latin_text_is_found(redis_url, mem):
  """The tokenizer kept only [a-z0-9]: Cyrillic, accented and CJK text was stored but never matched."""
  texts = ["Встреча с поставщиком перенесена на пятницу", "Le café ouvre à huit heures",
           "東京タワーの見学は来週の火曜日です", "我们在北京的办公室下个月搬迁", "Lunch order: two pizzas"]
  events = [event(f"n{i}", t, 2000.0 + i) for i, t in enumerate(texts)]
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=events, session_id="s1")
  for query, want in (("поставщиком", "n0"), ("café", "n1"), ("東京タワー", "n2"), ("北京办公室", "n3")):
    got = await mem.search_memory(app_name=APP, user_id=USER, query=query)
    assert [m.id for m in got.memories][:1] == [want], query
  assert check_index(redis_url) == len(texts)


async def test_unscoped_readd_keeps_the_session_an_event_was_stored_under(
    redis_url, mem):
  first = event("e1", "the ferry leaves at noon", 1000.0)
  await mem.add_session_to_memory(
      Session(id="s1", app_name=APP, user_id=USER, events=[first]))
  # The same event again, from a caller that does not know its session.
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=[first])
  got = (await mem.search_memory(app_name=APP, user_id=USER,
                                 query="ferry")).memories
  assert [(m.id, m.custom_metadata["session_id"]) for m in got] == [
      ("e1", "s1")]
  # New content still replaces the old; only the provenance is carried over.
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER,
      events=[event("e1", "the ferry leaves at one", 1000.0)])
  got = (await mem.search_memory(app_name=APP, user_id=USER,
                                 query="ferry one")).memories
  assert [(m.id, m.content.parts[0].text, m.custom_metadata["session_id"])
          for m in got] == [("e1", "the ferry leaves at one", "s1")]
  # An event first stored without its session gains it when it arrives.
  second = event("e2", "the ferry is late", 1001.0)
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=[second])
  await mem.add_events_to_memory(app_name=APP, user_id=USER, events=[second],
                                 session_id="s2")
  got = (await mem.search_memory(app_name=APP, user_id=USER,
                                 query="late")).memories
  assert [(m.id, m.custom_metadata["session_id"]) for m in got] == [
      ("e2", "s2")]
  assert check_index(redis_url) == 2


async def test_deleting_an_unknown_id_does_not_block_a_later_event(
    redis_url, mem):
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="e9")
  await mem.add_events_to_memory(
      app_name=APP, user_id=USER,
      events=[event("e9", "quarterly budget review", 5.0)], session_id="s")
  got = (await mem.search_memory(app_name=APP, user_id=USER,
                                 query="budget")).memories
  assert [m.id for m in got] == ["e9"]
  # Deleting it now that it exists keeps re-ingestion from bringing it back.
  await mem.delete_memory(app_name=APP, user_id=USER, memory_id="e9")
  for sid in ("s", None):
    await mem.add_events_to_memory(
        app_name=APP, user_id=USER,
        events=[event("e9", "quarterly budget review", 5.0)], session_id=sid)
  assert (await mem.search_memory(app_name=APP, user_id=USER,
                                  query="budget")).memories == []
  assert check_index(redis_url) == 0


async def test_an_id_holding_the_alias_separator_is_refused_and_nothing_is_written(redis_url, mem):
  """A second session's copy of an event id is stored under ``id + "\\x1f" + session``: an event
  whose own id was ``"1\\x1fB"`` was overwritten when session B added an event ``"1"`` that
  collided with session A's, and its text could no longer be found (security review)."""
  a = Session(app_name=APP, user_id=USER, id="A", events=[event("1", "session A says banana", 1.0)])
  c = Session(app_name=APP, user_id=USER, id="C", events=[event("1\x1fB", "session C says pineapple", 2.0)])
  await mem.add_session_to_memory(a)
  with pytest.raises(ValueError, match=r"memory id '1\\x1fB' holds the unit separator"):
    await mem.add_session_to_memory(c)
  found = await mem.search_memory(app_name=APP, user_id=USER, query="banana pineapple")
  assert [m.content.parts[0].text for m in found.memories] == ["session A says banana"]
  with pytest.raises(ValueError, match="unit separator"):
    await mem.add_memory(app_name=APP, user_id=USER, memories=[MemoryEntry(id="x\x1fy", content=types.Content(
        role="user", parts=[types.Part(text="direct")]))])
  check_index(redis_url)
