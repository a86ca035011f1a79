#!/usr/bin/env bash
# A throwaway single-node Ceph cluster (one monitor, one MemStore OSD) and a RADOS
# Gateway (S3) listening on 127.0.0.1 only, for tests and local experiments.
#
#   scripts/ceph_rgw_up.sh up DIR [RGW_PORT]   start; prints shell-sourceable S3_* lines
#   scripts/ceph_rgw_up.sh rgw DIR             (re)start only the gateway of a running cluster
#   scripts/ceph_rgw_up.sh down DIR            stop every daemon started under DIR
#
# Needs Debian's ceph-mon, ceph-osd and radosgw packages (Ceph 16 on Debian 12):
#   apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw
# Everything lives under DIR (config, keyrings, logs, pid files); the OSD keeps its data
# in memory, so `down` loses it. Authentication between the daemons is off (they listen
# on 127.0.0.1 only); the S3 side uses real SigV4 with the user created here.
# Environment: MON_PORT (default: a free port), S3_ACCESS_KEY / S3_SECRET_KEY (the S3
# user's keys; default: random), CEPH_MEMSTORE_BYTES (default 2 GiB of RAM at most).
set -euo pipefail

die() { echo "ceph_rgw_up: error: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_http() {  # wait_http PORT SECONDS: until the gateway answers HTTP
  local port=$1 deadline=$((SECONDS + $2))
  while [ $SECONDS -lt "$deadline" ]; do
    if python3 - "$port" <<'EOF' 2>/dev/null
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1)
except urllib.error.HTTPError:
    pass  # any HTTP answer (403 for anonymous) means it is serving
EOF
    then return 0; fi
    sleep 0.3
  done
  return 1
}

start_daemon() {  # start_daemon NAME CMD...: foreground daemon in our process group, pid file
  local name=$1; shift
  "$@" -f >>"$D/log/$name.out" 2>&1 &
  echo $! >"$D/run/$name.pid"
}

cmd=${1:-}; D=${2:-}
[ -n "$cmd" ] && [ -n "$D" ] || die "usage: $0 up|rgw|down DIR [RGW_PORT]"

case "$cmd" in
down)
  [ -d "$D/run" ] || exit 0
  for f in "$D"/run/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  exit 0
  ;;
rgw)
  [ -f "$D/ceph.conf" ] || die "$D/ceph.conf not found (run '$0 up $D' first)"
  port=$(cat "$D/rgw.port")
  if [ -f "$D/run/rgw.pid" ]; then kill -9 "$(cat "$D/run/rgw.pid")" 2>/dev/null || true; fi
  start_daemon rgw radosgw -c "$D/ceph.conf" -n client.rgw.a
  wait_http "$port" 60 || die "gateway did not answer on 127.0.0.1:$port (see $D/log)"
  exit 0
  ;;
up) ;;
*) die "unknown command '$cmd' (up, rgw or down)" ;;
esac

for b in ceph-mon ceph-osd radosgw radosgw-admin ceph-authtool monmaptool ceph uuidgen python3; do
  command -v "$b" >/dev/null 2>&1 || die "$b not found (apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw)"
done
D=$(mkdir -p "$D" && cd "$D" && pwd)
[ -e "$D/ceph.conf" ] && die "$D already holds a cluster (run '$0 down $D' and remove it first)"
mkdir -p "$D"/{mon/a,osd/0,run,log,rgw}
RGW_PORT=${3:-$(free_port)}
MON_PORT=${MON_PORT:-$(free_port)}
ACCESS=${S3_ACCESS_KEY:-$(uuidgen | tr -d - | cut -c1-20 | tr a-z A-Z)}
SECRET=${S3_SECRET_KEY:-$(uuidgen | tr -d -)$(uuidgen | tr -d - | cut -c1-8)}
FSID=$(uuidgen)
echo "$RGW_PORT" >"$D/rgw.port"
cat >"$D/ceph.conf" <<EOF
[global]
fsid = $FSID
mon host = v1:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
# A killed gateway leaves RADOS watches behind; metadata writes wait for them to time out.
osd client watch timeout = 4
run dir = $D/run
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
pid file = $D/run/\$name.ceph.pid
[mon]
mon data = $D/mon/\$id
# One monitor, no peers to batch for: commit each change at once (the gateway's start-up
# creates its pools one by one, each waiting a full default 1 s proposal interval).
paxos propose interval = 0.05
paxos min wait = 0.01
[osd]
osd data = $D/osd/\$id
osd objectstore = memstore
# The OSD would set its CRUSH location and class through the monitor at start-up, racing
# its own monitor map (an intermittent "wrong fsid" that stops it): done below instead.
osd crush update on start = false
osd class update on start = false
memstore device bytes = ${CEPH_MEMSTORE_BYTES:-2147483648}
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $D/rgw
rgw dns name = 127.0.0.1
EOF
C=(-c "$D/ceph.conf")
cd "$D"
ceph-authtool --create-keyring mon.keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --addv a "[v1:127.0.0.1:$MON_PORT]" --fsid "$FSID" monmap >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap monmap --keyring mon.keyring
start_daemon mon ceph-mon "${C[@]}" -i a
# MemStore keeps an fsid file it finds in place (else it writes zeros): give it ours.
OSD_UUID=$(uuidgen)
echo "$OSD_UUID" >osd/0/fsid
ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$OSD_UUID" >>"$D/log/osd-mkfs.out" 2>&1
timeout 60 ceph "${C[@]}" osd new "$OSD_UUID" 0 >/dev/null
timeout 60 ceph "${C[@]}" osd crush add osd.0 1.0 host=localhost root=default >/dev/null 2>&1 || die "cannot add the OSD to the CRUSH map"
start_daemon osd ceph-osd "${C[@]}" -i 0
up=0
for _ in $(seq 1 120); do
  if timeout 10 ceph "${C[@]}" osd stat 2>/dev/null | grep -q " 1 up"; then up=1; break; fi
  sleep 0.5
done
[ "$up" = 1 ] || die "the OSD did not come up (see $D/log/osd.0.log)"
start_daemon rgw radosgw "${C[@]}" -n client.rgw.a
wait_http "$RGW_PORT" 120 || die "gateway did not answer on 127.0.0.1:$RGW_PORT (see $D/log)"
timeout 60 radosgw-admin "${C[@]}" -n client.rgw.a --admin-socket "$D/run/radosgw-admin.asok" user create --uid=rlvr-test --display-name=rlvr-test \
  --access-key="$ACCESS" --secret-key="$SECRET" >/dev/null
cat <<EOF
S3_ENDPOINT_URL=http://127.0.0.1:$RGW_PORT
S3_ACCESS_KEY=$ACCESS
S3_SECRET_KEY=$SECRET
EOF
