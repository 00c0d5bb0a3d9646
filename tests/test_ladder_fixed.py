"""The last rungs of the compress ladder: tool examples and step tightening.

They fire only when the fixed tiers themselves overflow the window, and each
is recorded as a compress event; if the pack still cannot fit, the compiler
fails loud with every layer's need.
"""

from __future__ import annotations

import json

import pytest

from aether_frame import CallInputs, CompileInput, ContextBudgetExhausted, Item, Layer, PackPolicy, compile_pack
from aether_frame.core.compress import trim_tool_examples
from aether_frame.tokenizers import get_counter

COUNTER = get_counter()

DECL = {
    "name": "search_notes",
    "description": "Searches the notes. " + "Example: search_notes(query='pricing') returns the notes on pricing. " * 30,
    "parameters": {"type": "OBJECT", "properties": {"query": {"type": "STRING", "description": "what to look for, e.g. pricing"}}},
}


def _call(window: int, step: str) -> CompileInput:
  items = [
      Item(id="sys", layer=Layer.SYSTEM, text="You are helpful.", pinned=True),
      Item(id="goal", layer=Layer.TASK, kind="goal", text="Compare vendors.", pinned=True),
      Item(id="step", layer=Layer.TASK, kind="step", text=step, pinned=True),
      Item(id="acc", layer=Layer.TASK, kind="acceptance", text="Cite sources.", pinned=True),
      Item(id="req", layer=Layer.TASK, kind="user_request", text="Go.", pinned=True),
      Item(id="tool:search_notes", layer=Layer.TOOLS, kind="tool", text=json.dumps(DECL, sort_keys=True), meta={"name": "search_notes"}, pinned=True),
  ]
  return CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=window))


def test_trim_keeps_schema_and_drops_examples():
  trimmed = json.loads(trim_tool_examples(json.dumps(DECL)))
  assert trimmed["name"] == "search_notes"
  assert trimmed["parameters"]["properties"]["query"]["type"] == "STRING"
  assert "Example" not in trimmed["description"] and "e.g." not in json.dumps(trimmed)
  assert trimmed["description"] == "Searches the notes."


def test_fixed_overflow_trims_tools_then_tightens_step_and_records_both():
  step = "Extract the differentiators. " + "Then cross-check every figure against the source index and note the gaps. " * 20
  full = compile_pack(_call(100_000, step), COUNTER)
  assert not [e for e in full.manifest["truncation_events"] if e["stage"] == "compress"]
  need = full.manifest["layers"]["tools"]["used"] + full.manifest["layers"]["task"]["budget"]
  # A window where the untrimmed fixed tiers cannot fit, but trimmed ones can.
  window = int((need * 0.55) / 0.9)
  pack = compile_pack(_call(window, step), COUNTER)
  reasons = [(e["layer"], e["reason"]) for e in pack.manifest["truncation_events"] if e["stage"] == "compress"]
  assert ("tools", "tool examples trimmed (fixed tiers over the window)") in reasons
  assert ("task", "step summary tightened (fixed tiers over the window)") in reasons
  assert json.loads(pack.tool_overrides["search_notes"])["description"] == "Searches the notes."
  assert "Extract the differentiators." in pack.payload and "cross-check" not in pack.payload
  assert pack.tokens <= pack.manifest["usable"]


def test_still_too_big_fails_loud_naming_layers():
  with pytest.raises(ContextBudgetExhausted) as err:
    compile_pack(_call(120, "Do it."), COUNTER)
  assert {"system", "task", "tools", "reserve"} <= set(err.value.needs)
  assert "window=120" in str(err.value)


def test_minimal_payload_has_task_but_no_data_sections():
  pack = compile_pack(_call(100_000, "Do it."), COUNTER)
  assert "STEP:\n- Do it." in pack.minimal_payload
  assert "<<<DATA" not in pack.minimal_payload
  assert pack.minimal_payload.endswith("USER REQUEST (VERBATIM):\nGo.")
