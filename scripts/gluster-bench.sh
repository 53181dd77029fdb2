#!/usr/bin/env bash
# The benchmark sweep on a real network file system: a loopback GlusterFS
# volume (one brick on local disk, mounted through the FUSE client), so
# every read the methods make is an RPC to the brick server. Cleans up after
# itself, also when interrupted: unmounts, stops and deletes the volume,
# stops the daemons it started, removes the brick.
#
#   scripts/gluster-bench.sh DB OUTDIR
#
# DB is copied onto the volume first. The sweep's settings come from the
# environment as for scripts/bench-sweep.sh; SWEEP names another script
# taking DB OUTDIR instead (SWEEP=benches/python-input.sh DROP_ALL_CACHES=1
# for the Python input loops). Run as root (mount, daemons, drop_caches).
# Installs glusterfs-server and glusterfs-client if missing.
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 2 "DB OUTDIR" "$@"
db=$1
out=$2
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: needs root (mount, glusterd, drop_caches)" >&2
  exit 1
fi
bench_need_db "$db"

if ! command -v glusterd >/dev/null || ! command -v mount.glusterfs >/dev/null; then
  echo "gluster: installing glusterfs-server glusterfs-client"
  flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends glusterfs-server glusterfs-client >/dev/null
fi

volume=lmdbio-bench-$$
work=$(mktemp -d "${TMPDIR:-/var/tmp}/lmdbio-gluster.XXXXXX")
brick=$work/brick
mnt=$work/mnt
mkdir -p "$brick" "$mnt"
started_glusterd=""
created=""
mounted=""

sweep=""
cleanup() {
  set +e
  if [ -n "$sweep" ] && kill -0 "$sweep" 2>/dev/null; then
    pkill -TERM -P "$sweep"
    kill "$sweep"
    wait "$sweep"
  fi
  if [ -n "$mounted" ]; then umount "$mnt" || umount -l "$mnt"; fi
  if [ -n "$created" ]; then
    gluster --mode=script volume stop "$volume" force >/dev/null
    gluster --mode=script volume delete "$volume" >/dev/null
  fi
  if [ -n "$started_glusterd" ]; then
    kill "$started_glusterd" 2>/dev/null
    # The self-heal daemon glusterd may have started for the volume.
    for pidfile in /var/run/gluster/*.pid; do
      [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

if pgrep -x glusterd >/dev/null; then
  echo "gluster: using the running glusterd"
else
  glusterd -p "$work/glusterd.pid"
  for _ in $(seq 50); do [ -s "$work/glusterd.pid" ] && break; sleep 0.1; done
  started_glusterd=$(cat "$work/glusterd.pid")
  # glusterd answers the CLI a moment after writing its pid file.
  for _ in $(seq 50); do gluster --mode=script volume list >/dev/null 2>&1 && break; sleep 0.2; done
fi

gluster --mode=script volume create "$volume" "$(hostname):$brick" force >/dev/null
created=1
gluster --mode=script volume start "$volume" >/dev/null
mount -t glusterfs "127.0.0.1:/$volume" "$mnt"
mounted=1
echo "gluster: volume $volume mounted at $mnt (brick $brick)"

copy=$mnt/$(basename "$db")
echo "gluster: copying $db onto the volume"
cp -r "$db" "$copy"
sync

# In the background and waited for, so an interrupt reaches the trap at
# once (bash runs traps only between foreground commands) and the trap can
# stop the sweep before tearing the volume down under it.
TITLE="${TITLE:-lmdbio bench on loopback GlusterFS: $(basename "$db")}" \
  bash "${SWEEP:-scripts/bench-sweep.sh}" "$copy" "$out" &
sweep=$!
wait "$sweep"
