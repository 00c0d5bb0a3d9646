"""ADK's ``PreloadMemoryTool`` block, recognised so the pack's MEMORY layer can stand in for it.

``PreloadMemoryTool`` asks the memory service about the user turn on every
model call and inserts every hit, as one transient user content just before
that turn: unbudgeted, unfenced, outside the pack. The plugin asks the same
service the same question for its MEMORY layer (top-K, timestamped, fenced as
data), so the block would send those memories twice. Taken for a
conversation turn, it also changed the history on every call, which made
each call re-cost the whole session.

The block is rebuilt with ADK's own tool from the plugin's hits. When the
request's block matches it byte for byte, the MEMORY layer replaces it (and
the manifest says so); when it does not (another query, another ranking),
it rides along untouched, charged as pinned input context.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from google.genai import types

_SENTINEL = "\x00aether-frame-sentinel\x00"
_frame: Optional[tuple[str, str]] = None


class _ToolContext:
  """What ``PreloadMemoryTool.process_llm_request`` reads: the user turn and a memory search."""

  def __init__(self, memories: Sequence[Any]):
    self.user_content = types.Content(role="user", parts=[types.Part(text="?")])
    self._memories = list(memories)

  async def search_memory(self, query: str) -> Any:
    from google.adk.memory.base_memory_service import SearchMemoryResponse

    return SearchMemoryResponse(memories=self._memories)


async def render_block(memories: Sequence[Any]) -> Optional[str]:
  """The text ``PreloadMemoryTool`` would insert for ``memories``; None if it inserts nothing
  (or this ADK has no such tool)."""
  try:
    from google.adk.models.llm_request import LlmRequest
    from google.adk.tools.preload_memory_tool import PreloadMemoryTool
  except ImportError:
    return None
  request = LlmRequest(contents=[])
  await PreloadMemoryTool().process_llm_request(tool_context=_ToolContext(memories), llm_request=request)
  texts = [p.text for c in request.contents for p in c.parts or () if p.text]
  return texts[0] if len(request.contents) == 1 and len(texts) == 1 else None


async def frame() -> Optional[tuple[str, str]]:
  """The block's fixed text before and after its memories, as this ADK writes it."""
  global _frame
  if _frame is None:
    from google.adk.memory.memory_entry import MemoryEntry

    text = await render_block([MemoryEntry(content=types.Content(role="user", parts=[types.Part(text=_SENTINEL)]))])
    if text is None or text.count(_SENTINEL) != 1:
      return None
    head, _, tail = text.partition(_SENTINEL)
    _frame = (head, tail)
  return _frame


def block_text(content: types.Content, shape: tuple[str, str]) -> Optional[str]:
  """The content's text if it has the block's shape: a user content of one text part, framed."""
  if content.role != "user" or len(content.parts or ()) != 1:
    return None
  text = content.parts[0].text
  if not isinstance(text, str) or content.parts[0].thought:
    return None
  head, tail = shape
  return text if len(text) > len(head) + len(tail) and text.startswith(head) and text.endswith(tail) else None
