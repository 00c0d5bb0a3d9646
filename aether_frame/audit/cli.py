"""The manifest subcommands of ``aether-frame``: replay, diff, report, flush, inspect.

``aether_frame.cli`` calls ``add_subcommands(subparsers)``. Every handler
returns an exit code: 0 fine, 1 a difference (replay) or entries left in the
spool (flush), 2 a refused (tampered) manifest, an unreadable location or a bad
argument, so ``replay`` can gate CI. ``diff`` exits 0 whatever it finds. Output
cut short by a closed pipe (``replay … | head``) exits 141 (128 + SIGPIPE, what
a shell reports for a process killed by it): the run did not finish, so it is
neither "fine" nor "a difference".
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

from ..calibration import describe_scale
from .terminal import shown

EXIT_OK, EXIT_DIFF, EXIT_REFUSED = 0, 1, 2
EXIT_BROKEN_PIPE = 141
"""stdout closed by its reader (``| head``): 128 + SIGPIPE, as a shell reports ``yes | head``."""

LOCATION_HELP = "gs://BUCKET[/APP[/USER[/SESSION]]], a FileArtifactService folder, or one manifest file"


def add_subcommands(subparsers) -> None:
  p = subparsers.add_parser("replay", help="rebuild every stored pack with this code; non-zero exit on any difference")
  p.add_argument("location", help=LOCATION_HELP + "; LOCATION@N replays version N only (negative counts from the end)")
  p.add_argument("--policy-override", metavar="JSON", help='PackPolicy fields to change before rebuilding, e.g. \'{"memory_top_k": 2}\' or @file.json')
  p.add_argument("--blobs", metavar="LOCATION", help="where the input blobs are, for a lone manifest file (gs://BUCKET/APP/USER or a folder)")
  p.add_argument("--json", action="store_true", help="one JSON object per call")
  p.add_argument("-q", "--quiet", action="store_true",
                 help="print only calls that differ or fail (and, without --json, the summary)")
  p.add_argument("--cold", action="store_true",
                 help="compile every call from scratch, not as the next call of its session's compiler: "
                      "the same packs, slower (time grows with the square of a session's length)")
  p.set_defaults(func=_replay)

  p = subparsers.add_parser("diff", help="what changed between two calls: items and tokens per layer, and where the prompt cache breaks")
  p.add_argument("refs", nargs="+", metavar="REF",
                 help="A B (each a manifest file or LOCATION@VERSION), or LOCATION A B (two versions of the one session at LOCATION)")
  p.add_argument("--blobs", metavar="LOCATION", help="where the input blobs are, for lone manifest files")
  p.add_argument("--json", action="store_true", help="one JSON object: per-layer changes, tokens, and where the prompt cache breaks")
  p.set_defaults(func=_diff)

  p = subparsers.add_parser("report", help="one self-contained HTML page for a session: budget bars, truncations, cache breaks")
  p.add_argument("session", help="the session: gs://BUCKET/APP/USER/SESSION or its folder (any location holding exactly one session)")
  p.add_argument("-o", "--out", help="output file (default: <session>.html)")
  p.set_defaults(func=_report)

  p = subparsers.add_parser("flush", help="upload spooled manifests (written while the store was down), oldest first")
  p.add_argument("--spool", help="spool folder (default: $AETHER_FRAME_SPOOL_DIR or ~/.local/state/aether-frame/spool)")
  p.add_argument("--to", metavar="LOCATION", help="send every entry here (gs://BUCKET or a folder) instead of the store it was meant for")
  p.add_argument("--timeout", type=float, default=30.0, help="seconds per upload before giving up (default 30)")
  p.add_argument("--wait", type=float, default=60.0,
                 help="seconds to wait while an agent process holds the spool (an upload of its may still land; default 60)")
  p.set_defaults(func=_flush)

  p = subparsers.add_parser("inspect", help="one manifest as a table: layer, budget, used, dropped")
  p.add_argument("manifest", help="a manifest file, or LOCATION[@VERSION] (latest when no version)")
  p.add_argument("--json", action="store_true", help="print the verified manifest")
  p.set_defaults(func=_inspect)


# ------------------------------------------------------------------ helpers
def _err(msg: str) -> None:
  print(f"aether-frame: {msg}", file=sys.stderr)


def _cloud_errors() -> tuple[type[BaseException], ...]:
  """Credential and API errors of the Google clients (google-cloud-storage is an extra)."""
  out: list[type[BaseException]] = []
  try:
    from google.auth.exceptions import GoogleAuthError
    out.append(GoogleAuthError)
  except ImportError:  # pragma: no cover - google-auth comes with google-adk
    pass
  try:
    from google.api_core.exceptions import GoogleAPIError
    out.append(GoogleAPIError)
  except ImportError:  # pragma: no cover
    pass
  return tuple(out)


def _json_line(value: Any, **kw: Any) -> str:
  """``--json`` output: UTF-8 JSON whatever it holds (a non-UTF-8 folder name is a lone surrogate: escaped)."""
  from ..core.canonical import escape_lone_surrogates
  return escape_lone_surrogates(json.dumps(value, ensure_ascii=False, **kw))


def _one_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return text[0] if text else type(e).__name__


def silence_stdout() -> None:
  """After a broken pipe: stdout goes to devnull, so the interpreter's final flush cannot fail again
  (the Python docs' recipe for SIGPIPE, in the ``signal`` module's notes)."""
  try:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
  except (OSError, ValueError, AttributeError):  # no real file descriptor (a captured stream)
    sys.stdout = open(os.devnull, "w")


def _run(coro) -> int:
  """Runs a handler; every failure is one line on stderr and exit 2, never 1 ("a difference").

  A reader that closes the pipe early (``replay … | head``) gets ``EXIT_BROKEN_PIPE`` (141): the run
  stopped at that point, so it proves neither "identical" (0) nor "a difference" (1).
  """
  from ..core.manifest import ManifestIntegrityError
  try:
    code = asyncio.run(coro)
    sys.stdout.flush()  # what is still buffered breaks the pipe here, not at exit
    return code
  except ManifestIntegrityError as e:
    _err(f"refused: {e}")
    return EXIT_REFUSED
  except BrokenPipeError:  # output piped into head & co.
    silence_stdout()
    return EXIT_BROKEN_PIPE
  except OSError as e:
    _err(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else f"{type(e).__name__}: {_one_line(e)}")
    return EXIT_REFUSED
  except ValueError as e:  # LocationError, SpoolEntryError, bad JSON or policy fields
    _err(_one_line(e))
    return EXIT_REFUSED
  except _cloud_errors() as e:
    _err(f"{type(e).__name__}: {_one_line(e)}")
    return EXIT_REFUSED
  except Exception as e:  # a bug: keep the traceback for the report, but not exit 1
    import traceback
    traceback.print_exc()
    _err(f"internal error: {type(e).__name__}: {_one_line(e)}")
    return EXIT_REFUSED


async def _one_session(source, loc: str):
  from .source import LocationError
  refs = await source.sessions()
  if not refs:
    raise LocationError(f"{loc}: no manifests found")
  if len(refs) > 1:
    names = ", ".join(r.label() for r in refs[:10]) + (" …" if len(refs) > 10 else "")
    raise LocationError(f"{loc}: holds {len(refs)} sessions ({names}); name one by its location, "
                        f"e.g. {source.location(refs[0])}")
  return refs[0]


async def _load_ref(ref: str, blobs: Optional[str], version: Optional[int] = None, source=None, *, check_schema: bool = True):
  """(source, stored call) for a ref; the latest version when none is given.

  ``check_schema=False`` leaves a manifest of another schema to the caller (replay reports it as a call).
  """
  from .source import LocationError, open_location, split_version
  if source is None:
    loc, v = split_version(ref)
    source = open_location(loc, blobs=blobs)
    version = v if version is None else version
  else:
    loc = source.uri
  sref = await _one_session(source, loc)
  versions = await source.versions(sref)
  if version is None:
    version = versions[-1]
  elif version < 0:
    if -version > len(versions):
      raise LocationError(f"{loc}: has {len(versions)} calls, no {version}")
    version = versions[version]
  elif version not in versions:
    raise LocationError(f"{loc}: no version {version} (have {versions[0]}..{versions[-1]})")
  call = await source.load(sref, version)
  if check_schema:
    _check_schema(call.doc, call.where)
  return source, call


def _check_schema(doc: Any, where: str) -> None:
  """Refuses a manifest of another schema (another aether-frame wrote it) instead of misreading it."""
  from ..core.compiler import MANIFEST_SCHEMA
  if isinstance(doc, dict) and "checksum" in doc and doc.get("schema") != MANIFEST_SCHEMA:
    from .source import LocationError
    raise LocationError(f"{where}: manifest schema {doc.get('schema')!r}, this aether-frame reads {MANIFEST_SCHEMA}")


# ------------------------------------------------------------------ replay
def _replay(args) -> int:
  return _run(_replay_async(args))


async def _stored_policy(source, call) -> Any:
  """The PackPolicy a stored call was compiled with, or None when it cannot be read (replay says why)."""
  from .inputs import stored_policy
  try:
    key = call.doc["inputs"]["policy"]
    blobs = await source.blobs(call.ref.app, call.ref.user, [key])
    return stored_policy(json.loads(blobs[key]))
  except Exception:
    return None


async def _check_override(source, override: Optional[dict], call=None) -> None:
  """Applies ``override`` to a stored policy (``call``'s, else the first call's, else the default) once,
  so a bad value is one error up front and not one per call."""
  from ..core.policy import PackPolicy
  from .inputs import policy_problem
  from .replay import apply_override
  if not override:
    return
  policy = None
  try:
    if call is None:
      refs = await source.sessions()
      versions = await source.versions(refs[0]) if refs else []
      call = await source.load(refs[0], versions[0]) if versions else None
    if call is not None:
      policy = await _stored_policy(source, call)
  except Exception:  # an unreadable location or call is reported by the replay itself
    policy = None
  try:
    apply_override(policy if policy is not None else PackPolicy(), override)
  except ValueError as e:  # pydantic's ValidationError is one
    raise ValueError(f"--policy-override: {policy_problem(e)}") from None


async def _replay_async(args) -> int:
  from ..core.policy import PackPolicy
  from .replay import parse_override, replay, replay_call
  from .source import open_location, split_version
  try:
    override = parse_override(args.policy_override)
  except json.JSONDecodeError as e:
    raise ValueError(f"--policy-override: not JSON ({e})") from None
  unknown = sorted(set(override or ()) - set(PackPolicy.model_fields))
  if unknown:  # refused once here, not once per call
    raise ValueError(f"--policy-override: not PackPolicy fields: {', '.join(unknown)}")
  loc, version = split_version(args.location)
  source = open_location(loc, blobs=args.blobs)
  call = None
  if version is not None:  # LOCATION@N: that one call, as inspect and diff take it
    _, call = await _load_ref(loc, args.blobs, version, source=source, check_schema=False)
  await _check_override(source, override, call)

  def show(rep) -> None:
    if rep.status == "identical" and args.quiet:
      return
    if args.json:
      print(_json_line(rep.as_dict()))
      return
    if rep.status == "identical":
      print(f"identical  {rep.label}")
      return
    if rep.status in ("refused", "error"):
      print(f"{rep.status.upper():<10} {rep.label}: {rep.error}")
      return
    print(f"DIFFERENT  {rep.label}: layers {', '.join(rep.layers) or '(none)'}")
    for c in rep.causes:
      print(f"    why: {c}")
    for d in rep.differences[:40]:
      print(f"    {d}")
    if len(rep.differences) > 40:
      print(f"    … {len(rep.differences) - 40} more")

  if call is not None:
    rep = await replay_call(source, call, policy_override=override)
    show(rep)
    reports = [rep]
  else:
    reports = await replay(source, policy_override=override, on_call=show, cold=args.cold)
  counts = {s: sum(1 for r in reports if r.status == s) for s in ("identical", "different", "refused", "error")}
  if not args.json:
    print(f"{len(reports)} calls: {counts['identical']} identical, {counts['different']} different, "
          f"{counts['refused']} refused, {counts['error']} errors")
  if not reports:
    _err(f"{args.location}: no manifests found")
    return EXIT_REFUSED
  if counts["refused"] or counts["error"]:
    return EXIT_REFUSED
  return EXIT_DIFF if counts["different"] else EXIT_OK


# -------------------------------------------------------------------- diff
def _diff(args) -> int:
  return _run(_diff_async(args))


async def _diff_async(args) -> int:
  from .diff import context_diff, format_diff
  from .replay import new_rebuilds, rebuild
  from .source import open_location
  refs = args.refs
  if len(refs) == 2:
    src_a, call_a = await _load_ref(refs[0], args.blobs)
    src_b, call_b = await _load_ref(refs[1], args.blobs)
  elif len(refs) == 3:
    try:
      va, vb = int(refs[1]), int(refs[2])
    except ValueError:
      raise ValueError("diff LOCATION A B: A and B must be version numbers (negative counts from the end)") from None
    src_a = src_b = open_location(refs[0], blobs=args.blobs)
    _, call_a = await _load_ref(refs[0], args.blobs, va, source=src_a)
    _, call_b = await _load_ref(refs[0], args.blobs, vb, source=src_b)
  else:
    raise ValueError("diff takes A B, or LOCATION A B")
  rebuilds = new_rebuilds(cold=True)  # two calls, maybe of two sessions: each compiled whole
  a = await rebuild(src_a, call_a, rebuilds=rebuilds)
  b = await rebuild(src_b, call_b, rebuilds=rebuilds)
  report = context_diff(a, b)
  note = _crossing_note(call_a, call_b)
  if args.json:
    if note:
      report.notes.insert(0, note)
    print(_json_line(report.as_dict(), indent=1))
  else:
    head, sep, rest = format_diff(report).partition("\n\n")  # the A:/B: lines, then the table
    print(f"{head}\nnote: {note}{sep}{rest}" if note else head + sep + rest)
  return EXIT_OK


def _owner(call) -> tuple[str, str]:
  """(session, agent) of a stored call: the store's session id, else the one the manifest records."""
  doc = call.doc if isinstance(call.doc, dict) else {}
  session = call.ref.session if call.ref.session not in ("?", "") else str(doc.get("session_id") or "?")
  return session, str(doc.get("agent") or "?")


