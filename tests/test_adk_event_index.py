"""Which forms of an event's content the event index finds it by.

ADK sends a model an event's content changed in known ways: the ``adk-``
call ids it made up stripped (for a model that pairs calls by order, such as
Gemini), kept (for one that pairs them by id: Anthropic, LiteLLM), and a
planner's ``thought`` flags cleared (PlanReActPlanner). Each form must lead
back to the event, or the history group is undated and points nowhere.
"""

from __future__ import annotations

import pytest
from google.adk.events import Event
from google.genai import types

from aether_frame.adk.sources import EventIndex, fingerprint


def _event() -> Event:
  content = types.Content(role="model", parts=[
      types.Part(text="/*PLANNING*/ look it up", thought=True),
      types.Part(function_call=types.FunctionCall(name="lookup", args={"q": "x"}, id="adk-123")),
  ])
  return Event(author="agent", content=content, invocation_id="i1", timestamp=1_700_000_000.0)


def _sent(content: types.Content, *, ids: bool, thought: bool) -> types.Content:
  parts = []
  for p in content.parts:
    update = {}
    if not thought and p.thought:
      update["thought"] = None
    if not ids and p.function_call is not None:
      update["function_call"] = p.function_call.model_copy(update={"id": None})
    parts.append(p.model_copy(update=update) if update else p)
  return content.model_copy(update={"parts": parts})


@pytest.mark.parametrize("ids", [True, False], ids=["ids-kept", "ids-stripped"])
@pytest.mark.parametrize("thought", [True, False], ids=["thought-kept", "thought-cleared"])
def test_every_form_adk_sends_finds_its_event(ids, thought):
  event = _event()
  index = EventIndex()
  index.update([event])
  info = index.by_fp.get(fingerprint(_sent(event.content, ids=ids, thought=thought)))
  assert info is not None and info.event_id == event.id and info.timestamp == event.timestamp
  assert event.content.parts[1].function_call.id == "adk-123"  # the event itself is left as it is
