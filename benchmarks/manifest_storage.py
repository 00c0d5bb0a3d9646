"""Bytes stored per model call for manifests with replayable inputs, with and without content-addressing.

Runs a real ADK session (Runner + ContextPackPlugin + the offline model): a
research chat with a plan, evidence, tool calls and long turns, ~30 turns,
capturing each call's manifest body and ``CompileInput``. Then it accounts,
for the same calls, what each storage layout would write:

- manifest only: no inputs (not replayable), the floor;
- inline inputs: the whole ``CompileInput`` JSON inside each manifest (and gzip'd);
- content-addressed: items/policy/chunks as sha256 blobs written once, the
  manifest listing hashes; history hash list flat or in chunks of N.

The default layout's numbers are cross-checked against what ``ManifestWriter``
really wrote through the ArtifactService during the run.

  TIKTOKEN_CACHE_DIR=/work/shared/tiktoken-cache PYTHONPATH=. python benchmarks/manifest_storage.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import statistics
from typing import Any, Optional

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_frame.adk.manifest_store import ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit import inputs as ri
from aether_frame.core import manifest as manifest_doc
from aether_frame.demo import scripted_reply, scripted_turns, search_notes
from aether_frame.offline_model import OfflineLlm

from _args import positive  # benchmarks/ is on sys.path when run as a script

DEFAULT = ri.DEFAULT_CHUNK_SIZE
TOPICS = ("pricing", "latency", "support", "security", "roadmap")


STATE = {
    "plan": {"goal": "Write a competitor analysis with sources.", "step": "Extract differentiators.", "step_id": "s2",
             "acceptance": ["Cite an artifact:// source for every claim", "Flag unknowns explicitly"]},
    "knowledge": [{"uri": f"artifact://notes/{t}.md", "summary": f"Summary of {t}: " + " ".join(f"finding {k} about {t}." for k in range(6)),
                   "timestamp": 1767225600 + 3600 * n, "checklist": n < 2} for n, t in enumerate(TOPICS)],
}


class Capture(ManifestWriter):
  def __init__(self):
    super().__init__(spool_dir=False)
    self.calls: list[tuple[dict, dict, Any]] = []
    self.written: list[dict] = []

  def prepare(self, body, runtime, compile_input=None, stream=None):
    ci = compile_input() if compile_input is not None else None
    self.calls.append((body, runtime, ci))
    return super().prepare(body, runtime, (lambda: ci) if ci is not None else None, stream)

  async def _store(self, service, entry, **kw):
    version = await super()._store(service, entry, **kw)
    self.written.append(dict(self.last_write))
    return version


async def run(turns: int, window: int) -> Capture:
  writer = Capture()
  agent = LlmAgent(name="researcher", model=OfflineLlm(default=scripted_reply), instruction="You are a careful research assistant.", tools=[search_notes])
  plugin = ContextPackPlugin(window=window, manifest_writer=writer)
  runner = Runner(app=App(name="bench", root_agent=agent, plugins=[plugin]),
                  session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService())
  s = await runner.session_service.create_session(app_name="bench", user_id="u", state=STATE)
  for text in scripted_turns(turns, topics=TOPICS, search_every=4, spread=19):
    async for _ in runner.run_async(user_id="u", session_id=s.id, new_message=types.Content(role="user", parts=[types.Part(text=text)])):
      pass
  if plugin.faults or not writer.calls:  # failed open: those calls wrote no manifest
    raise SystemExit(f"manifest_storage: the plugin faulted on {plugin.faults} call(s) at window {window} "
                     "(requests sent unmodified, no manifest); see the log above")
  return writer


def _doc_bytes(body: dict, runtime: dict) -> int:
  return len(manifest_doc.dumps(manifest_doc.finalize(body, runtime)))


def _gz(data: bytes) -> bytes:
  return gzip.compress(data, 6, mtime=0)


def layout_bytes(calls, *, chunk: Optional[int], inline: bool = False, gz: bool = False, blob_gzip: bool = True,
                 section_gz: bool = False) -> dict[str, Any]:
  """Per-call bytes written (manifest + new blobs) and objects written, for one layout.

  ``gz``: the whole manifest object gzip'd; ``section_gz``: only the inline
  inputs gzip'd + base64 inside a plain JSON manifest.
  """
  stored: set[str] = set()
  per_call, inputs_only, objects = [], [], 0
  for body, runtime, ci in calls:
    base = len(_gz(manifest_doc.dumps(manifest_doc.finalize(body, runtime)))) if gz else _doc_bytes(body, runtime)
    if chunk is None and not inline:
      n = base
      objs = 1
    elif inline:
      inputs: Any = ci.model_dump(mode="json")
      if section_gz:
        inputs = {"gzip_base64": base64.b64encode(_gz(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode())).decode()}
      raw = manifest_doc.dumps(manifest_doc.finalize({**body, "inputs": inputs}, runtime))
      n = len(_gz(raw)) if gz else len(raw)
      objs = 1
    else:
      enc = ri.encode(ci, chunk_size=chunk)
      raw = manifest_doc.dumps(manifest_doc.finalize({**body, "inputs": enc.section}, runtime))
      n = len(_gz(raw)) if gz else len(raw)
      new = [k for k in enc.blobs if k not in stored]
      stored.update(new)
      n += sum(len(ri.pack_blob(enc.blobs[k])[0]) if blob_gzip else len(enc.blobs[k]) for k in new)
      objs = 1 + len(new)
    per_call.append(n)
    inputs_only.append(n - base)
    objects += objs
  return {
      "total": sum(per_call), "mean": round(statistics.mean(per_call)), "last": per_call[-1],
      "inputs_mean": round(statistics.mean(inputs_only)), "inputs_last": inputs_only[-1],
      "objects": objects, "series": per_call,
  }



def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--turns", type=positive, default=30)
  ap.add_argument("--window", type=positive, default=8192)
  ap.add_argument("--json", action="store_true")
  args = ap.parse_args()
  writer = asyncio.run(run(args.turns, args.window))
  calls = writer.calls
  layouts = {
      "manifest only (not replayable)": dict(chunk=None),
      "inline inputs": dict(chunk=None, inline=True),
      "inline inputs, gzip+base64 inside the manifest": dict(chunk=None, inline=True, section_gz=True),
      "manifest only, whole object gzip'd": dict(chunk=None, gz=True),
      "inline inputs, whole object gzip'd": dict(chunk=None, inline=True, gz=True),
      f"content-addressed ({DEFAULT}), manifest object gzip'd": dict(chunk=DEFAULT, gz=True),
      "content-addressed, flat hash list": dict(chunk=10**9),
      **{f"content-addressed, chunks of {n}" + (" (default)" if n == DEFAULT else ""): dict(chunk=n) for n in (4, 8, 16, 32, 64)},
      f"content-addressed, chunks of {DEFAULT}, blobs not gzip'd": dict(chunk=DEFAULT, blob_gzip=False),
  }
  results = {name: layout_bytes(calls, **kw) for name, kw in layouts.items()}
  real = writer.written
  real_total = sum(w["manifest_bytes"] + w["blob_bytes"] for w in real)
  default = results[f"content-addressed, chunks of {DEFAULT} (default)"]["total"]
  if real_total != default:
    raise SystemExit(f"manifest_storage: the default layout's model ({default:,} bytes) does not match what "
                     f"ManifestWriter wrote ({real_total:,} bytes): the accounting is out of date")
  hist = [ci.history.__len__() for _, _, ci in calls]
  if args.json:
    print(json.dumps({"turns": args.turns, "calls": len(calls), "window": args.window, "history_groups_last": hist[-1], "layouts": results}, indent=1))
    return
  print(f"{args.turns} turns, {len(calls)} model calls, window {args.window}, history {hist[-1]} groups at the last call")
  print(f"(default layout cross-checked: ManifestWriter wrote {real_total:,} bytes through the ArtifactService)\n")
  print(f"{'layout':<52}{'total':>10}{'mean/call':>11}{'last call':>11}{'inputs/call':>13}{'inputs last':>13}{'objects':>9}")
  for name, r in results.items():
    print(f"{name:<52}{r['total']:>10,}{r['mean']:>11,}{r['last']:>11,}{r['inputs_mean']:>13,}{r['inputs_last']:>13,}{r['objects']:>9,}")
  marks = sorted({0, len(calls) // 4, len(calls) // 2, 3 * len(calls) // 4, len(calls) - 1})
  print("\nbytes written at calls " + ", ".join(str(m + 1) for m in marks) + ":")
  for name in ("inline inputs", "inline inputs, gzip+base64 inside the manifest", "content-addressed, flat hash list",
               f"content-addressed, chunks of {DEFAULT} (default)", "inline inputs, whole object gzip'd",
               f"content-addressed ({DEFAULT}), manifest object gzip'd"):
    print(f"  {name:<48}" + "".join(f"{results[name]['series'][m]:>9,}" for m in marks))


if __name__ == "__main__":
  main()
