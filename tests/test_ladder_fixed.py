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
from aether_frame.core.items import Provenance, Trust
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


# -------------------------------------------- trim only the example clause
def _trim(description: str) -> str:
  decl = {"name": "t", "description": description, "parameters": {"type": "OBJECT"}}
  return json.loads(trim_tool_examples(json.dumps(decl)))["description"]


@pytest.mark.parametrize("description, expected", [
    # The example clause goes; the sentence end and the instructions after it stay.
    ("Look up a price, e.g. 'apple'. Must be called before checkout; never guess prices.",
     "Look up a price. Must be called before checkout; never guess prices."),
    ("A date, e.g. 2024-01-01; never a weekday name.", "A date; never a weekday name."),
    # Parenthesised examples go with their brackets; a clause inside brackets stops at the bracket.
    ("Look up a price (e.g. 'apple' or 'pear') before checkout.", "Look up a price before checkout."),
    ("The city (a name, e.g. Paris) to check.", "The city (a name) to check."),
    # An example sentence goes whole; dots inside code or after "e.g." do not end it.
    ("Searches the notes. For example, search_notes('a.b') finds a.b notes. Always cite the note id.",
     "Searches the notes. Always cite the note id."),
    ("Example: use a city, e.g. Paris. Never guess the city.", "Never guess the city."),
    # Line-oriented text: a newline ends the clause; an "Examples:" block ends at its last indented line.
    ("Args:\n  query: what to find, e.g. 'x'\n  limit: max rows", "Args:\n  query: what to find\n  limit: max rows"),
    ("Searches notes.\nExamples:\n  search_notes('x')\n  - search_notes('y')\nReturns: matching notes.",
     "Searches notes.\nReturns: matching notes."),
])
def test_trim_removes_only_the_example_clause(description, expected):
  assert _trim(description) == expected


def test_trim_leaves_a_declaration_without_examples_byte_identical():
  text = json.dumps({"name": "t", "description": "Returns:", "parameters": {"type": "OBJECT"}})
  assert trim_tool_examples(text) == text


def test_trim_keeps_for_example_used_as_prose():
  text = "Never call this for example data. Call it for real orders, for example A-1."
  assert _trim(text) == "Never call this for example data. Call it for real orders."


def test_a_larger_window_never_fails_where_a_smaller_one_compiles():
  """At the edge the fixed tiers fill the window and the elastic layers get nothing; the
  BUDGET line's omission phrases then tipped the pack over, and the validate loop gave
  up without the ladder's last rungs: windows 242-243 raised where 237 compiled."""
  text = ("Data gamma weather latency answer summary step request? Evidence latency prefix plan prefix token value "
          "weather risk field tool? Budget check request. Agent acceptance value test evidence gap request. Weather "
          "delta gap alpha window summary test alpha value answer? Acceptance budget memory vendor paris! Tool risk "
          "model window window acceptance latency answer token step gap plan cache gap?")
  dev = Trust.DEVELOPER
  items = [
      Item(id="system:instruction", layer=Layer.SYSTEM, trust=Trust.SYSTEM, pinned=True,
           text="Vendor data window summary step agent budget model? Field latency test call result token step request "
                "schema beta paris delta check gamma? Check weather model request cost step memory? Field beta beta result "
                "price prefix request token london acceptance model vendor tool?"),
      Item(id="task:goal", layer=Layer.TASK, kind="goal", trust=dev, pinned=True, text="Data latency tool evidence!"),
      Item(id="task:step", layer=Layer.TASK, kind="step", trust=dev, pinned=True,
           text="Cache token latency call cache field call gamma paris risk tool test token cost. User evidence gap price gamma."),
      Item(id="task:acceptance:0", layer=Layer.TASK, kind="acceptance", trust=dev, pinned=True,
           text="Acceptance beta london plan memory price tool gamma schema."),
      Item(id="task:user_request", layer=Layer.TASK, kind="user_request", trust=Trust.USER, pinned=True,
           text="Delta call cache prefix paris prefix prefix index gamma report step answer delta london?"),
      Item(id="evidence:0", layer=Layer.EVIDENCE, kind="evidence", text=text, provenance=Provenance(source="artifact://docs/e0.md")),
      Item(id="memory:0", layer=Layer.MEMORY, kind="memory", text=text, provenance=Provenance(source="memory://m0", author="user")),
  ]
  outcomes = {}
  for window in range(180, 320):
    try:
      compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=window, has_plan=True)), COUNTER)
      outcomes[window] = True
    except ContextBudgetExhausted as e:
      assert set(e.needs) >= {"system", "task", "tools"}, e.needs  # each layer's need, not a bare total
      outcomes[window] = False
  first = min(w for w, ok in outcomes.items() if ok)
  assert all(outcomes[w] for w in outcomes if w >= first), [w for w in outcomes if w >= first and not outcomes[w]]


def test_the_prefix_hash_follows_the_tool_declarations_as_sent():
  """docs/manifests.md: equal prefix hashes mean equal tool declarations. With its examples
  trimmed (the ladder's last rung) the declaration sent differs, and so must the hash."""
  desc = "Searches the notes. " + " ".join(f"For example: search for item number {i} in the archive." for i in range(40))
  tool = Item(id="tool:search", layer=Layer.TOOLS, kind="tool", meta={"name": "search"}, pinned=True,
              text=json.dumps({"name": "search", "description": desc, "parameters": {"type": "OBJECT"}}, sort_keys=True))
  items = [Item(id="system:instruction", layer=Layer.SYSTEM, text="Be helpful.", pinned=True),
           Item(id="task:user_request", layer=Layer.TASK, kind="user_request", text="find it", pinned=True), tool]

  def pack(max_out):
    return compile_pack(CompileInput(policy=PackPolicy(), call=CallInputs(items=items, window=2000, max_output_tokens=max_out)), COUNTER)

  roomy, tight = pack(200), pack(1400)
  assert not roomy.tool_overrides and "search" in tight.tool_overrides
  assert roomy.manifest["prefix_sha256"] != tight.manifest["prefix_sha256"]
  assert roomy.manifest["output_sha256"] != tight.manifest["output_sha256"]
  assert pack(200).manifest["prefix_sha256"] == roomy.manifest["prefix_sha256"]
