"""LoCoMo evidence recall at a token budget: does what we pack let the model answer?

For every answerable question (categories 1-4) the whole conversation is the
candidate history; each method fills a pack of at most B tokens (o200k_base)
with turns rendered ``[<session date>] <speaker>: <text>`` (plus the shared
photo's caption, counted), and the question scores the fraction of its
evidence turns that made it in. Every method selects through the compiler's
own path - ``rank_layer`` + ``select_within_budget`` over MEMORY items with
``kind="recall"`` - so the numbers are what the plugin would send.

Weights were set on dev conversations 26, 30, 41 only; 42 and 43 are test.

  python benchmarks/locomo_recall.py                  # all methods, dev + test
  python benchmarks/locomo_recall.py --no-embedder    # default-install methods only
  python benchmarks/locomo_recall.py --conversations 42 --budgets 2000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Sequence

from aether_frame.core.items import Item, Layer, Provenance, Trust
from aether_frame.core.rank import Ranker, rank_layer
from aether_frame.core.select import select_within_budget

DEFAULT_DATA = Path(os.environ.get("LOCOMO_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo"))
DEV = ("26", "30", "41")
TEST = ("42", "43")
BUDGETS = (1000, 2000, 4000, 8000)
CATEGORIES = (1, 2, 3, 4)


# -- data ---------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
  dia_id: str
  speaker: str
  text: str
  date: str
  timestamp: float
  caption: Optional[str] = None

  def render(self) -> str:
    out = f"[{self.date}] {self.speaker}: {self.text}"
    if self.caption:
      out += f" [shares a photo: {self.caption}]"
    return out


@dataclass(frozen=True)
class Question:
  text: str
  evidence: tuple[str, ...]
  category: int


@dataclass
class Conversation:
  name: str
  turns: list[Turn]
  questions: list[Question]
  now: float
  items: list[Item] = field(default_factory=list)


_SESSION = re.compile(r"session_(\d+)")


def parse_session_date(raw: str) -> datetime:
  """'1:56 pm on 8 May, 2023' -> a UTC datetime."""
  return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def normalise_evidence(raw: Sequence[str]) -> tuple[str, ...]:
  """Fixes the dataset's few malformed ids ('D8:6; D9:17', 'D:11:26'); unknown ids stay (as misses)."""
  out: list[str] = []
  for entry in raw:
    for part in re.split(r"[;,\s]+", entry.strip()):
      if not part:
        continue
      part = re.sub(r"^D:(\d+):(\d+)$", r"D\1:\2", part)
      if part not in out:
        out.append(part)
  return tuple(out)


class LocomoDataError(ValueError):
  """A --data file that is not a LoCoMo conversation (truncated, not JSON, another shape); names the file."""


def load_conversation(path: Path, *, captions: bool = True) -> Conversation:
  """One LoCoMo conversation file; ``LocomoDataError`` (naming the file) when it is not one."""
  try:
    data = json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise LocomoDataError(f"{path}: not JSON (truncated?): {e}") from None
  except (OSError, UnicodeDecodeError) as e:
    raise LocomoDataError(f"{path}: cannot read it: {e}") from None
  if not isinstance(data, dict):
    raise LocomoDataError(f"{path}: expected a LoCoMo conversation (a JSON object with session_N and qa), "
                          f"got a JSON {type(data).__name__}")
  try:
    return _parse_conversation(path, data, captions=captions)
  except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
    what = f"missing field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
    raise LocomoDataError(f"{path}: not a LoCoMo conversation ({what})") from None


def _parse_conversation(path: Path, data: dict, *, captions: bool) -> Conversation:
  sessions = sorted((int(m.group(1)), k) for k in data if (m := _SESSION.fullmatch(k)))
  turns: list[Turn] = []
  last = 0.0
  for _, key in sessions:
    when = parse_session_date(data[f"{key}_date_time"])
    date = f"{when.day} {when.strftime('%B %Y')}"
    ts = when.timestamp()
    last = max(last, ts)
    for t in data[key]:
      turns.append(
          Turn(
              dia_id=t["dia_id"],
              speaker=t["speaker"],
              text=t["text"],
              date=date,
              timestamp=ts,
              caption=(t.get("blip_caption") or None) if captions else None,
          )
      )
  questions = [
      Question(q["question"], normalise_evidence(q.get("evidence") or []), int(q["category"]))
      for q in data["qa"]
      if int(q["category"]) in CATEGORIES
  ]
  return Conversation(path.stem, turns, questions, now=last)


def token_counter() -> Callable[[Sequence[str]], list[int]]:
  """o200k_base counts through the project's counter (falls back to tiktoken directly)."""
  try:
    from aether_frame.tokenizers import get_counter

    counter = get_counter("o200k_base")
    if not getattr(counter, "exact", False):
      print("WARNING: o200k_base not available; token counts are ESTIMATES", file=sys.stderr)
    return counter.count_many
  except ImportError:  # pragma: no cover - before aether_frame.tokenizers existed
    import tiktoken

    enc = tiktoken.get_encoding("o200k_base")
    return lambda texts: [len(enc.encode_ordinary(t)) for t in texts]


