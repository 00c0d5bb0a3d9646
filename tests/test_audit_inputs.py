"""Content-addressed replay inputs: exact round trip, shared chunks, tamper detection."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from aether_frame.audit import inputs as ri
from aether_frame.core.allocator import ContextBudgetExhausted
from aether_frame.core.canonical import canonical_json
from aether_frame.core.compiler import CallInputs, CompileInput, compile_pack
from aether_frame.core.items import Item, Layer
from aether_frame.core.policy import PackPolicy
from aether_frame.tokenizers import get_counter
from tests.strategies import IN_CI, compile_inputs


def _history(n: int) -> list[Item]:
  return [Item(id=f"t{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model", text=f"turn {i} " * 5, tokens=20)
          for i in range(n)]


def _ci(n: int) -> CompileInput:
  call = CallInputs(items=[Item(id="task:user_request", layer=Layer.TASK, kind="user_request", text="hello")], window=4096)
  return CompileInput(policy=PackPolicy(), history=_history(n), call=call)


@settings(max_examples=300 if IN_CI else 60)  # two compiles per example
@given(compile_inputs(max_turns=20))
def test_round_trip_is_exact_and_compiles_identically(ci):
  enc = ri.encode(ci, chunk_size=4)
  back = ri.decode(enc.section, enc.blobs)
  assert canonical_json(back.model_dump(mode="json")) == canonical_json(ci.model_dump(mode="json"))
  counter = get_counter("o200k_base")
  try:
    a = compile_pack(ci, counter).manifest
  except ContextBudgetExhausted as e:  # some generated inputs cannot fit at all: then both must fail alike
    with pytest.raises(type(e)) as again:
      compile_pack(back, counter)
    assert str(again.value) == str(e)
    return
  assert canonical_json(compile_pack(back, counter).manifest) == canonical_json(a)


def test_a_shared_memo_decodes_each_item_once_and_changes_nothing():
  """Replaying a session decoded every call's whole history again: parsing alone was
  quadratic in its length. Calls of one session share a memo of decoded items."""
  counter = get_counter("o200k_base")
  a, b = ri.encode(_ci(40), chunk_size=16), ri.encode(_ci(41), chunk_size=16)
  memo: dict = {}
  da = ri.decode(a.section, a.blobs, memo)
  seen = len(memo)
  db = ri.decode(b.section, b.blobs, memo)
  assert len(memo) == seen + 1 and all(x is y for x, y in zip(da.history, db.history))
  for enc, got in ((a, da), (b, db)):
    plain = ri.decode(enc.section, enc.blobs)
    assert canonical_json(got.model_dump(mode="json")) == canonical_json(plain.model_dump(mode="json"))
    assert canonical_json(compile_pack(got, counter).manifest) == canonical_json(compile_pack(plain, counter).manifest)


def test_consecutive_calls_share_full_chunks_and_items():
  a, b = ri.encode(_ci(40), chunk_size=16), ri.encode(_ci(41), chunk_size=16)
  la, lb = a.section["history"]["levels"], b.section["history"]["levels"]
  assert la[1] == lb[1] and len(la[1]) == 2  # two full chunks, shared
  assert len(la[0]) == 8 and len(lb[0]) == 9
  assert len(set(b.blobs) - set(a.blobs)) == 1  # only the new turn: policy, request item and chunks are shared


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 255, 256, 257, 4097])
def test_history_tree_round_trips_and_stays_small(n):
  enc = ri.encode(_ci(n), chunk_size=16)
  levels = enc.section["history"]["levels"]
  assert all(len(lv) < 16 for lv in levels) and sum(len(lv) for lv in levels) <= 15 * len(levels)
  assert [h.id for h in ri.decode(enc.section, enc.blobs).history] == [f"t{i}" for i in range(n)]
  # Fetching level by level: missing_chunks names what to get next, until nothing is missing.
  got = {k: enc.blobs[k] for k in ri.first_keys(enc.section)}
  rounds = 0
  while need := ri.missing_chunks(enc.section, got):
    got.update({k: enc.blobs[k] for k in need})
    rounds += 1
  assert rounds <= max(0, len(levels) - 2)
  assert ri.history_keys(enc.section, got) == ri.history_keys(enc.section, enc.blobs)


def test_encoder_serialises_each_history_item_once_per_stream():
  enc = ri.InputEncoder(16)
  ci = _ci(300)
  first = enc.encode(ci, stream="s1")
  grown = ci.model_copy(update={"history": ci.history + _history(301)[300:]})
  calls = []
  orig = ri._encode
  ri._encode = lambda v: calls.append(v) or orig(v)
  try:
    second = enc.encode(grown, stream="s1")
  finally:
    ri._encode = orig
  assert len(calls) == 3  # the new turn, the policy and the request item: not the 300 old turns
  assert ri.decode(second.section, second.blobs).history[-1].id == "t300"
  assert second.section == ri.encode(grown, chunk_size=16).section and second.blobs == ri.encode(grown, chunk_size=16).blobs
  # A rewritten history (different objects) is detected, not trusted.
  rewritten = ci.model_copy(update={"history": _history(300)[:150] + [h.model_copy(update={"text": "edited"}) for h in _history(300)[150:]]})
  assert enc.encode(rewritten, stream="s1").section == ri.encode(rewritten, chunk_size=16).section
  assert first.section["history"]["levels"][1] == second.section["history"]["levels"][1]


def test_tampered_or_missing_blob_is_refused():
  enc = ri.encode(_ci(20), chunk_size=16)
  key = enc.section["history"]["levels"][0][0]
  bad = dict(enc.blobs)
  bad[key] = bad[key].replace(b"turn", b"TURN")
  with pytest.raises(ri.BlobIntegrityError, match="tampered"):
    ri.decode(enc.section, bad)
  del bad[key]
  with pytest.raises(ri.BlobIntegrityError, match="missing"):
    ri.decode(enc.section, bad)


def test_large_blobs_are_gzipped_and_keyed_by_plain_json():
  data = canonical_json({"text": "x" * 5000}).encode()
  stored, mime = ri.pack_blob(data)
  assert mime == "application/gzip" and len(stored) < len(data) / 10
  assert ri.unpack_blob(stored) == data and ri.blob_key(data) == ri.blob_key(ri.unpack_blob(stored))
  assert ri.pack_blob(b"{}") == (b"{}", "application/json")
  assert ri.pack_blob(data)[0] == stored  # deterministic (mtime 0): same key, same bytes


def test_a_stored_blob_that_unpacks_past_the_limit_is_refused_by_name(monkeypatch):
  """A gzip bomb planted in the store (2 MB unpacking to 2 GiB) drove replay past 4 GB of
  memory before the key check could refuse it (security review)."""
  import gzip

  import pytest

  from aether_frame.audit import inputs

  monkeypatch.setattr(inputs, "MAX_BLOB_BYTES", 1 << 20)
  bomb = gzip.compress(b"\0" * (4 << 20), mtime=0)
  with pytest.raises(inputs.BlobIntegrityError, match="stored blob abc123 unpacks past 1048576 bytes"):
    inputs.unpack_blob(bomb, "abc123")
  plain = b'{"a": 1}' * 1000
  assert inputs.unpack_blob(gzip.compress(plain, mtime=0)) == plain  # within the limit: as before
  assert inputs.unpack_blob(plain) == plain
  with pytest.raises(gzip.BadGzipFile):
    inputs.unpack_blob(gzip.compress(plain, mtime=0) + b"junk")
  with pytest.raises((EOFError, gzip.BadGzipFile)):
    inputs.unpack_blob(gzip.compress(plain, mtime=0)[:-10])
