"""infra/apply_bucket_policy.sh: the rendered lifecycle, its guard rails, and a real gcloud run.

The gcloud run goes to the in-process GCS emulator (API endpoint override, no
credentials), and skips with a message where the Cloud SDK is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aether_frame.adk.manifest_store import BLOB_APP, BLOB_REFRESH_SECONDS
from tests.fixtures.gcs_emulator import gcs_emulator  # noqa: F401

SCRIPT = Path(__file__).resolve().parents[1] / "infra" / "apply_bucket_policy.sh"


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path, monkeypatch):
  monkeypatch.setenv("TMPDIR", str(tmp_path))  # a dry run keeps its rendered lifecycle file: keep it here


def _run(*args, env=None, timeout=240):
  return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_dry_run_renders_one_prefix_per_app_and_blob_ages_that_outlive_manifests():
  p = _run("gs://b", "--app", "shop", "--app", "support", "--dry-run")
  assert p.returncode == 0, p.stderr
  rules = json.loads(p.stdout.split("--- lifecycle", 1)[1].split("\n", 1)[1])["rule"]
  deletes = {tuple(r["condition"]["matchesPrefix"]): r["condition"]["age"] for r in rules if r["action"]["type"] == "Delete"}
  assert deletes[("shop/", "support/")] == 90
  assert deletes[(f"{BLOB_APP}/",)] >= 90 + BLOB_REFRESH_SECONDS / 86400  # the writer's refresh keeps referenced blobs alive
  for bad in (["--blob-days", "100"], ["--retention-days", "120"], ["--manifest-days", "x"]):
    p = _run("gs://b", "--app", "shop", "--dry-run", *bad)
    assert p.returncode == 2 and p.stderr.strip()
  assert _run("gs://b", "--dry-run").returncode == 2  # no --app


def test_a_custom_blob_app_gets_the_blob_rule_and_a_lock_without_retention_is_refused():
  """ManifestWriter(blob_app=...): the blobs took the manifests' 90-day rule (named as an --app) and
  expired with them. --lock-retention with no retention period was ignored without a word."""
  p = _run("gs://b", "--app", "shop", "--blob-app", "shop-blobs", "--dry-run")
  assert p.returncode == 0, p.stderr
  rules = json.loads(p.stdout.split("--- lifecycle", 1)[1].split("\n", 1)[1])["rule"]
  deletes = {tuple(r["condition"]["matchesPrefix"]): r["condition"]["age"] for r in rules if r["action"]["type"] == "Delete"}
  assert deletes == {("shop/",): 90, ("shop-blobs/",): 180}
  p = _run("gs://b", "--app", "shop-blobs", "--blob-app", "shop-blobs", "--dry-run")
  assert p.returncode == 2 and "where the input blobs live" in p.stderr
  p = _run("gs://b", "--app", "shop", "--lock-retention", "--retention-days", "0", "--dry-run")
  assert p.returncode == 2 and "--lock-retention needs a retention period" in p.stderr


def test_help_prints_the_usage_comment_only_and_a_dry_runs_lifecycle_file_is_kept():
  """--help printed the script's `set -euo pipefail` line; --dry-run printed a --lifecycle-file
  its exit trap had already deleted, so the printed commands could not be run (GCS review)."""
  p = _run("--help")
  assert p.returncode == 0 and p.stdout.startswith("Applies the manifest bucket's lifecycle") and "set -e" not in p.stdout
  p = _run("gs://b", "--app", "shop", "--dry-run")
  kept = re.search(r"--- lifecycle \((\S+), kept", p.stdout)
  assert p.returncode == 0 and kept, p.stdout[-300:]
  path = Path(kept.group(1))
  try:
    assert json.loads(path.read_text())["rule"]
  finally:
    path.unlink(missing_ok=True)


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="Google Cloud SDK (gcloud) not installed: the apply script is only dry-run tested")
def test_gcloud_applies_the_policy(gcs_emulator, tmp_path):  # noqa: F811
  gcs_emulator.create_bucket("manifests")
  env = dict(
      os.environ,
      CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE=gcs_emulator.url + "/",
      CLOUDSDK_AUTH_DISABLE_CREDENTIALS="True",
      CLOUDSDK_CORE_PROJECT="test-project",
      CLOUDSDK_CONFIG=str(tmp_path / "gcloud-config"),
      CLOUDSDK_CORE_DISABLE_PROMPTS="1",
  )
  p = _run("gs://manifests", "--app", "audit_app", "--retention-days", "30", env=env)
  assert p.returncode == 0, p.stdout + p.stderr
  from google.cloud import storage
  props = storage.Client().get_bucket("manifests")._properties
  rules = props["lifecycle"]["rule"]
  assert {"type": "Delete"} in [r["action"] for r in rules]
  assert any(r["condition"].get("matchesPrefix") == ["audit_app/"] and r["condition"]["age"] == 90 for r in rules)
  assert int(props["retentionPolicy"]["retentionPeriod"]) == 30 * 86400
  assert props["iamConfiguration"]["publicAccessPrevention"] == "enforced"
  assert props["versioning"] == {"enabled": False}
  assert re.search(r"Updating gs://manifests", p.stderr + p.stdout)
