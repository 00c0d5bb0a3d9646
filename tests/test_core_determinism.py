"""Determinism across processes: PYTHONHASHSEED must not change a single byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from aether_frame.core import manifest as manifest_doc

ROOT = Path(__file__).resolve().parents[1]

# Sets, dicts, unicode, duplicates, recall through the default ranker, a
# trimmed tail, compressed and dropped items: everything that could leak
# hash order into the output.
SCRIPT = textwrap.dedent("""
    import json, sys
    from aether_frame.core import manifest as manifest_doc
    from aether_frame.core.compiler import CallInputs, CompileInput, compile_pack
    from aether_frame.core.items import Item, Layer, Provenance
    from aether_frame.core.policy import PackPolicy
    from aether_frame.core.rank import ScanHistoryIndex
    from aether_frame.retrieval import default_ranker
    from aether_frame.tokenizers import get_counter

    words = sorted({"pricing", "vendor", "tier", "latency", "données", "数据", "cache", "budget", "risk"})
    history = []
    for i in range(40):
      if i % 7 == 3:
        parts = [{"function_call": {"id": f"c{i}", "name": "search", "args": {"q": words[i % len(words)], "k": i}}},
                 {"function_response": {"id": f"c{i}", "name": "search", "response": {"hits": words[: i % 5 + 1]}}}]
        history.append(Item(id=f"h{i}", layer=Layer.CONVERSATION, role="model", parts=parts, text=f"called search {i}"))
      else:
        text = f"Turn {i}: " + " ".join(words[(i + j) % len(words)] for j in range(30))
        history.append(Item(id=f"h{i}", layer=Layer.CONVERSATION, role="user" if i % 2 else "model", parts=[{"text": text}], text=text))
    items = [
        Item(id="system:i", layer=Layer.SYSTEM, text="You are an analyst."),
        Item(id="task:g", layer=Layer.TASK, kind="goal", text="Compare vendors on pricing."),
        Item(id="task:s", layer=Layer.TASK, kind="step", text="Find the cheapest tier."),
        Item(id="task:a", layer=Layer.TASK, kind="acceptance", text="Cite sources."),
        Item(id="task:u", layer=Layer.TASK, kind="user_request", text="Which vendor has the cheapest pricing tier?"),
        Item(id="tool:search", layer=Layer.TOOLS, kind="tool", text='{"name":"search"}', meta={"name": "search"}),
    ]
    for i in range(14):
      text = " ".join(f"Evidence {i} sentence {j} about {words[(i * j) % len(words)]} pricing." for j in range(1 + i % 9))
      items.append(Item(id=f"e{i}", layer=Layer.EVIDENCE, text=text, score=round((i * 37 % 11) / 11, 4),
                        kind="checklist_evidence" if i % 5 == 0 else "evidence",
                        provenance=Provenance(source=f"artifact://docs/{i}.md", timestamp=1.7e9 + i * 3600),
                        meta={"tags": sorted({"a", "b", words[i % len(words)]})}))
    for i in range(14):
      text = f"Memory {i}: the user said " + " ".join(words[(i + j) % len(words)] for j in range(12))
      items.append(Item(id=f"m{i}", layer=Layer.MEMORY, text=text if i != 9 else "Memory 2: dup", provenance=Provenance(
          source=f"memory://{i}", timestamp=1.7e9 - i * 60, author="user")))
    inp = CompileInput(policy=PackPolicy(memory_top_k=10, compress_min_tokens=20), history=history,
                       call=CallInputs(items=items, window=int(sys.argv[1]), now=1.7e9 + 86400, has_plan=True,
                                       meta={"invocation_id": "e-1", "agent": "a", "model": "m"}))
    ranker = default_ranker()
    pack = compile_pack(inp, get_counter(), ranker=ranker, history_index=ScanHistoryIndex(ranker))
    doc = manifest_doc.finalize(pack.manifest, {})
    sys.stdout.write(json.dumps({"payload": pack.payload, "manifest": manifest_doc.dumps(doc).decode("utf-8"),
                                 "events": len(pack.manifest["truncation_events"])}))
""")


def _run(seed: str, window: int) -> dict:
  env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
  out = subprocess.run([sys.executable, "-c", SCRIPT, str(window)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout)


def test_payload_and_manifest_bytes_identical_across_hash_seeds():
  for window in (2500, 6000):
    one, two = _run("1", window), _run("2", window)
    assert one["events"] > 0, "the fixture must exercise the ladder"
    assert one["payload"] == two["payload"]
    assert one["manifest"] == two["manifest"]
    manifest_doc.verify(json.loads(one["manifest"]))


# --- byte-identical fast paths -------------------------------------------------
from hypothesis import given, strategies as st  # noqa: E402

from aether_frame.core.canonical import canonical_json, canonical_parts_json, sequence_digest, sha256_hex  # noqa: E402
from aether_frame.core.costing import count_parts, count_parts_many  # noqa: E402
from aether_frame.tokenizers import get_counter  # noqa: E402

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.floats(allow_nan=False, allow_infinity=False))
_part = st.one_of(
    st.fixed_dictionaries({"text": st.text()}),  # the fast path
    st.dictionaries(st.sampled_from(["text", "thought", "function_call", "x"]), _json_leaf, max_size=3),
    st.builds(lambda t: {"text": t, "thought": True}, st.text()),
)


@given(parts=st.lists(_part, max_size=5))
def test_canonical_parts_json_is_byte_identical_to_canonical_json(parts):
  assert canonical_parts_json(parts) == canonical_json(parts)


@given(ids=st.lists(st.text(min_size=1, max_size=8), max_size=8), cut=st.integers(0, 8))
def test_sequence_digest_resumes_from_a_chain_head(ids, cut):
  from aether_frame.core.canonical import chain_step

  head = ""
  for gid in ids[:cut]:
    head = chain_step(head, gid)
  assert sequence_digest(ids[cut:], head) == sequence_digest(ids)
  assert sequence_digest(ids).startswith("sha256:") and len(sha256_hex("")) == 64


@given(lists=st.lists(st.lists(st.fixed_dictionaries({"text": st.text(max_size=40)}), max_size=3), max_size=6))
def test_batched_part_costing_equals_one_list_at_a_time(lists):
  counter = get_counter("o200k_base")
  assert count_parts_many(lists, counter) == [count_parts(p, counter) for p in lists]


def test_call_items_equal_as_keys_but_not_as_json_are_not_conflated():
  """-0.0 == 0.0 and 1 == True as dict keys; the per-session memo must not mix them up."""
  from aether_frame.core import compiler as compiler_module
  from aether_frame.core.compiler import CallInputs, CompilerSession
  from aether_frame.core.items import Item, Layer, Provenance
  from aether_frame.core.policy import PackPolicy

  counter = get_counter("o200k_base")

  def call(score, meta):
    return CallInputs(window=8000, items=[
        Item(id="r", layer=Layer.TASK, kind="user_request", text="hi"),
        Item(id="e", layer=Layer.EVIDENCE, text="fact", score=score, meta=meta,
             provenance=Provenance(source="artifact://a", timestamp=score)),
    ])

  for first, second in (((0.0, {}), (-0.0, {})), ((1.0, {"n": 1}), (1.0, {"n": True}))):
    warm = CompilerSession(PackPolicy(), counter)
    warm.compile(call(*first))
    compiler_module._DIGEST_MEMO.clear()  # as in a fresh process
    fresh = CompilerSession(PackPolicy(), counter).compile(call(*second))
    again = warm.compile(call(*second))
    assert canonical_json(again.manifest) == canonical_json(fresh.manifest)
    assert again.payload == fresh.payload