def _crossing_note(call_a, call_b) -> str:
  """One line when A and B are not two calls of one agent in one session: their cache break and
  prefix change then compare unrelated prompts, not a change from one call to the next."""
  (sa, ga), (sb, gb) = _owner(call_a), _owner(call_b)
  scope_a, scope_b = (call_a.ref.app, call_a.ref.user), (call_b.ref.app, call_b.ref.user)
  other_user = "?" not in (*scope_a, *scope_b) and scope_a != scope_b  # a lone file does not say whose it is
  if sa != sb or other_user:
    what = f"different sessions ({sa} and {sb})"
  elif ga != gb:
    what = f"different agents ({ga} and {gb}) of session {sa}"
  else:
    return ""
  return f"A and B are from {what}: the cache break and prefix change compare unrelated prompts"


# ------------------------------------------------------------------ report
def _report(args) -> int:
  return _run(_report_async(args))


async def _report_async(args) -> int:
  from .files import write_atomic
  from .report import session_report
  from .source import open_location
  source = open_location(args.session)
  ref = await _one_session(source, args.session)
  page = await session_report(source, ref)
  out = Path(args.out or report_filename(ref.session))
  data = page.encode("utf-8", "backslashreplace")  # a non-UTF-8 folder name shows as \\udcff
  write_atomic(out, data)  # an existing report stays whole if this fails
  calls = page.count('<div class="bar">')
  print(f"wrote {out} ({len(data):,} bytes, {calls} calls)")
  return EXIT_OK


