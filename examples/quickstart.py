"""Quickstart: a minimal ADK app whose every model call goes out as a Context Pack.

    .venv/bin/python examples/quickstart.py                      # offline, deterministic model
    GOOGLE_API_KEY=... .venv/bin/python examples/quickstart.py   # real Gemini (gemini-3.5-flash, ADK's default)

Each call's manifest is written under ./quickstart-artifacts/ (a FileArtifactService);
the script ends by printing the last pack and an ``aether-frame inspect`` command for it.
"""

import asyncio
import os

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import FileArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm

if os.environ.get("GOOGLE_API_KEY"):
  model = "gemini-3.5-flash"  # ADK 2.13's default model; in the window registry (1M tokens)
else:
  model = OfflineLlm(model="offline-quickstart", default="Noted: one sentence, as asked.")

agent = LlmAgent(name="assistant", model=model, instruction="You are a concise assistant.")
# "offline-quickstart" is not in the window registry. Without this override every call would
# record an UnknownModelWindow fault and go out unchanged, without a pack.
plugin = ContextPackPlugin(window_overrides={"offline-quickstart": 32_768})
app = App(name="quickstart", root_agent=agent, plugins=[plugin])


async def main() -> int:
  runner = Runner(app=app, session_service=InMemorySessionService(),
                  artifact_service=FileArtifactService(root_dir="quickstart-artifacts"))
  # Optional: a plan in session state fills the pack's ROLE/GOAL, STEP and ACCEPTANCE headers.
  # A plan with a step needs an acceptance list, or every pack is marked invalid.
  plan = {"goal": "Explain context packs to a new user.", "step": "Answer each question in one sentence.",
          "acceptance": ["One sentence per answer"]}
  session = await runner.session_service.create_session(app_name=app.name, user_id="me", state={"plan": plan})
  for question in ("What is a context window?", "Why keep the prompt prefix stable?"):
    message = types.Content(role="user", parts=[types.Part(text=question)])
    async for event in runner.run_async(user_id="me", session_id=session.id, new_message=message):
      if event.is_final_response() and event.content and event.content.parts:
        print(f"> {question}\n{event.content.parts[0].text}\n")

  state = (await runner.session_service.get_session(app_name=app.name, user_id="me", session_id=session.id)).state
  if plugin.faults or "aether_frame:last_pack" not in state:
    print(f"no context pack was sent: {state.get('aether_frame:last_fault')}")
    return 1
  print("last pack:", state["aether_frame:last_pack"])
  print(f"inspect it: aether-frame inspect quickstart-artifacts/apps/{app.name}/users/me/sessions/{session.id}")
  return 0


if __name__ == "__main__":
  raise SystemExit(asyncio.run(main()))