def build_items(conv: Conversation, count: Callable[[Sequence[str]], list[int]]) -> list[Item]:
  """Turns as the plugin offers them: MEMORY items, kind "recall", provenance = turn id + time."""
  texts = [t.render() for t in conv.turns]
  tokens = count(texts)
  return [
      Item(
          id=t.dia_id,
          layer=Layer.MEMORY,
          text=text,
          tokens=n,
          kind="recall",
          trust=Trust.USER,
          provenance=Provenance(source=t.dia_id, timestamp=t.timestamp, author=t.speaker),
      )
      for t, text, n in zip(conv.turns, texts, tokens)
  ]


# -- baseline rankers -----------------------------------------------------------


class RecencyRanker:
  """The sliding window: newest first, i.e. last-N turns filled to the budget."""

  def rank(self, query: str, items: Sequence[Item], *, layer: Layer, now: Optional[float]) -> list[Item]:
    n = len(items)
    return [it.model_copy(update={"score": float(i) / n, "meta": {"explain": {"recency": float(i) / n}}}) for i, it in enumerate(items)]


class PlainBM25Ranker:
  """Plain ``bm25s`` over the rendered turns (its default tokenizer and English stop words).

  A static baseline: the index is rebuilt whenever the item set changes (here once
  per conversation).
  """

  def __init__(self) -> None:
    import bm25s

    self._bm25s = bm25s
    self._ids: Optional[tuple[str, ...]] = None
    self._retriever = None

  def rank(self, query: str, items: Sequence[Item], *, layer: Layer, now: Optional[float]) -> list[Item]:
    ids = tuple(it.id for it in items)
    if ids != self._ids:
      tokens = self._bm25s.tokenize([it.text for it in items], stopwords="en", show_progress=False)
      self._retriever = self._bm25s.BM25()
      self._retriever.index(tokens, show_progress=False)
      self._vocab = tokens.vocab
      self._ids = ids
    q = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
    q = [t for t in q if t in self._vocab]
    scores = self._retriever.get_scores(q) if q else [0.0] * len(items)
    return [
        it.model_copy(update={"score": round(float(s), 6), "meta": {"explain": {"bm25": round(float(s), 6)}}})
        for it, s in zip(items, scores)
    ]


# -- evaluation -------------------------------------------------------------------


@dataclass
class Result:
  method: str
  recall: dict[int, float]
  questions: int  # ranked (and timed)
  seconds: float
  scored: Optional[int] = None  # with evidence ids: the recall's denominator (None: all of them)

  @property
  def unscored(self) -> int:
    return self.questions - (self.questions if self.scored is None else self.scored)

  @property
  def per_question(self) -> float:
    return self.seconds / self.questions if self.questions else 0.0


def evaluate(
    method: str,
    make_ranker: Callable[[], Ranker],
    conversations: Sequence[Conversation],
    budgets: Sequence[int] = BUDGETS,
) -> Result:
  """Mean evidence recall per budget over every question of ``conversations`` that
  has evidence ids (a question without any has no recall to score: it is ranked
  and timed, but not counted in the mean).

  One ranker per conversation (as one per session in the plugin); ranking once
  per question, then selecting at each budget.
  """
  sums = {b: 0.0 for b in budgets}
  n = scored = 0
  elapsed = 0.0
  for conv in conversations:
    ranker = make_ranker()
    for q in conv.questions:
      t0 = time.perf_counter()
      ranked = rank_layer(conv.items, query=q.text, layer=Layer.MEMORY, ranker=ranker, now=conv.now)
      kept = {b: {it.id for it in select_within_budget(ranked, b).kept} for b in budgets}
      elapsed += time.perf_counter() - t0
      n += 1
      if not q.evidence:
        continue
      scored += 1
      for b in budgets:
        sums[b] += sum(e in kept[b] for e in q.evidence) / len(q.evidence)
  return Result(method, {b: sums[b] / scored if scored else 0.0 for b in budgets}, n, elapsed, scored)


def methods(with_embedder: bool) -> tuple[list[tuple[str, Callable[[], Ranker]]], Optional[str]]:
  """The columns: (name, ranker factory); the note says why the embedder column is missing."""
  from aether_frame.retrieval import HybridRanker

  out: list[tuple[str, Callable[[], Ranker]]] = [
      ("last-N window", RecencyRanker),
      ("BM25 (bm25s)", PlainBM25Ranker),
      ("ours (default)", lambda: HybridRanker()),
  ]
  note = None
  if with_embedder:
    try:
      from aether_frame.retrieval import LocalEmbedder

      embedder = LocalEmbedder()  # one model for every conversation; its cache keys by content
      out.append(("ours + MiniLM", lambda: HybridRanker(embedder=embedder)))
    except Exception as e:  # EmbedderUnavailable, or a broken torch install
      note = f"'ours + MiniLM' skipped: {e}"
  else:
    note = "'ours + MiniLM' skipped: --no-embedder"
  return out, note