def report_filename(session: str) -> str:
  """``<session>.html`` in the working folder, whatever the session id holds.

  The id comes from the stored data (a lone manifest's ``session_id``, a
  spool entry): a slash or ``..`` in it must not place the file elsewhere.
  """
  name = re.sub(r"[^\w.-]", "_", session).lstrip(".") or "session"
  return f"{name}.html"


# ------------------------------------------------------------------- flush
def _flush(args) -> int:
  return _run(_flush_async(args))


def _bucket_of(store: str) -> str:
  bucket, _, prefix = store[len("gs://"):].partition("/")
  if not bucket or prefix.strip("/"):
    raise ValueError(f"{store}: flush writes to a bucket's root (GcsArtifactService has no prefix); pass gs://BUCKET")
  return bucket


def _service_for(store: str):
  if store.startswith("gs://"):
    bucket = _bucket_of(store)
    from google.adk.artifacts import GcsArtifactService
    return GcsArtifactService(bucket)
  if "@" in store and not Path(store).exists():
    raise ValueError(f"spooled for an in-process store ({store}); pass --to LOCATION to send it somewhere durable")
  from google.adk.artifacts import FileArtifactService
  return FileArtifactService(root_dir=store)


async def _flush_async(args) -> int:
  from ..adk.manifest_store import ManifestWriter, store_uri
  from .spool import Spool, default_spool_dir
  if not math.isfinite(args.timeout) or args.timeout <= 0:
    raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
  spool = Spool(args.spool or default_spool_dir())
  if spool.root.exists() and not spool.root.is_dir():
    raise ValueError(f"--spool {spool.root}: not a folder")
  if args.to and args.to.startswith("gs://"):
    _bucket_of(args.to)  # refused before anything is read
  paths = spool.pending()
  if not paths:
    print(f"spool {spool.root}: nothing to flush")
    return EXIT_OK
  stores: dict[str, None] = {}
  for p in paths:  # a bad entry stops everything here, before anything is sent out of order
    try:
      stores.setdefault(Spool.read(p)["store"], None)
    except FileNotFoundError:  # flushed meanwhile by the agent itself
      continue
  failed = False
  for store in stores:
    service = _service_for(args.to or store)
    writer = ManifestWriter(spool_dir=spool.root, timeout=args.timeout)
    deadline = time.monotonic() + max(0.0, args.wait)
    while True:
      rep = await writer.flush(service, store=store)
      if not rep.busy or time.monotonic() >= deadline:
        break
      await asyncio.sleep(0.25)
    target = store_uri(service)
    print(f"{store} → {target}: {rep.flushed} uploaded, {rep.already_stored} already there, {rep.pending} pending")
    for e in rep.errors:
      print(f"    error: {e}")
    failed |= bool(rep.pending or rep.errors)
  return EXIT_DIFF if failed else EXIT_OK


