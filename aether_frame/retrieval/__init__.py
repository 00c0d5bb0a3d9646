"""Retrieval: lexical + vector hybrid ranking for the EVIDENCE and MEMORY layers.

``default_ranker()`` needs no extra packages (incremental BM25 + time,
adjacency and prior signals + MMR). Vectors are opt-in: pass
``embedder=LocalEmbedder()`` (extra ``embed-local``) or ``GeminiEmbedder()``.
"""

from __future__ import annotations

from .embed import Embedder, EmbedderUnavailable, GeminiEmbedder, LocalEmbedder, VectorCache
from .lexical import IncrementalBM25
from .modes import detect_mode
from .ranker import HybridRanker, default_ranker
from .temporal import TimeRange, parse_time_range
from .weights import DecayModel, ModeProfile, ModeProfiles, RetrievalWeights

__all__ = [
    "DecayModel",
    "Embedder",
    "EmbedderUnavailable",
    "GeminiEmbedder",
    "HybridRanker",
    "IncrementalBM25",
    "LocalEmbedder",
    "ModeProfile",
    "ModeProfiles",
    "RetrievalWeights",
    "TimeRange",
    "VectorCache",
    "default_ranker",
    "detect_mode",
    "parse_time_range",
]