def format_table(title: str, results: Sequence[Result], budgets: Sequence[int]) -> str:
  head = "| method | " + " | ".join(f"R@{b}" for b in budgets) + " | questions | s/question |"
  sep = "|---|" + "---:|" * len(budgets) + "---:|---:|"
  rows = [
      f"| {r.method} | " + " | ".join(f"{r.recall[b]:.3f}" for b in budgets)
      + f" | {r.questions - r.unscored} | {r.per_question:.4f} |"
      for r in results
  ]
  out = [f"**{title}**", "", head, sep, *rows]
  skipped = max((r.unscored for r in results), default=0)
  if skipped:
    out += ["", f"({skipped} question(s) without evidence ids are not scored; s/question includes them)"]
  return "\n".join(out)


def load_all(names: Sequence[str], data_dir: Path, *, captions: bool = True) -> list[Conversation]:
  count = token_counter()
  convs = []
  for name in names:
    conv = load_conversation(data_dir / f"{name}.json", captions=captions)
    conv.items = build_items(conv, count)
    convs.append(conv)
  return convs


def run(
    names: Sequence[str],
    *,
    data_dir: Path = DEFAULT_DATA,
    budgets: Sequence[int] = BUDGETS,
    with_embedder: bool = True,
    only: Optional[Sequence[str]] = None,
) -> tuple[dict[str, list[Result]], Optional[str]]:
  """Results per split ("dev", "test", or "other") for the given conversations."""
  convs = load_all(names, data_dir)
  splits: dict[str, list[Conversation]] = {}
  for conv in convs:
    split = "dev" if conv.name in DEV else "test" if conv.name in TEST else "other"
    splits.setdefault(split, []).append(conv)
  cols, note = methods(with_embedder)
  if only:
    cols = [c for c in cols if c[0] in only]
  out: dict[str, list[Result]] = {}
  for split in ("dev", "test", "other"):
    if split in splits:
      out[split] = [evaluate(name, factory, splits[split], budgets) for name, factory in cols]
  return out, note


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--conversations", default=",".join(DEV + TEST), help="comma-separated ids (default: 26,30,41,42,43)")
  parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
  parser.add_argument("--no-embedder", action="store_true", help="skip the local-embedder column")
  parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
  parser.add_argument("--json", type=Path, help="also write the results here")
  args = parser.parse_args(argv)
  names = [c.strip() for c in args.conversations.split(",") if c.strip()]
  try:
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
  except ValueError:
    parser.error(f"--budgets: expected comma-separated token counts, got {args.budgets!r}")
  if not budgets or min(budgets) < 1:
    parser.error(f"--budgets: expected positive token counts, got {args.budgets!r}")
  if not names:
    parser.error("--conversations: no conversation ids")
  if args.json is not None and not args.json.parent.is_dir():
    parser.error(f"--json: no directory {args.json.parent}")
  missing = [n for n in names if not (args.data / f"{n}.json").is_file()]
  if missing:
    parser.error(f"no LoCoMo file for conversation(s) {', '.join(missing)} in {args.data} (set --data or LOCOMO_DIR)")
  t0 = time.perf_counter()
  try:
    results, note = run(names, data_dir=args.data, budgets=budgets, with_embedder=not args.no_embedder)
  except LocomoDataError as e:  # the files are read before any ranking: nothing was computed yet
    print(f"{parser.prog}: error: {e}", file=sys.stderr)
    return 2
  titles = {"dev": f"dev ({', '.join(c for c in names if c in DEV)})", "test": f"test ({', '.join(c for c in names if c in TEST)})", "other": "other"}
  for split, rows in results.items():
    print(format_table(f"LoCoMo evidence recall, {titles[split]}, o200k_base", rows, budgets))
    print()
  if note:
    print(note)
  ranked = {}
  for rows in results.values():
    for r in rows:
      ranked[r.method] = ranked.get(r.method, 0.0) + r.seconds
  default_s = sum(v for k, v in ranked.items() if "MiniLM" not in k)
  vector_s = sum(v for k, v in ranked.items() if "MiniLM" in k)
  print(
      f"ranking+selection time: default-install methods {default_s:.1f}s"
      + (f", embedder column {vector_s:.1f}s (incl. embedding every turn once)" if vector_s else "")
      + f"; wall total {time.perf_counter() - t0:.1f}s"
  )
  if args.json:
    args.json.write_text(
        json.dumps(
            {s: [{"method": r.method, "recall": r.recall, "questions": r.questions, "scored": r.scored, "seconds": r.seconds}
                 for r in rows] for s, rows in results.items()},
            indent=2,
        )
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
