"""A deterministic offline ``BaseLlm`` for the demo and the tests.

It records exactly what it received, answers from a script (text or tool
calls), and reports ``usage_metadata.prompt_token_count`` from a *different*
tokenizer (cl100k_base, plus framing), so the calibration loop has a real
gap to learn, as it would against Gemini.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Callable, Optional, Union

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

Reply = Union[str, types.Content, Callable[[LlmRequest], Union[str, types.Content]]]


class OfflineLlm(BaseLlm):
  """Scripted, recording model. ``script`` items are used in order, then ``default``."""

  model: str = "offline-model"
  script: list[Any] = Field(default_factory=list)
  default: Any = "ok"
  report_usage: bool = True
  _received: list[LlmRequest] = PrivateAttr(default_factory=list)
  _cursor: int = PrivateAttr(default=0)

  @classmethod
  def supported_models(cls) -> list[str]:
    return [r"offline-.*"]

  @property
  def received(self) -> list[LlmRequest]:
    return self._received

  async def generate_content_async(
      self, llm_request: LlmRequest, stream: bool = False
  ) -> AsyncGenerator[LlmResponse, None]:
    snapshot = llm_request.model_copy(deep=True)
    snapshot.tools_dict = dict(llm_request.tools_dict)
    self._received.append(snapshot)
    reply = self.script[self._cursor] if self._cursor < len(self.script) else self.default
    self._cursor += 1
    if callable(reply):
      reply = reply(llm_request)
    content = reply if isinstance(reply, types.Content) else types.Content(role="model", parts=[types.Part(text=str(reply))])
    usage = None
    if self.report_usage:
      usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=_foreign_count(llm_request))
    yield LlmResponse(content=content, usage_metadata=usage)


def _foreign_count(llm_request: LlmRequest) -> int:
  """Prompt size under another tokenizer, like a provider's own count."""
  from .adk.guard import count_request
  from .tokenizers import get_counter
  return count_request(llm_request.contents, llm_request.config, get_counter("cl100k_base")) + 3


def tool_call(name: str, args: Optional[dict] = None, call_id: Optional[str] = None) -> types.Content:
  return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args or {}, id=call_id))])