# ----------------------------------------------------------------- inspect
def _inspect(args) -> int:
  return _run(_inspect_async(args))


def layer_table(doc: dict[str, Any]) -> list[tuple[str, int, int, int, int, int]]:
  """(layer, budget share, tokens received from other layers' unused budget, used, dropped
  items, dropped tokens) per layer; the shares and ``unallocated`` add up to ``usable``."""
  from .replay import LAYERS
  dropped: dict[str, list[int]] = {}
  for r in doc.get("items", []):
    if r.get("status") in ("dropped", "filtered"):
      d = dropped.setdefault(r.get("layer", "?"), [0, 0])
      d[0] += 1
      d[1] += r.get("tokens") or 0
  tail = doc.get("tail") or {}
  # History groups cut (counted by the tail, their tokens by the range events),
  # plus the invocation's own steps trimmed (rows of their own, as above).
  conv_dropped = max(0, int(tail.get("history_len", 0)) - int(tail.get("kept", 0)))
  conv_tokens = sum(e.get("tokens", 0) for e in doc.get("truncation_events", []) if e.get("layer") == "conversation" and "range" in e)
  steps = dropped.get("conversation", [0, 0])
  dropped["conversation"] = [conv_dropped + steps[0], conv_tokens + steps[1]]
  rows = []
  for name in LAYERS:
    lay = doc.get("layers", {}).get(name)
    if lay is None:
      continue
    n, t = dropped.get(name, [0, 0])
    extra = lay.get("received", 0)  # (absent from older manifests)
    rows.append((name, lay.get("budget", 0) - extra, extra, lay.get("used", 0), n, t))
  return rows


