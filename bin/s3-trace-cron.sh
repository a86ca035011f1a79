#!/usr/bin/env bash
# Keep local copies of running jobs' traces fresh: one rlvr-s3-sync watch run, made for cron.
#   usage: bin/s3-trace-cron.sh [PATTERN]        (default PATTERN: today's date, YYYYMMDD)
# Settings (environment): RLVR_S3_JOBS  s3://bucket/jobs/ (required: one folder per job)
#                         RLVR_RESULTS  local folder (default: $HOME/results)
#                         RLVR_S3_INTERVAL / RLVR_S3_IDLE_EXIT  seconds (default 60 / 3600)
# Credentials and endpoint: the usual AWS_* variables or profile (cron has a bare
# environment: set them in the crontab or in ~/.aws).
#
# crontab -e, then (every 10 minutes; a run that finds another still going exits 0):
#   RLVR_S3_JOBS=s3://bucket/jobs/
#   */10 * * * * /path/to/rlvr/bin/s3-trace-cron.sh >> $HOME/results/watch.log 2>&1
set -euo pipefail
: "${RLVR_S3_JOBS:?set RLVR_S3_JOBS=s3://bucket/jobs/}"
PATTERN=${1:-$(date +%Y%m%d)}
DEST=${RLVR_RESULTS:-$HOME/results}
HERE=$(cd "$(dirname "$0")/.." && pwd)
SYNC=$(command -v rlvr-s3-sync || echo "$HERE/.venv/bin/rlvr-s3-sync")
mkdir -p "$DEST"
echo "$(date -Is) watch $PATTERN" >&2
exec "$SYNC" watch "$PATTERN" --src "$RLVR_S3_JOBS" --dest "$DEST" \
  --interval "${RLVR_S3_INTERVAL:-60}" --idle-exit "${RLVR_S3_IDLE_EXIT:-3600}"
