"""The main job: a real ADK app, offline, whose every call goes out as a Context Pack.

A ~30-turn research conversation with tool calls, evidence and memory runs
under a deliberately small window (8K by default). Manifests land in a local
``FileArtifactService`` folder; a per-call budget table is printed at the end.
With ``GOOGLE_API_KEY`` set and ``--model gemini-…`` it talks to real Gemini.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import FileArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from .adk import manifest_store
from .calibration import describe_scale
from .adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
from .adk.plugin import ContextPackPlugin
from .adk.state_schema import LAST_FAULT_KEY
from .audit.spool import Spool
from .cli import CommandError
from .core import manifest as manifest_doc
from .core.allocator import ContextBudgetExhausted
from .core.errors import AetherFrameError
from .core.policy import PackPolicy
from .offline_model import OfflineLlm, tool_call

APP_NAME = "aether_demo"
USER_ID = "demo-user"
MAX_TURNS = 10_000
"""``--turns`` above this is refused: a 10,000-turn session already takes hours offline."""
STORE_TIMEOUT = 60.0
"""Seconds one manifest write to ``--out`` may take (a local folder; the writer's 5 s is for GCS)."""

TOPICS = (
    "pricing of the three competitors", "their onboarding flow", "enterprise security features",
    "API rate limits", "customer support hours", "data residency options", "mobile apps",
    "integration marketplace", "free tier limits", "roadmap announcements",
)


def search_notes(query: str) -> dict[str, Any]:
  """Searches the research notes for a topic."""
  words = query.lower().split()
  hits = [f"Notes on {t}: competitor A leads, B is catching up, C lags; see the source index." for t in TOPICS
          if any(w in t for w in words)]
  return {"query": query, "hits": hits[:2] or ["no notes found"]}


def save_finding(text: str) -> dict[str, str]:
  """Records a finding for the final report."""
  return {"status": "saved", "chars": str(len(text))}


def scripted_reply(llm_request) -> types.Content | str:
  """The offline model's script: search when asked to, summarise tool results, else acknowledge."""
  last = llm_request.contents[-1]
  if any(p.function_response for p in last.parts or ()):
    resp = next(p.function_response for p in last.parts if p.function_response)
    return f"Based on {resp.name}: {json.dumps(resp.response, sort_keys=True)[:160]}"
  text = " ".join(p.text for p in last.parts or () if p.text)
  request = text.rsplit("USER REQUEST (VERBATIM):", 1)[-1].strip()
  if request.lower().startswith("search"):
    return tool_call("search_notes", {"query": request.split(" ", 1)[-1][:60]})
  return f"Noted ({len(request.split())} words). Next I will check the acceptance list."


def iter_scripted_turns(n: int, *, topics: Sequence[str] = TOPICS, search_every: int = 3, spread: int = 23) -> Iterator[str]:
  """``scripted_turns``, one turn at a time: a long run holds one turn's text, not all of them."""
  for i in range(n):
    topic = topics[i % len(topics)]
    if search_every and i % search_every == 0:
      yield f"search {topic}"
    else:
      detail = " ".join(f"Point {j}: the {topic} differ in detail {i}-{j}." for j in range(4 + (i * 7) % spread))
      yield f"Turn {i}: here is what I found about {topic}. {detail}"


def scripted_turns(n: int, *, topics: Sequence[str] = TOPICS, search_every: int = 3, spread: int = 23) -> list[str]:
  """A deterministic research chat of varied length; every ``search_every``-th turn asks for a search (0: never)."""
  return list(iter_scripted_turns(n, topics=topics, search_every=search_every, spread=spread))


class DemoError(AetherFrameError, RuntimeError):
  """The run cannot go on: a pack that does not fit the window, a model that does not answer."""


class _OwnSpoolIsReported(logging.Filter):
  """The writer's warnings about the demo's private spool: the demo stops and says so itself."""

  def __init__(self, root: Path):
    super().__init__()
    self.root = str(root)

  def filter(self, record: logging.LogRecord) -> bool:
    try:
      return self.root not in record.getMessage()
    except Exception:  # a record that cannot be formatted is not ours to hide
      return True


def _unstored(writer: ManifestWriter, spool_root: Path) -> Optional[str]:
  """Why manifests did not reach the store (spooled, held in memory or lost), or None when all did."""
  stats = writer.stats
  if not (stats["spooled"] or stats["held"] or stats["lost"]):
    return None
  for path in Spool(spool_root).paths() if spool_root.is_dir() else ():
    try:
      reason = Spool.read(path).get("reason")
    except Exception:
      continue
    if reason:
      return str(reason).splitlines()[0]
  return "the store and the fallback spool both failed"


class _BudgetFaultsAreReported(logging.Filter):
  """The demo stops at a pack that does not fit and says so in one line; the plugin's traceback is noise."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], ContextBudgetExhausted))


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return text[0] if text else type(e).__name__


def _initial_state() -> dict[str, Any]:
  return {
      "plan": {
          "goal": "Write a competitor analysis with sources.",
          "role": "You are the Operator executing step 2 of the research plan.",
          "step": "Extract the top differentiators per competitor and list risks and gaps.",
          "step_id": "step-2",
          "acceptance": ["Cite an artifact:// source for every claim", "List at least three risks", "Flag unknowns explicitly"],
          "constraints": ["Answer in under 200 words", "Cost <= $0.20 per call"],
      },
      "tools": ["search_notes"],
      "knowledge": [
          {"uri": f"artifact://tasks/42/step-1/{t.replace(' ', '_')}.md",
           "summary": f"Summary of {t}: " + " ".join(f"finding {k} about {t}." for k in range(6)),
           "timestamp": 1767225600 + 3600 * n, "checklist": n < 2}
          for n, t in enumerate(TOPICS)
      ],
  }


def _session_dir(out_dir: Path, session_id: str) -> Path:
  # FileArtifactService's layout (google-adk 2.13): apps/<app>/users/<user>/sessions/<session>/;
  # tests/test_demo.py runs ``inspect`` on it, so a layout change fails loudly.
  return out_dir / "apps" / APP_NAME / "users" / USER_ID / "sessions" / session_id


async def run_demo(
    out_dir: Path, *, window: int = 8192, turns: int = 30, model: Optional[str] = None,
    sessions: Optional[list[str]] = None,
) -> tuple[Path, list[tuple[int, dict[str, Any]]]]:
  """Runs the demo session; returns its manifest folder and its verified manifests, in call order.

  Each manifest comes with its artifact version (ADK numbers versions from 0).

  The folder is the one session's, so ``aether-frame inspect`` accepts it even
  when ``out_dir`` holds other sessions (the memory-seeding one, earlier runs).
  ``sessions`` collects the ids of the sessions this run creates, as it creates
  them, so a caller can remove what a failed run wrote. The run stops with
  ``DemoError`` at the first plugin fault (a request sent without a pack), at
  the first manifest that ``out_dir`` did not take (the writer spools to a
  private folder, removed at the end: nothing of the run is left in the user's
  spool), or, with ``model``, at the first failed model call.
  """
  sessions = [] if sessions is None else sessions
  out_dir.mkdir(parents=True, exist_ok=True)
  spool_root = Path(tempfile.mkdtemp(prefix="aether-frame-demo-spool-"))
  try:
    return await _run_demo(out_dir, spool_root, window=window, turns=turns, model=model, sessions=sessions)
  finally:
    shutil.rmtree(spool_root, ignore_errors=True)


async def _run_demo(out_dir: Path, spool_root: Path, *, window: int, turns: int, model: Optional[str],
                    sessions: list[str]) -> tuple[Path, list[tuple[int, dict[str, Any]]]]:
  llm: Any = model if model else OfflineLlm(model="offline-demo", default=scripted_reply)
  agent = LlmAgent(
      name="researcher",
      model=llm,
      instruction="You are a careful research assistant. Use tools when asked to search.",
      tools=[search_notes, save_finding],
  )
  writer = ManifestWriter(spool_dir=spool_root, timeout=STORE_TIMEOUT)
  plugin = ContextPackPlugin(window=window, policy=PackPolicy(tool_scoping="mask"), manifest_writer=writer)
  memory = InMemoryMemoryService()
  runner = Runner(
      app=App(name=APP_NAME, root_agent=agent, plugins=[plugin]),
      session_service=InMemorySessionService(),
      artifact_service=FileArtifactService(root_dir=str(out_dir)),
      memory_service=memory,
  )

  interrupted = False

  def on_sigint() -> None:
    # asyncio.run's own handler only cancels the main task, and ADK's runner can
    # absorb that cancel while it cleans up its root node: the run then went on
    # to the next turn. The flag stops it at the next turn whatever happens.
    nonlocal interrupted
    interrupted = True
    main_task.cancel()

  main_task = asyncio.current_task()
  loop = asyncio.get_running_loop()
  try:
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    handles_sigint = True
  except (NotImplementedError, RuntimeError, ValueError):  # no signals here (Windows, not the main thread)
    handles_sigint = False

  async def say(session_id: str, text: str) -> None:
    if interrupted:
      raise KeyboardInterrupt
    try:
      async for _ in runner.run_async(user_id=USER_ID, session_id=session_id, new_message=types.Content(role="user", parts=[types.Part(text=text)])):
        pass
    except Exception as e:
      if model is None:  # the offline model does not fail: a bug, keep its traceback
        raise
      raise DemoError(f"--model {model}: the model call failed: {type(e).__name__}: {_first_line(e)}") from e
    if plugin.faults:
      state = (await runner.session_service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)).state
      fault = state.get(LAST_FAULT_KEY) or {}
      what = f"{fault.get('error')}: {fault.get('message')}" if fault else f"{plugin.faults} fault(s); see the log"
      if fault.get("error") == ContextBudgetExhausted.__name__:
        raise DemoError(f"--window {window} is too small for the demo's packs ({what})")
      raise DemoError(f"the context plugin sent a request without a pack ({what})")
    why = _unstored(writer, spool_root)
    if why is not None:
      raise DemoError(f"--out {out_dir}: the manifests cannot be stored there ({why})")

  plugin_log = logging.getLogger(ContextPackPlugin.__module__)
  quiet = _BudgetFaultsAreReported()
  plugin_log.addFilter(quiet)
  store_log = logging.getLogger(manifest_store.__name__)
  own_spool = _OwnSpoolIsReported(spool_root)
  store_log.addFilter(own_spool)
  adk_log = logging.getLogger("google_adk")
  adk_level = adk_log.level
  if model:  # a failed call is reported in one line; ADK would log its traceback first
    adk_log.setLevel(logging.CRITICAL)
  try:
    # A previous session seeds long-term memory.
    earlier = await runner.session_service.create_session(app_name=APP_NAME, user_id=USER_ID)
    sessions.append(earlier.id)
    for fact in ("The user prefers concise bullet points.", "Competitor B was acquired in 2025.", "Budget approval is needed above $10k."):
      await say(earlier.id, fact)
    await memory.add_session_to_memory(await runner.session_service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=earlier.id))

    session = await runner.session_service.create_session(app_name=APP_NAME, user_id=USER_ID, state=_initial_state())
    sessions.append(session.id)
    for text in iter_scripted_turns(turns):
      await say(session.id, text)
    if interrupted:
      raise KeyboardInterrupt
  except asyncio.CancelledError:
    if interrupted:
      raise KeyboardInterrupt from None
    raise
  finally:
    if handles_sigint:
      loop.remove_signal_handler(signal.SIGINT)
    plugin_log.removeFilter(quiet)
    store_log.removeFilter(own_spool)
    adk_log.setLevel(adk_level)
  manifests = []
  versions = await runner.artifact_service.list_versions(app_name=APP_NAME, user_id=USER_ID, session_id=session.id, filename=MANIFEST_FILENAME)
  for v in sorted(versions):
    part = await runner.artifact_service.load_artifact(
        app_name=APP_NAME, user_id=USER_ID, session_id=session.id, filename=MANIFEST_FILENAME, version=v
    )
    manifests.append((v, manifest_doc.verify(json.loads(part.inline_data.data), where=f"{MANIFEST_FILENAME} v{v}")))
  if not manifests:
    raise DemoError(f"--out {out_dir}: no manifest of the run was stored there")
  return _session_dir(out_dir, session.id), manifests


def dropped_per_layer(doc: dict[str, Any]) -> dict[str, int]:
  counts: dict[str, int] = {}
  for ev in doc["truncation_events"]:
    if ev["stage"] == "compress":
      continue
    n = len(ev.get("item_ids") or ()) or (ev["range"]["end"] - ev["range"]["start"] if "range" in ev else 0)
    counts[ev["layer"]] = counts.get(ev["layer"], 0) + n
  return counts


def pct_of_usable(doc: dict[str, Any]) -> int:
  """The pack's tokens as a share of the usable window, as the table shows them."""
  return round(100 * doc["totals"]["tokens"] / doc["usable"]) if doc["usable"] else 100


def format_table(doc: dict[str, Any]) -> str:
  """One call's budget table. The budget column adds up: the six layers' shares and
  ``unallocated`` make ``usable``; ``usable``, the output reserve and the calibration margin
  make the window. ``+unused`` is what a payload layer took on top of its share from
  tokens the other layers (and ``unallocated``) left unused: counted once, in its donors'
  rows, it lets that layer's ``used`` exceed its share."""
  dropped = dropped_per_layer(doc)
  rows = [f"{'layer':<17}{'budget':>8}{'+unused':>8}{'used':>8}{'dropped':>9}"]
  for name in ("system", "task", "tools", "evidence", "memory", "conversation"):
    layer = doc["layers"][name]
    extra = layer.get("received", 0)  # (absent from older manifests)
    rows.append(f"{name:<17}{layer['budget'] - extra:>8}{extra or '':>8}{layer['used']:>8}{dropped.get(name, 0):>9}")
  rows.append(f"{'unallocated':<17}{doc['totals']['unallocated']:>8}")
  rows.append(f"{'= usable':<17}{doc['usable']:>8}{'':>8}{doc['totals']['tokens']:>8}"
              f"{'':>9}  {pct_of_usable(doc)}% of usable")
  rows.append(f"{'slack (output)':<17}{doc['reserve']:>8}{'':>8}{'':>8}{'':>9}  reserved for the reply")
  # usable = floor((window - reserve) / token_scale): what the calibration holds back
  # because the provider counts more tokens than our tokenizer does.
  margin = doc["window"] - doc["reserve"] - doc["usable"]
  note = describe_scale(doc["token_scale"], (doc.get("runtime") or {}).get("calibration"))
  rows.append(f"{'calibration':<17}{margin:>8}{'':>8}{'':>8}{'':>9}  {note}")
  rows.append(f"{'= window':<17}{doc['window']:>8}")
  return "\n".join(rows)


def _check_model(model: str) -> None:
  """Refuses, before anything is written, a model ADK cannot resolve or Gemini without credentials."""
  vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("true", "1")
  if model.startswith("gemini") and not (os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or vertex):
    raise CommandError("--model gemini-… needs GOOGLE_API_KEY set; omit --model to run offline")
  from google.adk.models.registry import LLMRegistry
  try:
    LLMRegistry.resolve(model)
  except ValueError as e:
    raise CommandError(f"--model {model}: {_first_line(e)} Omit --model to run offline.") from None


def _prepare_out(out_dir: Path) -> Optional[Path]:
  """Creates ``--out`` and checks that it takes a file, before anything runs.

  Returns the topmost folder this created (None if ``out_dir`` was there), for
  ``_discard``. A folder that cannot be written (``/proc/1``, read-only) used
  to run the whole demo with every manifest spooled elsewhere, and exit 0.
  """
  created: Optional[Path] = None
  try:
    for folder in (out_dir, *out_dir.parents):
      if folder.exists():
        break
      created = folder
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".aether-frame-probe-", dir=out_dir)
    os.close(fd)
    os.unlink(probe)
  except OSError as e:
    if created is not None:
      shutil.rmtree(created, ignore_errors=True)
    raise CommandError(f"--out {out_dir}: cannot write there ({e.strerror or type(e).__name__})") from None
  return created


