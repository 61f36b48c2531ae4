#!/usr/bin/env bash
# Start a private Docker engine for `nel package` and its tests, idempotently, without systemd.
#
# Prints `export DOCKER_HOST=...` on stdout (eval it). Nothing can be pulled on the CI
# machines, so the base image `nel` builds FROM is made locally: with NEL_DOCKER_PY_BASE=1
# a debootstrap'ed Debian bookworm with python3 + venv is imported as
# localdebian:bookworm-py (about 90 s, once; later calls reuse it).
#
# Env: NEL_DOCKER_DIR (default /var/lib/nel-docker) holds the engine's data, socket and log.
# Needs root (apt-get, dockerd).
set -euo pipefail
D=${NEL_DOCKER_DIR:-/var/lib/nel-docker}
SOCK="$D/docker.sock"
export DOCKER_HOST="unix://$SOCK"
say() { echo "[nel docker] $*" >&2; }
apt_install() {
  local apt=(apt-get -o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 -q update >/dev/null \
         && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "$@" >/dev/null; }
}

# One start at a time: each pytest xdist worker starts the engine from its own fixture, and
# two dockerd on one data root (or two image builds) on a fresh machine would collide.
# dockerd gets `9>&-` so that it never holds the lock's descriptor.
mkdir -p "$D"
exec 9>"$D/.start.lock"
flock -w 1500 9 || { say "another start_engine.sh held $D/.start.lock for 25 minutes"; exit 1; }

command -v dockerd >/dev/null || { say "installing docker.io"; apt_install docker.io; }
# Debian's client matches its engine; another `docker` on PATH may be newer than the API.
DOCKER=$(command -v /usr/bin/docker || command -v docker)

mkdir -p "$D"
# NEL_DOCKER_GPU_HOOK: a stand-in for NVIDIA's `nvidia-container-runtime-hook` (tests on a
# machine without GPUs): copied to $D/gpu-hook and put first on dockerd's PATH, so the
# engine accepts `--gpus` device requests. Never used where the real hook is installed.
hook_dir=""
if [[ -n "${NEL_DOCKER_GPU_HOOK:-}" ]] && ! command -v nvidia-container-runtime-hook >/dev/null; then
  hook_dir="$D/gpu-hook"
  mkdir -p "$hook_dir"
  install -m 0755 "$NEL_DOCKER_GPU_HOOK" "$hook_dir/nvidia-container-runtime-hook"
fi
running() { [[ -f "$D/dockerd.pid" ]] && kill -0 "$(cat "$D/dockerd.pid")" 2>/dev/null \
            && "$DOCKER" info >/dev/null 2>&1; }
if running && [[ -n "$hook_dir" && ! -f "$D/dockerd.gpu-hook" ]] \
   && [[ -z "$("$DOCKER" ps -q 2>/dev/null)" ]]; then
  # An engine started before the hook was asked for (and idle): restart it with the hook.
  say "restarting dockerd with the GPU hook stand-in"
  pid=$(cat "$D/dockerd.pid"); kill "$pid"
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
fi
if ! running; then
  say "starting dockerd on $SOCK"
  rm -f "$D/dockerd.gpu-hook"
  [[ -n "$hook_dir" ]] && touch "$D/dockerd.gpu-hook"
  # setsid: the engine outlives this script and is not in the caller's process group.
  PATH="${hook_dir:+$hook_dir:}$PATH" setsid nohup dockerd --data-root "$D/data" \
    --exec-root "$D/exec" --pidfile "$D/dockerd.pid" \
    -H "$DOCKER_HOST" >"$D/dockerd.log" 2>&1 < /dev/null 9>&- &
  for _ in $(seq 300); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 0.2; done
  "$DOCKER" info >/dev/null 2>&1 || { tail -30 "$D/dockerd.log" >&2; exit 1; }
fi

if [[ "${NEL_DOCKER_PY_BASE:-0}" == 1 ]] && ! "$DOCKER" image inspect localdebian:bookworm-py >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || apt_install debootstrap
  say "building localdebian:bookworm-py with debootstrap (about 90 s, once)"
  root=$(mktemp -d)
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" \
    ${mirror:+"$mirror"} >"$D/debootstrap.log" 2>&1 || { tail -20 "$D/debootstrap.log" >&2; exit 1; }
  tar -C "$root" -c . | "$DOCKER" import - localdebian:bookworm-py >/dev/null
  rm -rf "$root"
fi
say "up: $("$DOCKER" version --format 'server {{.Server.Version}}')"
echo "export DOCKER_HOST=$DOCKER_HOST"
