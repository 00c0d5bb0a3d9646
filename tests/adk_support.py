"""Real ADK Runner plumbing for end-to-end tests (no mocks of ADK)."""

from __future__ import annotations

from typing import Any, Optional

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.offline_model import OfflineLlm

APP = "testapp"
USER = "u1"


def make_runner(agent, plugins, *, artifact_service=None, session_service=None, memory_service=None, app_name=APP):
  app = App(name=app_name, root_agent=agent, plugins=list(plugins))
  return Runner(
      app=app,
      session_service=session_service or InMemorySessionService(),
      artifact_service=artifact_service if artifact_service is not None else InMemoryArtifactService(),
      memory_service=memory_service,
  )


async def new_session(runner, state: Optional[dict] = None, session_id: Optional[str] = None):
  return await runner.session_service.create_session(app_name=runner.app_name, user_id=USER, state=state or {}, session_id=session_id)


async def say(runner, session_id: str, text: str, parts: Optional[list] = None) -> list[Any]:
  msg = types.Content(role="user", parts=[types.Part(text=text), *(parts or [])])
  events = []
  async for ev in runner.run_async(user_id=USER, session_id=session_id, new_message=msg):
    events.append(ev)
  return events


def payload_of(request) -> str:
  last_user = [c for c in request.contents if c.role == "user" and any(p.text for p in c.parts or ())][-1]
  return next(p.text for p in last_user.parts if p.text)


def agent(name: str = "assistant", model: Optional[OfflineLlm] = None, **kw) -> tuple[LlmAgent, OfflineLlm]:
  model = model or OfflineLlm()
  return LlmAgent(name=name, model=model, instruction=kw.pop("instruction", "You are a helpful assistant."), **kw), model