def _discard(out_dir: Path, created: Optional[Path], sessions: list[str]) -> None:
  """Removes what a failed run wrote: the folders the run made, else the run's own sessions."""
  if created is not None:
    shutil.rmtree(created, ignore_errors=True)
    return
  for session_id in sessions:
    shutil.rmtree(_session_dir(out_dir, session_id), ignore_errors=True)


def main(out: str = "aether-frame-demo", window: int = 8192, turns: int = 30, model: Optional[str] = None) -> int:
  """``aether-frame demo``. Bad arguments and failed runs raise ``CommandError`` (exit 2); a failed
  or interrupted run leaves ``out`` as it found it. ``turns`` is 1 to ``MAX_TURNS`` (10,000)."""
  if window <= 0:
    raise CommandError(f"--window must be positive, got {window}")
  if turns < 1:
    raise CommandError(f"--turns must be at least 1, got {turns}")
  if turns > MAX_TURNS:
    raise CommandError(f"--turns must be at most {MAX_TURNS:,}, got {turns:,}")
  if model:
    _check_model(model)
  out_dir = Path(out).expanduser().resolve()
  if out_dir.exists() and not out_dir.is_dir():
    raise CommandError(f"--out {out_dir}: not a folder")
  created = _prepare_out(out_dir)
  sessions: list[str] = []
  try:
    session_dir, manifests = asyncio.run(run_demo(out_dir, window=window, turns=turns, model=model, sessions=sessions))
  except BaseException as e:
    _discard(out_dir, created, sessions)
    if isinstance(e, DemoError):
      raise CommandError(str(e)) from None
    if isinstance(e, OSError) and e.filename and e.strerror:
      raise CommandError(f"{e.filename}: {e.strerror}") from None
    raise
  # Calls count from 1; manifest versions (what inspect/diff/replay take as LOCATION@N) from 0.
  for n, (version, doc) in enumerate(manifests, 1):
    status = "valid" if doc["valid"] else "INVALID: " + "; ".join(doc["problems"])
    print(f"\ncall {n} (v{version})  {doc['pack_id']}  agent={doc['agent']}  window={doc['window']}  "
          f"tokens {doc['totals']['tokens']}/{doc['usable']} usable ({pct_of_usable(doc)}%)  {status}")
    print(format_table(doc))
  # The folder also holds the memory-seeding session's manifests: the count is the demo session's.
  print(f"\n{len(manifests)} manifests of the demo session written under {out_dir} "
        f"(with the memory-seeding session's)")
  print(f"inspect the last one with: aether-frame inspect {shlex.quote(str(session_dir))}")
  return 0
