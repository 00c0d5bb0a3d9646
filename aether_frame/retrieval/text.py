"""Shared text normalisation for every lexical index (in-process and Redis).

One tokenizer for all indexes means a query matches the same terms wherever
the index lives.
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[^\W_]+(?:'[a-z]+)?")
"""A run of letters and digits of any script (``[a-z0-9]`` in ASCII text), with an
English contraction's tail ("don't", "it's"). Applied to lower-cased text."""
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
"""Han, kana and Hangul: scripts written without spaces between words, indexed as
overlapping character bigrams (as search engines' CJK analysers do); a run of
them as one word would match only the identical run."""
PLAIN_WORDS = re.compile(r"[a-z0-9]+").findall
"""The ``[a-z0-9]+`` runs of a lower-cased text: the words the mode and time
prefilters key on. One definition, so words a caller hands on are exactly the
ones the callee would find."""

FOLD = bytes(c + 32 if 65 <= c <= 90 else c if (97 <= c <= 122 or 48 <= c <= 57) else 32 for c in range(256))
"""Bytes table: upper case to lower, every byte that is not ``[a-z0-9]`` to a space."""

STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her him his
    how i if in into is it its me my of on or our she so that the their them they
    this to was we were what when where which who why will with you your""".split()
)


def _stem(word: str) -> str:
  """A tiny deterministic suffix stripper: enough to match plural and -ing forms."""
  for suffix in ("ingly", "ing", "edly", "ed", "ies", "es", "s"):
    if word.endswith(suffix) and len(word) - len(suffix) >= 3:
      if suffix == "ies":
        return word[: -3] + "y"
      return word[: -len(suffix)]
  return word


def _matches(text: str) -> list[str]:
  """The word matches of ``text``, lower-cased: ``_WORD`` runs, CJK runs as bigrams.

  ASCII text gives exactly the ``[a-z0-9]+('[a-z]+)?`` matches; other text is
  NFKC-normalised first (full-width letters, ligatures), so the same word
  typed two ways is one term.
  """
  if text.isascii():
    return _WORD.findall(text.lower())
  found = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
  if not any(_CJK.search(w) for w in found):
    return found
  out: list[str] = []
  for w in found:
    at = 0
    for m in _CJK.finditer(w):
      if m.start() > at:
        out.append(w[at : m.start()])
      run = m.group()
      out.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
      at = m.end()
    if at < len(w):
      out.append(w[at:])
  return out


def tokenize(text: str) -> list[str]:
  """Lower-cased, stop-word-free, lightly stemmed terms, in order (any script)."""
  out = []
  for match in _matches(text):
    word = match.split("'", 1)[0]
    if word and word not in STOPWORDS:
      out.append(_stem(word))
  return out


def cjk_unigrams(text: str) -> list[str]:
  """The single characters of ``text``'s Han, kana and Hangul runs of two or more, in order.

  ``tokenize`` gives such a run as bigrams, so a one-character query ("雨",
  "집" before its particle) matches nothing; an index that also holds these
  unigrams (as Lucene's CJK bigram filter can) finds it. A run of one is a
  unigram in ``tokenize`` already.
  """
  if text.isascii():
    return []
  out: list[str] = []
  for m in _CJK.finditer(unicodedata.normalize("NFKC", text).lower()):
    if len(m.group()) > 1:
      out.extend(m.group())
  return out


def words(text: str) -> list:
  """``_matches(text)``; in ASCII text without apostrophes, the same words as bytes.

  There every match is a maximal ``[a-z0-9]`` run of the lower-cased text, and
  folding the rest to spaces then splitting finds them in C, without the regex
  engine. Callers that mix both kinds must key on them separately.
  """
  if text.isascii() and "'" not in text:
    return text.encode().translate(FOLD).split()
  return _matches(text)


def content_hash(text: str) -> str:
  """A short stable digest of ``text``: index and vector-cache keys survive edits by id."""
  import hashlib

  return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def analyze(text: str) -> list[str]:
  """``tokenize`` plus one more folding step for the retrieval index: a final "e" is dropped.

  ``tokenize`` maps "dances" and "dancing" to "danc" but keeps "dance";
  dropping the "e" joins them (and "store"/"stores", "hike"/"hiking").
  A separate function, so ``tokenize`` (shared with the Redis memory
  service) keeps its behaviour.
  """
  return [t[:-1] if len(t) > 3 and t.endswith("e") else t for t in tokenize(text)]
