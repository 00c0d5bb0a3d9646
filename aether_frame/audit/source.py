"""Where stored manifests are read from: ``gs://bucket/prefix``, a local folder, one file.

Reading goes through ADK's own artifact services (``GcsArtifactService``,
``FileArtifactService``), the same code that wrote them. The one thing ADK
has no call for is enumerating sessions; for GCS that is a delimiter listing
on the service's own storage client, for a folder a directory walk.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote, unquote

from ..core.errors import AetherFrameError
from ..adk.manifest_store import BLOB_APP, MANIFEST_FILENAME, blob_filename, blob_scope
from . import inputs as replay_inputs
from .terminal import FIELD_CONTROLS
from .spool import SpoolEntryError, check_entry, entry_blobs, is_entry, load_blobs

_LEGACY_BLOB_SESSION = "_context_pack_blobs"
_VERSION_SUFFIX = re.compile(r"^(?P<loc>.+)@(?P<v>-?\d+)$")
_VERSIONS_DIR = "versions"
"""FileArtifactService's folder of an artifact's versions: ``<artifact>/versions/<n>/<name>``."""
_TOMBSTONE_MIME = "application/octet-stream"
_SESSION_ID_READS = 8
"""Newest manifest versions read to settle a GCS path whose ids may hold '/' (rewind markers are skipped)."""


class LocationError(AetherFrameError, ValueError):
  """A location that cannot be read (bad syntax, nothing there)."""


@dataclass(frozen=True)
class SessionRef:
  app: str
  user: str
  session: str

  def label(self) -> str:
    """``APP/USER/SESSION``, a '/' inside an id as %2F (as a gs:// location takes it)."""
    return "/".join(_seg(x) for x in (self.app, self.user, self.session))


def _seg(name: str) -> str:
  """An id as a location segment: '%', '/' and control characters escaped, and an '@' that
  ``LOCATION@N`` would read as a version (``job@3``) written %40, so the printed label works
  as a location."""
  name = re.sub(r"@(?=-?\d+$)", "%40", name.replace("%", "%25").replace("/", "%2F"))
  # Control characters too (a client-chosen id): the label is printed, and read back as a location.
  return FIELD_CONTROLS.sub(lambda m: quote(m.group(), safe=""), name)


@dataclass
class StoredCall:
  """One stored manifest: where it lives, and the parsed document (not yet verified)."""

  ref: SessionRef
  version: Optional[int]
  doc: dict[str, Any]
  where: str

  @property
  def label(self) -> str:
    return f"{self.ref.label()} v{self.version}" if self.version is not None else self.where


def split_version(loc: str) -> tuple[str, Optional[int]]:
  """``LOCATION@N`` → (LOCATION, N); N < 0 counts from the end."""
  m = _VERSION_SUFFIX.match(loc)
  if m and not Path(loc).exists():
    return m.group("loc"), int(m.group("v"))
  return loc, None


def _part_bytes(part) -> Optional[bytes]:
  if part is None:
    return None
  if part.inline_data is not None and part.inline_data.data is not None:
    return part.inline_data.data
  if part.text is not None:
    return part.text.encode("utf-8")
  return None


class Source:
  """Manifests and blobs behind one ADK artifact service, optionally narrowed to a prefix."""

  def __init__(self, service, uri: str, app: Optional[str] = None, user: Optional[str] = None, session: Optional[str] = None,
               *, blob_app: str = BLOB_APP, filename: str = MANIFEST_FILENAME):
    self.service = service
    self.uri = uri
    self.app, self.user, self.session = app, user, session
    self.blob_app = blob_app
    self.filename = filename
    self._blobs: dict[tuple[str, str], dict[str, bytes]] = {}
    self.blob_fallback: Optional["Source"] = None
    """Where blobs missing here are looked for: ``--blobs``, or the folder ADK's CLI keeps them in."""

  async def _candidate_sessions(self) -> list[SessionRef]:
    raise NotImplementedError

  def location(self, ref: SessionRef) -> str:
    """A location that names ``ref`` alone, as the commands take it."""
    return f"{self.uri}/{ref.label()}"

  async def sessions(self) -> list[SessionRef]:
    """Sessions under the location that have at least one manifest."""
    if self.app and self.user and self.session:
      refs = [SessionRef(self.app, self.user, self.session)]
    else:
      refs = await self._candidate_sessions()
    out = []
    for ref in refs:
      if ref.app == self.blob_app:
        continue
      if await self.versions(ref):
        out.append(ref)
    return sorted(out, key=lambda r: (r.app, r.user, r.session))

  async def versions(self, ref: SessionRef) -> list[int]:
    return sorted(await self.service.list_versions(app_name=ref.app, user_id=ref.user, session_id=ref.session, filename=self.filename))

  async def _version_bytes(self, ref: SessionRef, version: int) -> Optional[bytes]:
    part = await self.service.load_artifact(app_name=ref.app, user_id=ref.user, session_id=ref.session, filename=self.filename, version=version)
    return _part_bytes(part)

  async def load(self, ref: SessionRef, version: int) -> StoredCall:
    data = await self._version_bytes(ref, version)
    where = f"{self.uri} {ref.label()} v{version}"
    if data is None:
      raise LocationError(f"{where}: manifest version not found")
    try:
      doc = json.loads(data)
    except ValueError as e:
      raise LocationError(f"{where}: not JSON ({e})") from None
    return StoredCall(ref, version, doc, where)

  async def calls(self, ref: SessionRef) -> list[StoredCall]:
    return [await self.load(ref, v) for v in await self.versions(ref)]

  async def blobs(self, app: str, user: str, keys: list[str]) -> dict[str, bytes]:
    """Fetches ``keys`` (cached); missing ones are left out for the caller to report."""
    cache = self._blobs.setdefault((app, user), {})
    todo = [k for k in dict.fromkeys(keys) if k not in cache]

    async def one(key: str) -> tuple[str, Optional[bytes]]:
      part = await self.service.load_artifact(**blob_scope(app, user, self.blob_app), filename=blob_filename(key))
      if part is None:  # written by an early version, in a pseudo-session of the app
        part = await self.service.load_artifact(app_name=app, user_id=user, session_id=_LEGACY_BLOB_SESSION, filename=blob_filename(key))
      data = _part_bytes(part)
      return key, _unpack(data, key) if data is not None else None

    for key, data in await asyncio.gather(*(one(k) for k in todo)):
      if data is not None:
        cache[key] = data
    missing = [k for k in todo if k not in cache]
    if missing and self.blob_fallback is not None:
      cache.update(await self.blob_fallback.blobs(app, user, missing))
    return cache


def _unpack(stored: bytes, key: str) -> bytes:
  """The blob's plain bytes; a corrupt gzip stream is returned as stored.

  The key check then refuses it by name as a tampered input, instead of a
  bare ``EOFError``/``BadGzipFile`` that names neither the blob nor the cause.
  """
  try:
    return replay_inputs.unpack_blob(stored, key)
  except (OSError, EOFError, zlib.error):
    return stored


class GcsSource(Source):
  """A bucket through ``GcsArtifactService``: ``APP/USER/SESSION/<filename>/<version>``.

  Ids may hold '/' (ADK allows it), so a name such as ``app/team/alice/s1/...``
  is either user ``team/alice`` with session ``s1`` or user ``team`` with
  session ``alice/s1``; a delimiter listing read the first segment as the user
  and the next as the session, and skipped both without a word. Manifest
  names are listed whole instead, and where a name has several readings the
  manifest's own ``session_id`` picks one.
  """

  def __init__(self, *a, **kw):
    super().__init__(*a, **kw)
    self._listed: dict[SessionRef, list[int]] = {}

  async def _candidate_sessions(self) -> list[SessionRef]:
    return await asyncio.to_thread(self._list_sessions)

  async def versions(self, ref: SessionRef) -> list[int]:
    if ref in self._listed:  # this listing already saw them: no second listing per session
      return self._listed[ref]
    return await super().versions(ref)

  def _prefixes(self, prefix: str) -> list[str]:
    it = self.service.storage_client.list_blobs(self.service.bucket, prefix=prefix, delimiter="/")
    for _ in it.pages:
      pass
    return sorted(p[len(prefix):].rstrip("/") for p in it.prefixes)

  def _list_sessions(self) -> list[SessionRef]:
    apps = [self.app] if self.app else [a for a in self._prefixes("") if a != self.blob_app]
    tail = f"/{self.filename}/"
    self._listed = {}
    for app in apps:
      paths: dict[str, list[int]] = {}  # "USER/SESSION" (either may hold '/') → versions
      under = f"{app}/{self.user}/" if self.user else f"{app}/"
      for blob in self.service.storage_client.list_blobs(self.service.bucket, prefix=under):
        path, sep, version = blob.name[len(app) + 1:].rpartition(tail)
        if sep and version.isdigit() and path:
          paths.setdefault(path, []).append(int(version))
      for path, versions in sorted(paths.items()):
        ref = self._resolve(app, path, versions)
        if ref is not None:
          self._listed[ref] = sorted(versions)
    return list(self._listed)

  def _resolve(self, app: str, path: str, versions: list[int]) -> Optional[SessionRef]:
    """The (user, session) stored at ``APP/path``; None when another user's (narrowed to one user)."""
    segs = path.split("/")
    # ADK reserves a first session segment "user" for user-scoped artifacts.
    splits = [("/".join(segs[:k]), "/".join(segs[k:])) for k in range(1, len(segs)) if segs[k] != "user"]
    if not splits:
      return None
    if len(splits) > 1:
      sessions = self._stored_session_ids(app, splits[0], versions)
      session = sessions[0] if sessions else None
      named = [sp for sp in splits if sp[1] in sessions]
      if named:
        splits = named
      elif self.user is not None:
        splits = [sp for sp in splits if sp[0] == self.user]
      else:
        where = f"{self.uri}/{app}/{path}"
        why = (f"the manifest's session_id {session!r} matches no split" if session is not None
               else f"none of its newest {min(len(versions), _SESSION_ID_READS)} manifest version(s) is readable JSON "
               "with a session_id (a rewind's empty marker, say)")
        raise LocationError(
            f"{where}: cannot tell where the user id ends and the session id begins (ids may hold '/', and "
            f"{why}); name the user: gs://BUCKET/{app}/USER, with a '/' inside an id written as %2F")
    user, session = splits[0]
    if self.user is not None and user != self.user:
      return None
    if self.session is not None and session != self.session:
      return None
    return SessionRef(app, user, session)

  def _stored_session_ids(self, app: str, split: tuple[str, str], versions: list[int]) -> list[str]:
    """The session ids the newest readable manifests at ``APP/USER/SESSION`` record, newest
    first (every reading names the same objects). An ``AgentTool`` child's manifest, stored in
    its caller's history, records the child's throwaway session: the caller's calls name the
    real one. A rewind's empty marker, a corrupt or vanished version is skipped: one of them
    must not make the whole bucket's listing fail."""
    from google.api_core.exceptions import NotFound

    found: list[str] = []
    for version in sorted(versions, reverse=True)[:_SESSION_ID_READS]:
      blob = self.service.bucket.blob(f"{app}/{split[0]}/{split[1]}/{self.filename}/{version}")
      try:
        doc = json.loads(blob.download_as_bytes())
      except (ValueError, NotFound):
        continue
      value = doc.get("session_id") if isinstance(doc, dict) else None
      if isinstance(value, str) and value not in found:
        found.append(value)
    return found


class FolderSource(Source):
  async def _version_bytes(self, ref: SessionRef, version: int) -> Optional[bytes]:
    """One version read from its own folder.

    ``FileArtifactService.load_artifact`` lists every version of the artifact
    to find one, so replaying a session of n calls listed n folders n times:
    about 80 s of directory reads for 2,000 calls, 30 min for 10,000.
    """
    locate = getattr(self.service, "_artifact_dir", None)
    if locate is None:  # not the FileArtifactService this was written against
      return await super()._version_bytes(ref, version)
    return await asyncio.to_thread(self._read_version, locate, ref, version)

  def _read_version(self, locate, ref: SessionRef, version: int) -> Optional[bytes]:
    artifact_dir, _ = locate(ref.app, ref.user, ref.session, self.filename)
    folder = artifact_dir / _VERSIONS_DIR / str(version)
    try:
      data = (folder / artifact_dir.name).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
      return None
    if not data and _mime_type(folder) == _TOMBSTONE_MIME:  # a session rewind's "removed" marker
      return None
    return data

  def location(self, ref: SessionRef) -> str:
    return str(Path(self.service.root_dir, "apps", ref.app, "users", ref.user, "sessions", ref.session))

  async def _candidate_sessions(self) -> list[SessionRef]:
    root = Path(self.service.root_dir) / "apps"
    out = []
    for app_dir in _subdirs(root, self.app):
      if app_dir.name == self.blob_app:
        continue
      users = _nested_ids(app_dir / "users", "sessions") if self.user is None else [
          (self.user, d) for d in _subdirs(app_dir / "users", self.user)]
      for user, user_dir in users:
        for session, sess_dir in _nested_ids(user_dir / "sessions", "artifacts"):
          if (sess_dir / "artifacts" / self.filename).exists():
            out.append(SessionRef(app_dir.name, user, session))
    return out

  async def blob_scopes(self) -> list[tuple[str, str]]:
    """(app, user) pairs holding input blobs here, for a manifest that does not say whose it is."""
    apps = Path(self.service.root_dir) / "apps"
    out: list[tuple[str, str]] = []
    # Narrowed to the blob folder itself (``--blobs apps/context-pack-blobs/users/U``): any app's.
    only_app = None if self.app == self.blob_app else self.app
    for user_dir in sorted((apps / self.blob_app / "users").glob("*")):
      for sess_dir in sorted((user_dir / "sessions").glob("*")):
        app = "user" if sess_dir.name == "_user" else sess_dir.name
        if only_app in (None, app) and self.user in (None, user_dir.name):
          out.append((app, user_dir.name))
    for sess_dir in sorted(apps.glob(f"*/users/*/sessions/{_LEGACY_BLOB_SESSION}")):
      pair = (sess_dir.parents[3].name, sess_dir.parents[1].name)
      if only_app in (None, pair[0]) and self.user in (None, pair[1]) and pair not in out:
        out.append(pair)
    return out


def _mime_type(version_dir: Path) -> Optional[str]:
  try:
    return json.loads((version_dir / "metadata.json").read_text(encoding="utf-8")).get("mimeType")
  except (OSError, ValueError, AttributeError):
    return None


def _subdirs(folder: Path, name: Optional[str]) -> list[Path]:
  """``folder``'s subfolders, or only the one called ``name``.

  Matched literally, not as a glob: a user id such as ``a[1]`` or ``bob*``
  must not select another user's manifests (``a1``, ``bobby``).
  """
  if name is not None:
    return [folder / name] if (folder / name).is_dir() else []
  return sorted(p for p in folder.glob("*") if p.is_dir())


def _nested_ids(folder: Path, marker: str, prefix: str = "") -> list[tuple[str, Path]]:
  """(id, folder) for each folder below ``folder`` holding a ``marker`` folder.

  ADK's FileArtifactService accepts ids with slashes (``team/alice``) and
  nests a folder per segment; listing only the first level skipped such
  users and sessions without a word. A symlinked folder is listed but not walked
  into: ADK writes none, and a link to its own parent made the walk endless.
  """
  out: list[tuple[str, Path]] = []
  if not folder.is_dir():
    return out
  for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
    name = prefix + sub.name
    if (sub / marker).is_dir():
      out.append((name, sub))
    if sub.name != marker and not sub.is_symlink():
      out += _nested_ids(sub, marker, name + "/")
  return out


class FileSource:
  """One manifest file: a spool entry (blobs inside), or a manifest with a blob source beside it."""

  def __init__(self, path: Path, blob_source: Optional[Source] = None):
    self.path = path
    self.uri = str(path)
    try:
      raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
      raise LocationError(f"{path}: not JSON ({e})") from None
    self.blob_source = blob_source
    self._bundle: dict[str, bytes] = {}
    self._search_scopes = False
    version = None
    if is_entry(raw):
      try:
        raw = load_blobs(check_entry(raw, str(path)), path.parent, str(path))
      except SpoolEntryError as e:
        raise LocationError(str(e)) from None
      self.ref = SessionRef(raw["app"], raw["user"], raw["session"])
      doc = raw["manifest"]
      self._bundle = entry_blobs(raw)
    else:
      doc = raw
      tree = _file_tree_position(path)
      if tree is not None and blob_source is None:
        root, self.ref, version = tree
        from google.adk.artifacts import FileArtifactService
        self.blob_source = FolderSource(FileArtifactService(root_dir=str(root)), str(root))
        self.blob_source.blob_fallback = _adk_cli_blobs(self.blob_source, path)
      elif blob_source is not None and blob_source.app and blob_source.user and blob_source.app != blob_source.blob_app:
        self.ref = SessionRef(blob_source.app, blob_source.user, str(doc.get("session_id") or "?"))
      else:  # a manifest does not say whose it is: a store root's, app folder's or blob folder's users are searched
        self.ref = SessionRef("?", "?", str(doc.get("session_id") if isinstance(doc, dict) else "?"))
        self._search_scopes = hasattr(blob_source, "blob_scopes")
    self.call = StoredCall(self.ref, version, doc, str(path))

  async def sessions(self) -> list[SessionRef]:
    return [self.ref]

  async def calls(self, ref: SessionRef) -> list[StoredCall]:
    return [self.call]

  async def versions(self, ref: SessionRef) -> list[int]:
    return [self.call.version if self.call.version is not None else 0]

  async def load(self, ref: SessionRef, version: int) -> StoredCall:
    return self.call

  async def blobs(self, app: str, user: str, keys: list[str]) -> dict[str, bytes]:
    have = dict(self._bundle)
    missing = [k for k in keys if k not in have]
    if not missing or self.blob_source is None:
      return have
    if not self._search_scopes:
      have.update(await self.blob_source.blobs(app, user, missing))
      return have
    # Any user's copy will do: every blob is checked against its key.
    for scope_app, scope_user in await self.blob_source.blob_scopes():
      have.update(await self.blob_source.blobs(scope_app, scope_user, missing))
      missing = [k for k in missing if k not in have]
      if not missing:
        break
    return have


def _apps_ancestors(parts: tuple[str, ...]):
  """(index, rest) for each ``apps`` component of ``parts``, innermost first (an app may be called apps)."""
  for i in range(len(parts) - 1, -1, -1):
    if parts[i] == "apps":
      yield i, parts[i + 1:]


def _file_tree_position(path: Path):
  """(root, ref, version) when ``path`` is a manifest inside a FileArtifactService tree."""
  parts = path.resolve().parts
  for i, rest in _apps_ancestors(parts):
    # apps/A/users/U/sessions/S/artifacts/<filename...>/versions/N/<name>
    if len(rest) < 9 or rest[1] != "users" or rest[3] != "sessions" or rest[5] != "artifacts" or rest[-3] != "versions":
      continue
    try:
      version = int(rest[-2])
    except ValueError:
      continue
    return Path(*parts[:i]), SessionRef(rest[0], rest[2], rest[4]), version
  return None


def open_location(loc: str, *, blobs: Optional[str] = None):
  """A ``Source`` for ``gs://bucket[/app[/user[/session]]]``, a folder, or a manifest file."""
  if loc.startswith("gs://"):
    bucket, _, prefix = loc[len("gs://"):].partition("/")
    if not bucket:
      raise LocationError(f"{loc}: no bucket name")
    segs = [unquote(s) for s in prefix.split("/") if s]  # an id's own '/' is written %2F
    if len(segs) > 3:
      raise LocationError(f"{loc}: expected gs://BUCKET[/APP[/USER[/SESSION]]], a '/' inside an id written as %2F")
    from google.adk.artifacts import GcsArtifactService  # needs google-cloud-storage
    segs += [None] * (3 - len(segs))
    source = GcsSource(GcsArtifactService(bucket), f"gs://{bucket}", *segs)
    source.blob_fallback = _blob_location(blobs) if blobs else None  # was ignored for a bucket location
    return source
  path = Path(loc).expanduser()
  if path.is_file():
    return FileSource(path, _blob_location(blobs) if blobs else None)
  if path.is_dir():
    source = _folder(path)
    source.blob_fallback = _blob_location(blobs) if blobs else _adk_cli_blobs(source, path)
    return source
  raise LocationError(f"{loc}: no such file, folder or gs:// location")


def _adk_cli_blobs(source: "FolderSource", given: Optional[Path] = None) -> Optional[Source]:
  """The input blobs of a store ``adk web`` / ``adk run`` / ``adk api_server`` wrote.

  ADK's CLI gives every app its own ``<agents>/<app>/.adk/artifacts`` store,
  so the blobs (saved under their own app name) land in
  ``<agents>/<blob app>/.adk/artifacts`` beside it, not in the manifests' store.
  The store is looked for along the path as given too (``given``, the
  location): ADK writes through a symlinked ``.adk``, which resolving hides.
  """
  from google.adk.artifacts import FileArtifactService
  resolved = Path(source.service.root_dir).resolve()
  roots = [resolved]
  if given is not None:
    unresolved = Path(os.path.abspath(given.expanduser()))
    roots += [p for p in (unresolved, *unresolved.parents) if p.name == "artifacts" and p.parent.name == ".adk"][:1]
  for root in roots:
    if root.name != "artifacts" or root.parent.name != ".adk":
      continue
    sibling = root.parent.parent.parent / source.blob_app / ".adk" / "artifacts"
    if sibling.is_dir() and sibling.resolve() != resolved:
      return FolderSource(FileArtifactService(root_dir=str(sibling)), str(sibling))
  return None


def _blob_location(loc: str) -> Source:
  """``--blobs``: a user's blobs in a bucket, or a folder (a store root's users are searched)."""
  if loc.startswith("gs://") and len([s for s in loc[len("gs://"):].split("/") if s]) < 3:
    raise LocationError(f"--blobs {loc}: a bucket is not searched; name whose blobs they are: gs://BUCKET/APP/USER")
  source = open_location(loc)
  if not isinstance(source, Source):
    raise LocationError(f"--blobs {loc}: expected gs://BUCKET/APP/USER or a FileArtifactService folder, not a file")
  return source


def _fits_layout(rest: tuple[str, ...], path: Path) -> bool:
  """``rest`` (below ``apps/``) is A, A/users, A/users/U, A/users/U/sessions, or a session or below."""
  if not rest or rest[1:2] not in ((), ("users",)) or rest[3:4] not in ((), ("sessions",)):
    return False
  if len(rest) == 1:  # only a name to go by: an app folder has users/ inside
    return (path / "users").is_dir()
  return len(rest) <= 5 or rest[5] == "artifacts"


def _folder(path: Path) -> FolderSource:
  """A store root (``apps/`` inside), or a folder below one's ``apps/``, narrowed to it."""
  from google.adk.artifacts import FileArtifactService
  if (path / "apps").is_dir():  # first: a store may itself sit below a folder called apps
    return FolderSource(FileArtifactService(root_dir=str(path)), str(path))
  parts = path.resolve().parts
  for i, rest in _apps_ancestors(parts):
    if not _fits_layout(rest, path):
      continue
    app = rest[0]
    user = rest[2] if len(rest) >= 3 else None
    session = rest[4] if len(rest) >= 5 else None
    return FolderSource(FileArtifactService(root_dir=str(Path(*parts[:i]))), str(path), app, user, session)
  raise LocationError(f"{path}: not a FileArtifactService folder (no apps/ inside, nor below "
                      f"apps/APP/users/USER/sessions/SESSION){_adk_cli_hint(path)}")


def _adk_cli_hint(path: Path) -> str:
  """Where ``adk run``/``web``/``api_server`` keep an agent folder's artifacts, when ``path`` is one
  (or the folder of agents): ``<agent>/.adk/artifacts``."""
  try:
    if (path / ".adk" / "artifacts").is_dir():
      return f"; ADK's CLI keeps this agent's artifacts in {path / '.adk' / 'artifacts'}"
    stores = sorted(p for p in path.glob("*/.adk/artifacts") if p.is_dir())
  except OSError:
    return ""
  if not stores:
    return ""
  more = f" (and {len(stores) - 3} more)" if len(stores) > 3 else ""
  return "; ADK's CLI keeps each agent's artifacts in <agent>/.adk/artifacts: " + ", ".join(map(str, stores[:3])) + more
