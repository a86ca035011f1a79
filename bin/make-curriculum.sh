#!/usr/bin/env bash
# Make a curriculum (prompt ids, easiest first) from verified records of a base-model sweep.
#   usage: bin/make-curriculum.sh verified.jsonl [more.jsonl ...] > curriculum.txt
# Easiest = highest pass@1 (mean reward >= 1 per sample); ties keep the input order.
set -euo pipefail
rlvr-passk --per-prompt --k 1 "$@" \
  | python3 -c 'import json,sys; rows=[json.loads(l) for l in sys.stdin]; rows.sort(key=lambda r: -(r["pass@1"] or 0)); print("\n".join(r["id"] for r in rows))'
