"""Token counters: loads tiktoken encodings (the I/O side of costing).

The pure rules live in ``aether_frame.core.costing``; this module only decides
*which* counter to use. ``get_counter()`` never hangs and never fails silently:
if the BPE file is neither cached nor downloadable within a short timeout it
logs one warning and returns ``EstimatingCounter``, which never counts fewer
tokens than o200k_base or cl100k_base would (so budgets still fit), at the
price of ~3x over-counting English text.

Measured with tiktoken 0.14 (see ``benchmarks/token_batch.py``):
- ``encode_ordinary`` in a loop beats ``encode_ordinary_batch`` at every batch
  size for short texts (the batch call builds a ThreadPoolExecutor per call:
  ~190 us fixed + per-item future overhead, ~4x slower at 2,000 items), so
  ``count_many`` encodes misses with a plain loop.
- Cache keys: the string itself is ~10x faster than blake2b (hash of a str is
  memoised by CPython), but pins long texts in memory, so texts longer than
  ``_SHORT_KEY_CHARS`` are keyed by a 16-byte blake2b digest (cost ~2-12 us,
  small next to encoding them, ~100-500 us).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import urllib.request
import uuid
from collections import OrderedDict
from typing import Any, Sequence

from aether_frame.core.costing import EstimatingCounter, TokenCounter

logger = logging.getLogger(__name__)

__all__ = [
    "ALLOWED_ENCODINGS",
    "TiktokenCounter",
    "EstimatingCounter",
    "TokenCounter",
    "get_counter",
    "clear_counter_cache",
    "tiktoken_cache_dir",
]

# Encodings we support, with tiktoken's own URL + sha256 (tiktoken_ext/openai_public.py),
# so we can check/fetch the BPE file ourselves with a timeout before tiktoken
# (whose ``requests.get`` has none) ever touches the network.
_ENCODING_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
ALLOWED_ENCODINGS = tuple(_ENCODING_FILES)

DOWNLOAD_TIMEOUT_SECONDS = 10.0
CACHE_MAX_ENTRIES = 200_000
_SHORT_KEY_CHARS = 256


def _check_encoding(encoding: str) -> None:
  if encoding not in _ENCODING_FILES:
    raise ValueError(
        f"unknown tiktoken encoding {encoding!r}; allowed: {', '.join(ALLOWED_ENCODINGS)}"
    )


def tiktoken_cache_dir() -> str:
  """The directory tiktoken's ``read_file_cached`` uses ("" = caching disabled)."""
  if "TIKTOKEN_CACHE_DIR" in os.environ:
    return os.environ["TIKTOKEN_CACHE_DIR"]
  if "DATA_GYM_CACHE_DIR" in os.environ:
    return os.environ["DATA_GYM_CACHE_DIR"]
  return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _sha256_file(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _ensure_bpe_file(encoding: str) -> None:
  """Makes sure tiktoken will find a valid cached BPE file; raises with the cause.

  Mirrors tiktoken.load.read_file_cached: cache path = cache_dir/sha1(url),
  content verified by sha256. A missing/corrupt file is fetched here with a
  timeout (urllib honours HTTPS_PROXY/NO_PROXY), so tiktoken never blocks.
  """
  url, expected = _ENCODING_FILES[encoding]
  cache_dir = tiktoken_cache_dir()
  if cache_dir == "":
    raise RuntimeError(
        "tiktoken caching is disabled (TIKTOKEN_CACHE_DIR is empty), which would make "
        "tiktoken download without a timeout"
    )
  path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
  if os.path.exists(path):
    if _sha256_file(path) == expected:
      return
    logger.debug("cached %s at %s fails its sha256 check; re-fetching", encoding, path)
  try:
    data = _fetch(url)
  except Exception as e:  # URLError, timeout, proxy refusal, DNS...
    raise RuntimeError(
        f"{encoding} BPE file not in cache dir {cache_dir!r} and download of {url} failed: {e}"
    ) from e
  if hashlib.sha256(data).hexdigest() != expected:
    raise RuntimeError(f"downloaded {url} does not match its expected sha256")
  os.makedirs(cache_dir, exist_ok=True)
  tmp = f"{path}.{uuid.uuid4()}.tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


def _fetch(url: str) -> bytes:
  """GET with a hard deadline: urlopen's timeout does not cover DNS, so run it in a
  daemon thread and give up after DOWNLOAD_TIMEOUT_SECONDS + 2."""
  result: dict[str, Any] = {}

  def run() -> None:
    try:
      with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as resp:
        result["data"] = resp.read()
    except BaseException as e:  # reported to the caller below
      result["error"] = e

  t = threading.Thread(target=run, name="aether-frame-tiktoken-fetch", daemon=True)
  t.start()
  t.join(DOWNLOAD_TIMEOUT_SECONDS + 2.0)
  if "error" in result:
    raise result["error"]
  if "data" not in result:
    raise TimeoutError(f"no response within {DOWNLOAD_TIMEOUT_SECONDS + 2.0:.0f}s")
  return result["data"]


def _not_str(value: Any) -> bool:
  """Raises the TypeError for a non-str item given to ``count_many``."""
  if isinstance(value, str):  # a str subclass
    return True
  raise TypeError(f"TokenCounter.count_many expects str items, got {type(value).__name__}")


class TiktokenCounter:
  """Exact counts under a tiktoken encoding, memoised in a bounded LRU.

  "exact" means exact for this encoding; the gap to Gemini's own tokenizer is
  learned by ``aether_frame.calibration.Calibrator``. Safe to share across
  asyncio tasks and threads: the cache is guarded by a lock, encoding runs
  outside it (tiktoken's Rust core is thread-safe).
  """

  exact = True

  def __init__(self, encoding: str = "o200k_base", max_entries: int = CACHE_MAX_ENTRIES) -> None:
    _check_encoding(encoding)
    import tiktoken

    self.encoding_name = encoding
    self._encoding = tiktoken.get_encoding(encoding)
    self._encode = self._encoding.encode_ordinary
    # Private but stable since tiktoken 0.1; fall back to the public method if it moves.
    core = getattr(self._encoding, "_core_bpe", None)
    self._core_encode = getattr(core, "encode_ordinary", None) or self._encode
    self.name = f"tiktoken:{encoding}"
    self.version = f"tiktoken-{tiktoken.__version__}/{encoding}"
    self._max = max(1, int(max_entries))
    self._cache: OrderedDict[Any, int] = OrderedDict()
    self._lock = threading.Lock()
    self.hits = 0
    self.misses = 0

  @staticmethod
  def _key(text: str) -> Any:
    if len(text) <= _SHORT_KEY_CHARS:
      return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

  def count(self, text: str) -> int:
    if not isinstance(text, str):
      raise TypeError(f"TokenCounter.count expects a str, got {type(text).__name__}")
    k = self._key(text)
    with self._lock:
      v = self._cache.get(k)
      if v is not None:
        self._cache.move_to_end(k)
        self.hits += 1
        return v
    c = self._encode_fast(text)
    with self._lock:
      self.misses += 1
      self._cache[k] = c
      if len(self._cache) > self._max:
        self._cache.popitem(last=False)
    return c

  def count_many(self, texts: Sequence[str]) -> list[int]:
    """Counts with one cache pass; misses are encoded once each, in a plain loop.

    Non-str items raise TypeError: a str argument would otherwise be counted
    per character, and a short bytes item could hit a long text's digest key.
    """
    if isinstance(texts, str):
      raise TypeError("TokenCounter.count_many expects a sequence of str, got a str (use count)")
    short = _SHORT_KEY_CHARS
    blake = hashlib.blake2b
    keys = [
        t if len(t) <= short else blake(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        for t in texts
        if type(t) is str or _not_str(t)
    ]
    cache = self._cache
    get = cache.get
    touch = cache.move_to_end
    out: list[Any] = [None] * len(keys)
    miss_at: list[int] = []
    with self._lock:
      for i, k in enumerate(keys):
        v = get(k)
        if v is None:
          miss_at.append(i)
        else:
          touch(k)
          out[i] = v
      self.hits += len(keys) - len(miss_at)
    if not miss_at:
      return out
    encode = self._encode_fast
    fresh: dict[Any, int] = {}
    for i in miss_at:
      k = keys[i]
      c = fresh.get(k)
      if c is None:
        c = fresh[k] = encode(texts[i])
      out[i] = c
    with self._lock:
      self.misses += len(fresh)
      cache.update(fresh)
      excess = len(cache) - self._max
      for _ in range(excess):
        cache.popitem(last=False)
    return out

  def _encode_fast(self, text: str) -> int:
    """Calls the Rust core directly (skips a Python wrapper frame); the wrapper
    handles lone surrogates, so fall back to it on UnicodeEncodeError."""
    try:
      return len(self._core_encode(text))
    except UnicodeEncodeError:
      return len(self._encode(text))

  def cache_info(self) -> dict[str, int]:
    return {"hits": self.hits, "misses": self.misses, "size": len(self._cache), "max": self._max}

  def clear_cache(self) -> None:
    with self._lock:
      self._cache.clear()
      self.hits = self.misses = 0

  def describe(self) -> dict[str, Any]:
    return {"name": self.name, "exact": True, "version": self.version}

  def __repr__(self) -> str:
    return f"TiktokenCounter({self.encoding_name!r})"


_counters: dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def get_counter(encoding: str = "o200k_base") -> TokenCounter:
  """The process-wide counter for ``encoding``; falls back to an estimate, loudly.

  Unknown encoding names raise ValueError (a configuration error, not an
  environment one). The result — including a fallback — is cached, so the
  warning is logged once per encoding per process.
  """
  _check_encoding(encoding)
  counter = _counters.get(encoding)
  if counter is not None:
    return counter
  with _counters_lock:
    counter = _counters.get(encoding)
    if counter is None:
      counter = _load(encoding)
      _counters[encoding] = counter
  return counter


def _load(encoding: str) -> TokenCounter:
  try:
    _ensure_bpe_file(encoding)
    return TiktokenCounter(encoding)
  except Exception as e:
    reason = f"{type(e).__name__}: {e}"
    logger.warning(
        "aether-frame: cannot load tiktoken encoding %r (%s). Token counts will be "
        "ESTIMATED by an upper bound: never fewer tokens than o200k_base and cl100k_base "
        "count, but ~3x more on English text and up to ~5x on other scripts, so packs "
        "hold less (exact=false in manifests). Fix: put the encoding file in a directory "
        "and set TIKTOKEN_CACHE_DIR to it (file name = sha1 of %s), or allow network "
        "access on first use.",
        encoding,
        reason,
        _ENCODING_FILES[encoding][0],
    )
    return EstimatingCounter(fallback_for=encoding, reason=reason)


def clear_counter_cache() -> None:
  """Forgets loaded counters (tests, or after fixing TIKTOKEN_CACHE_DIR)."""
  with _counters_lock:
    _counters.clear()
