"""The hand-written keys over ``Item``'s fields keep up with its fields.

``_fast_key`` (the digest memo's key), ``_digest`` and ``render.item_line``'s
memo key each list the fields by hand, for speed. A field added to ``Item``
(or ``Provenance``) and missed by one of them would give two different items
one digest, or a memoised line of another item: this test varies every field.
"""

from __future__ import annotations

import pytest

from aether_frame.core.compiler import _digest, _fast_key
from aether_frame.core.items import Item, Layer, Provenance, Trust
from aether_frame.core.render import _item_line, item_line

BASE = dict(id="e1", layer=Layer.EVIDENCE, text="the report", role="user", priority=1, score=0.5,
            provenance=Provenance(source="artifact://r.md", timestamp=1_700_000_000.0, author="ana"),
            trust=Trust.TOOL, pinned=False, kind="evidence", meta={"name": "r"})
VARIANTS = {
    "id": "e2", "layer": Layer.MEMORY, "text": "the other report", "parts": [{"text": "x"}], "role": "model",
    "tokens": 7, "priority": 2, "score": 0.25, "trust": Trust.USER, "pinned": True, "kind": "checklist_evidence",
    "meta": {"name": "s"},
    "provenance.source": "artifact://s.md", "provenance.timestamp": 1_700_000_001.0, "provenance.author": "bo",
}


def _variant(field: str) -> Item:
  kw = dict(BASE)
  if field.startswith("provenance."):
    kw["provenance"] = BASE["provenance"].model_copy(update={field.split(".")[1]: VARIANTS[field]})
  else:
    kw[field] = VARIANTS[field]
  return Item(**kw)


def test_every_field_is_varied_here():
  assert set(VARIANTS) == ({f for f in Item.model_fields if f != "provenance"}
                           | {f"provenance.{f}" for f in Provenance.model_fields})


@pytest.mark.parametrize("field", sorted(VARIANTS))
def test_a_changed_field_changes_the_digest_and_the_memo_keys(field):
  base, other = Item(**BASE), _variant(field)
  if field == "tokens":  # a count, not content: the digest leaves it out on purpose
    assert _digest(base) == _digest(other)
  else:
    assert _digest(base) != _digest(other)
  a, b = _fast_key(base), _fast_key(other)
  assert a is None or b is None or a != b
  item_line(base)  # memoised first: the variant must not get its line
  assert item_line(other) == _item_line(other)