async def _inspect_async(args) -> int:
  from ..core.manifest import verify
  _, call = await _load_ref(args.manifest, None)
  doc = verify(call.doc, where=call.where)
  if args.json:
    print(_json_line(doc, indent=1, sort_keys=True))
    return EXIT_OK
  totals = doc.get("totals") or {}
  tok = doc.get("tokenizer") or {}
  print(f"{call.label}  {shown(doc.get('pack_id'))}  checksum ok")
  print(f"session {shown(doc.get('session_id'))}  agent {shown(doc.get('agent'))}  model {shown(doc.get('model'))}  "
        f"tokenizer {shown(tok.get('name'))}")
  tokens, usable = totals.get("tokens") or 0, doc.get("usable") or 0
  share = f"{round(100 * tokens / usable)}% of usable" if usable else "no usable window"
  # The BUDGET line leaves out this invocation's steps: the pack stays the same across them.
  steps = ", before this invocation's steps" if (doc.get("tail") or {}).get("inflight_ids") else ""
  print(f"window {doc.get('window')}  reserve {doc.get('reserve')}  usable {usable}  "
        f"total {tokens} ({share}; BUDGET line said {totals.get('pct_used')}%{steps})  valid {doc.get('valid')}")
  print()
  print(f"{'layer':<14}{'budget':>8}{'+unused':>8}{'used':>8}{'dropped':>9}{'tokens':>8}")
  slack = None
  for name, budget, extra, used, n, t in layer_table(doc):
    if name == "slack":  # the reserve: outside usable, so the column above adds up to it
      slack = budget
      continue
    print(f"{name:<14}{budget:>8}{extra or '':>8}{used:>8}{n:>9}{t:>8}")
  print(f"{'unallocated':<14}{totals.get('unallocated', 0):>8}")
  print(f"{'= usable':<14}{usable:>8}{'':>8}{tokens:>8}")
  if slack is not None:
    print(f"{'slack':<14}{slack:>8}  reserved for the reply")
  window, reserve = doc.get("window"), doc.get("reserve")
  if isinstance(window, int) and isinstance(reserve, int) and window - reserve != usable:
    # usable = (window - reserve) / token_scale
    note = describe_scale(doc.get("token_scale"), (doc.get("runtime") or {}).get("calibration"))
    print(f"{'calibration':<14}{window - reserve - usable:>8}  {note}")
  print(f"{'= window':<14}{window!s:>8}")
  events = doc.get("truncation_events") or []
  if events:
    print()
    print(f"{len(events)} truncation events:")
    for e in events[:20]:
      print(f"  {shown(e.get('stage'))} {shown(e.get('layer'))}: {shown(e.get('reason'))}")
  return EXIT_OK
