"""Replaying a corpus written under an earlier policy schema.

``PackPolicy.quantum`` is at most 4,096 for new policies; earlier versions
accepted any positive quantum and stored it with every call. Such a corpus
replays faithfully (the stored quantum is what that version allocated with),
and a stored policy that cannot be read is one line naming the field, never
a pydantic dump.
"""

from __future__ import annotations

import asyncio

import pytest
from google.adk.artifacts import FileArtifactService

from aether_frame.audit import inputs as ri
from aether_frame.cli import main
from aether_frame.core.compiler import CallInputs, CompileInput
from aether_frame.core.items import Item, Layer
from aether_frame.core.policy import PackPolicy
from tests.fixtures.audit_session import run_session

OLD_QUANTUM = 8192
"""Above today's limit of 4,096: a value only an earlier version could store."""


def _old_policy() -> PackPolicy:
  """A policy as a version before the 4,096 limit built it."""
  return PackPolicy().model_copy(update={"quantum": OLD_QUANTUM})


@pytest.fixture(scope="module")
def old_corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp("old") / "artifacts"
  run = asyncio.run(run_session(FileArtifactService(str(root)), 3, tools=False, policy=_old_policy()))
  assert run.plugin.faults == 0 and len(run.documents) == 3
  return root, run


def _one_line_error(capsys) -> str:
  err = capsys.readouterr().err
  assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
  return err


def test_a_stored_quantum_above_today_s_limit_replays_identically(old_corpus, capsys):
  root, _ = old_corpus
  assert main(["replay", str(root)]) == 0
  assert "3 calls: 3 identical, 0 different, 0 refused, 0 errors" in capsys.readouterr().out
  # The stored quantum is what that version allocated with: today's default rebuilds another pack.
  assert main(["replay", str(root), "-q", "--policy-override", '{"quantum": 64}']) == 1
  out = capsys.readouterr().out
  assert f"why: policy differs (quantum {OLD_QUANTUM} → 64)" in out and "0 errors" in out


def test_diff_and_report_read_a_stored_quantum_above_today_s_limit(old_corpus, tmp_path, capsys):
  root, run = old_corpus
  assert main(["diff", str(root), "1", "2"]) == 0
  out = capsys.readouterr().out
  assert "prefix_sha256" in out and "validation error" not in out
  page = tmp_path / "report.html"
  assert main(["report", str(root), "-o", str(page)]) == 0
  assert "validation error" not in page.read_text(encoding="utf-8")
  assert "3 calls" in capsys.readouterr().out


def test_an_override_of_another_field_keeps_the_stored_quantum(old_corpus, capsys):
  root, _ = old_corpus
  assert main(["replay", str(root), "-q", "--policy-override", '{"memory_top_k": 2}']) in (0, 1)
  out = capsys.readouterr().out
  assert "0 errors" in out and "quantum" not in out


def test_an_override_above_the_limit_is_still_refused_naming_the_field(old_corpus, capsys):
  root, _ = old_corpus
  assert main(["replay", str(root), "--policy-override", '{"quantum": 9000}']) == 2
  err = _one_line_error(capsys)
  assert "--policy-override: quantum:" in err and "4096" in err and "9000" in err


def test_a_stored_policy_no_version_accepted_is_one_line_naming_the_field():
  call = CallInputs(items=[Item(id="task:user_request", layer=Layer.TASK, kind="user_request", text="hi")], window=4096)
  bad = PackPolicy().model_copy(update={"quantum": 0})  # never valid: the allocator divides by it
  enc = ri.encode(CompileInput(policy=bad, history=[], call=call))
  with pytest.raises(ValueError) as err:
    ri.decode(enc.section, enc.blobs)
  msg = str(err.value)
  assert len(msg.splitlines()) == 1 and msg.startswith("stored policy: quantum:") and "(got 0)" in msg


def test_a_manifest_from_before_the_received_field_replays_identical():
  """``layers.<name>.received`` was added to manifest@1 later (its ``budget`` already counted
  those tokens): a stored manifest without it is compared on what it recorded, and a
  recorded value that differs is still a difference."""
  import copy

  from aether_frame.audit.replay import compare
  from aether_frame.core.compiler import compile_pack
  from aether_frame.tokenizers import get_counter

  history = [Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 == 0 else "model",
                  parts=[{"text": f"turn {i} " + "words " * 20}]) for i in range(2)]
  items = [Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Summarise.")]
  items += [Item(id=f"e{i}", layer=Layer.EVIDENCE, text=f"Evidence {i}: " + "vendor pricing detail. " * 10,
                 provenance={"source": f"artifact://e{i}"}, score=1 - i / 100) for i in range(20)]
  doc = compile_pack(CompileInput(policy=PackPolicy(), history=history, call=CallInputs(items=items, window=1000)),
                     get_counter()).manifest
  assert any(lay["received"] for lay in doc["layers"].values()), "the fixture must regrant: nothing was tested"
  older = copy.deepcopy(doc)
  for lay in older["layers"].values():
    del lay["received"]
  assert compare(older, doc) == ([], [], [])
  other = copy.deepcopy(doc)
  name = next(n for n, lay in other["layers"].items() if lay["received"])
  other["layers"][name]["received"] += 1
  diffs, layers, _ = compare(other, doc)
  assert layers == [name] and "received" in diffs[0]


def test_a_manifest_from_before_ranked_rows_replays_identical():
  """Evidence and memory rows carry the ranker's score and explain since a later version (they
  said score 0.0, no explain): an older manifest is compared on what it recorded, and a newer
  one whose recorded score differs is still a difference."""
  import copy

  from aether_frame.audit.replay import compare
  from aether_frame.core.compiler import compile_pack
  from aether_frame.retrieval import default_ranker
  from aether_frame.tokenizers import get_counter

  items = [Item(id="task:u", layer=Layer.TASK, kind="user_request", text="What did vendor 3 charge?")]
  items += [Item(id=f"e{i}", layer=Layer.EVIDENCE, text=f"Evidence {i}: vendor {i} pricing detail. " * 10,
                 provenance={"source": f"artifact://e{i}"}) for i in range(20)]
  items += [Item(id=f"m{i}", layer=Layer.MEMORY, text=f"Memory {i}: the user asked about vendor {i}.",
                 provenance={"source": f"memory://{i}", "timestamp": 1.7e9 + i}) for i in range(5)]
  doc = compile_pack(CompileInput(policy=PackPolicy(), history=[], call=CallInputs(items=items, window=1200, now=1.8e9)),
                     get_counter(), ranker=default_ranker()).manifest
  rows = [r for r in doc["items"] if r["layer"] in ("evidence", "memory")]
  assert {r["status"] for r in rows} >= {"included", "dropped"} and all("explain" in r["meta"] for r in rows)
  older = copy.deepcopy(doc)
  for r in older["items"]:
    if r["layer"] in ("evidence", "memory"):
      del r["meta"]
      r["score"] = 0.0
  assert compare(older, doc) == ([], [], [])
  other = copy.deepcopy(doc)
  row = next(r for r in other["items"] if r["layer"] == "evidence")
  row["score"] += 0.5
  diffs, layers, _ = compare(other, doc)
  assert layers == ["evidence"] and f"item {row['id']}: score" in diffs[0]
  older["items"][0]["status"] = "dropped" if older["items"][0]["status"] != "dropped" else "included"
  assert compare(older, doc)[0], "an older manifest still differs on what it did record"
