#!/usr/bin/env bash
# Applies the manifest bucket's lifecycle, retention and access settings with gcloud (or gsutil).
#
#   infra/apply_bucket_policy.sh gs://BUCKET --app APP [--app APP2 ...] [--create --location EU]
#       [--manifest-days 90] [--blob-days 180] [--retention-days 30] [--soft-delete-days 7]
#       [--nearline-days 30] [--blob-app context-pack-blobs] [--lock-retention] [--dry-run]
#
# The lifecycle rules come from infra/lifecycle.json, with the YOUR_APP/ prefix replaced by one
# prefix per --app (ADK's GcsArtifactService stores objects as <app>/<user>/<session>/<file>/<n>),
# and the ages from infra/retention.env or the flags. --blob-app names where the input blobs live
# when ManifestWriter(blob_app=...) changed it. --dry-run prints the commands and the rendered
# lifecycle file without touching anything.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=retention.env
source "$here/retention.env"

# The value of option $1 is $2: present, not empty, and not the next option (`--app --dry-run`
# once took "--dry-run" as the app and ran the real update).
value() {
  if [ "$#" -lt 2 ] || [ -z "$2" ] || [[ "$2" == -* ]]; then
    echo "$1 needs a value${2:+, got '$2'}" >&2; exit 2
  fi
}

bucket="" apps=() create=0 location="" lock=0 dry=0 blob_app="context-pack-blobs"
while [ $# -gt 0 ]; do
  case "$1" in
    gs://*)
      [ -z "$bucket" ] || { echo "one bucket at a time: got $bucket and $1" >&2; exit 2; }
      name="${1#gs://}"; name="${name%/}"
      # A bucket name (GCS naming rules, 3-63 characters aside: gcloud checks those): lowercase letters,
      # digits, '-', '_' and '.', starting and ending with a letter or digit; no object path after it.
      if [[ ! "$name" =~ ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$ ]] || [ "${#name}" -gt 222 ]; then
        echo "expected gs://BUCKET (a bucket name, no path after it), got '$1'" >&2; exit 2
      fi
      bucket="gs://$name" ;;
    --app)
      value "$@"
      app="${2%/}"
      # ADK app names: a letter (or '_') first, then letters, digits, '_' and '-'. An empty name would
      # render the prefix "/", which matches nothing: no manifest would ever expire.
      if [[ ! "$app" =~ ^[A-Za-z_][A-Za-z0-9_-]*$ ]]; then
        echo "--app: expected an ADK app name (letters, digits, '_' and '-', a letter first), got '$2'" >&2; exit 2
      fi
      apps+=("$app"); shift ;;
    --blob-app)
      value "$@"
      blob_app="${2%/}"
      if [[ ! "$blob_app" =~ ^[A-Za-z_][A-Za-z0-9_-]*$ ]]; then
        echo "--blob-app: expected an ADK app name (letters, digits, '_' and '-', a letter first), got '$2'" >&2; exit 2
      fi
      shift ;;
    --location) value "$@"; location="$2"; shift ;;
    --manifest-days) value "$@"; MANIFEST_DAYS="$2"; shift ;;
    --blob-days) value "$@"; BLOB_DAYS="$2"; shift ;;
    --retention-days) value "$@"; RETENTION_DAYS="$2"; shift ;;
    --soft-delete-days) value "$@"; SOFT_DELETE_DAYS="$2"; shift ;;
    --nearline-days) value "$@"; NEARLINE_DAYS="$2"; shift ;;
    --create) create=1 ;;
    --lock-retention) lock=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$bucket" ] || { echo "usage: $0 gs://BUCKET --app APP [...] (see --help)" >&2; exit 2; }
[ "${#apps[@]}" -gt 0 ] || { echo "name at least one --app (the ADK App name whose manifests expire)" >&2; exit 2; }
for app in "${apps[@]}"; do
  if [ "$app" = "$blob_app" ]; then
    echo "--app: $blob_app is where the input blobs live (a rule of its own, --blob-app), not an app" >&2; exit 2
  fi
