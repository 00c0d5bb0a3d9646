"""Context windows of common models, with user overrides.

Lookup is by exact name, then by the longest registered prefix, so dated or
suffixed variants (``gemini-2.5-flash-001``) resolve without a new entry, then
by family rule: Gemini 3.x point releases (``gemini-3.5-flash``, ADK 2.13's
default model, ``gemini-3.1-pro-preview``) ship every few months with the same
1M-token input, so a new one should not need a release of this package.
Variants whose window differs (image, speech, live) match no rule: better an
error naming the model than a guess of 1M for an 8K model.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

from .errors import AetherFrameError
from .items import MAX_TOKENS

DEFAULT_WINDOWS: dict[str, int] = {
    # Gemini
    "gemini-3-pro": 1_048_576,
    "gemini-3-flash": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
    "gemini-2.5-flash-lite": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.0-flash-lite": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-flash-latest": 1_048_576,
    "gemini-flash-lite-latest": 1_048_576,
    "gemini-pro-latest": 1_048_576,
    # Image and speech variants share a family prefix but take far less input
    # (Vertex AI model cards); without these the prefix rule would give them 1M.
    "gemini-2.5-flash-image": 32_768,
    "gemini-3-pro-image": 65_536,
    "gemini-2.5-flash-preview-tts": 8_192,
    "gemini-2.5-pro-preview-tts": 8_192,
    # Claude
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-haiku-4": 200_000,
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Mistral
    "mistral-large": 128_000,
    "mistral-medium": 128_000,
    "mistral-small": 32_000,
    "codestral": 256_000,
    "open-mistral-nemo": 128_000,
}


FAMILY_RULES: tuple[tuple[re.Pattern[str], int], ...] = (
    # gemini-3.5-flash, gemini-3.1-pro-preview, gemini-3.8-flash-lite-001,
    # gemini-3.1-pro-preview-customtools; not -image, -tts, -live, -audio.
    (re.compile(r"gemini-3(?:\.\d+)?-(?:pro|flash|flash-lite)(?:-preview)?(?:-\d[\d-]*)?(?:-customtools)?"), 1_048_576),
    # gpt-5.1-chat-latest, gpt-5.2-chat-latest, dated ones: the ChatGPT snapshots keep 128K.
    (re.compile(r"gpt-5(?:\.\d+)?-chat(?:-latest|-\d[\d-]*)?"), 128_000),
)
"""(full-name pattern, window) after exact and prefix matches: model families
whose point releases keep their window."""


_VARIANT = re.compile(r"-(?:tts|live|image|transcribe|translate)(?:-|$)|native-audio|^gpt-5(?:\.\d+)?-chat")
"""Model-name markers of variants whose window is not their family's."""


def _key(model: str) -> str:
  """``openai/GPT-4o`` -> ``gpt-4o``: names and overrides are matched in this form."""
  return model.rsplit("/", 1)[-1].lower()


class UnknownModelWindow(AetherFrameError, LookupError):
  """No window is known for a model; pass ``window=`` or register it."""


class ModelWindows:
  """Resolves a model name to its context window in tokens."""

  def __init__(self, overrides: Optional[Mapping[str, int]] = None):
    table = dict(DEFAULT_WINDOWS)
    if overrides is not None and not isinstance(overrides, Mapping):
      raise TypeError(f"window_overrides must be a mapping of model name to window, got {type(overrides).__name__}")
    for name, size in (overrides or {}).items():
      if not isinstance(name, str) or not name.strip():
        raise ValueError(f"window_overrides keys must be model names, got {name!r}")
      if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_TOKENS:
        raise ValueError(f"window for model {name!r} must be a positive int of at most 2**40 tokens, got {size!r}")
      table[_key(name)] = size
    self._table = table

  def lookup(self, model: Optional[str]) -> int:
    if not model:
      raise UnknownModelWindow("request has no model name; set window= explicitly")
    name = _key(model)
    if name in self._table:
      return self._table[name]
    # A speech, live or image variant takes far less than its family: it is
    # matched only by a registered variant of the same kind, never by the
    # family's prefix (gemini-3-flash-preview-tts is not a 1M model).
    variant = _VARIANT.search(name)
    best = max((k for k in self._table if name.startswith(k) and (not variant or _VARIANT.search(k))),
               key=len, default=None)
    if best is None:
      for pattern, window in FAMILY_RULES:
        if pattern.fullmatch(name):
          return window
      raise UnknownModelWindow(
          f"no context window known for model {model!r}; pass window= or"
          " window_overrides={...} to the plugin"
      )
    return self._table[best]