done
for n in "$MANIFEST_DAYS" "$BLOB_DAYS" "$RETENTION_DAYS" "$SOFT_DELETE_DAYS" "$NEARLINE_DAYS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "ages must be whole days, got '$n'" >&2; exit 2; }
done
if [ "$RETENTION_DAYS" -gt "$MANIFEST_DAYS" ]; then
  echo "retention ($RETENTION_DAYS d) must not exceed the manifest age ($MANIFEST_DAYS d): lifecycle could not delete them" >&2; exit 2
fi
if [ "$lock" = 1 ] && [ "$RETENTION_DAYS" -eq 0 ]; then
  echo "--lock-retention needs a retention period to lock: --retention-days (or RETENTION_DAYS in retention.env) is 0" >&2; exit 2
fi
if [ "$BLOB_DAYS" -lt $((MANIFEST_DAYS + 30)) ]; then
  echo "blobs ($BLOB_DAYS d) must outlive manifests by the writer's 30-day refresh: use --blob-days >= $((MANIFEST_DAYS + 30))" >&2; exit 2
fi

rendered="$(mktemp "${TMPDIR:-/tmp}/lifecycle.XXXXXX.json")"
# A dry run keeps the file: the commands it prints name it.
[ "$dry" = 1 ] || trap 'rm -f "$rendered"' EXIT
python3 - "$here/lifecycle.json" "$rendered" "$MANIFEST_DAYS" "$BLOB_DAYS" "$NEARLINE_DAYS" "$blob_app" "${apps[@]}" <<'PY'
import json, sys
src, dst, manifest_days, blob_days, nearline_days, blob_app, *apps = sys.argv[1:]
doc = json.load(open(src))
for rule in doc["rule"]:
  cond = rule["condition"]
  if rule["action"]["type"] == "SetStorageClass":
    cond["age"] = int(nearline_days)
  elif cond.get("matchesPrefix") == ["YOUR_APP/"]:
    cond["age"] = int(manifest_days)
    cond["matchesPrefix"] = [a.strip("/") + "/" for a in apps]
  elif cond.get("matchesPrefix") == ["context-pack-blobs/"]:
    cond["age"] = int(blob_days)
    cond["matchesPrefix"] = [blob_app + "/"]
json.dump(doc, open(dst, "w"), indent=1)
PY

run() {
  if [ "$dry" = 1 ]; then printf '+ %s\n' "$*"; else "$@"; fi
}

if command -v gcloud >/dev/null 2>&1; then
  if [ "$create" = 1 ]; then
    run gcloud storage buckets create "$bucket" ${location:+--location="$location"} --uniform-bucket-level-access
  fi
  if [ "$RETENTION_DAYS" -gt 0 ]; then retention=(--retention-period="${RETENTION_DAYS}d"); else retention=(--clear-retention-period); fi
  run gcloud storage buckets update "$bucket" \
    --lifecycle-file="$rendered" \
    "${retention[@]}" \
    --soft-delete-duration="${SOFT_DELETE_DAYS}d" \
    --uniform-bucket-level-access \
    --public-access-prevention \
    --no-versioning
  if [ "$lock" = 1 ] && [ "$RETENTION_DAYS" -gt 0 ]; then
    run gcloud storage buckets update "$bucket" --lock-retention-period
  fi
elif command -v gsutil >/dev/null 2>&1; then
  if [ "$create" = 1 ]; then
    run gsutil mb -b on ${location:+-l "$location"} "$bucket"
  fi
  run gsutil lifecycle set "$rendered" "$bucket"
  if [ "$RETENTION_DAYS" -gt 0 ]; then run gsutil retention set "${RETENTION_DAYS}d" "$bucket"; else run gsutil retention clear "$bucket"; fi
  run gsutil ubla set on "$bucket"
  run gsutil pap set enforced "$bucket"
  run gsutil versioning set off "$bucket"
  echo "note: gsutil cannot set the soft-delete duration; use: gcloud storage buckets update $bucket --soft-delete-duration=${SOFT_DELETE_DAYS}d" >&2
  if [ "$lock" = 1 ] && [ "$RETENTION_DAYS" -gt 0 ]; then
    run gsutil retention lock "$bucket"
  fi
else
  echo "neither gcloud nor gsutil is installed (Google Cloud SDK)" >&2
  [ "$dry" = 1 ] || exit 3
fi

if [ "$dry" = 1 ]; then
  echo "--- lifecycle ($rendered, kept for the commands above)"
  cat "$rendered"
  echo
fi
