#!/usr/bin/env bash
# Build a peer tool's Python 3.12 venv once per machine and link a checkout to it.
#   install_peer.sh NAME PIP_SPEC LINK
# The peers are the same for every checkout on a machine and big (NeMo Gym brings Ray:
# ~1.4 GB and minutes of pip), so they live under PEER_HOME (default ~/.cache/nel/peers),
# like pip's own cache, and LINK (e.g. .venv-peers/nemo-gym) points there. A venv counts
# only once its stamp is written, so an interrupted install is redone, and a lock keeps
# two checkouts from building the same venv at once. NAME should carry the version: a new
# pin gets a new venv.
set -euo pipefail
name=$1 spec=$2 link=$3
py312=${PY312:-env PYENV_VERSION=3.12.1 python3.12}
home=${PEER_HOME:-$HOME/.cache/nel/peers}
dir="$home/$name"
mkdir -p "$home"
exec 9>"$home/.$name.lock"
flock 9
if [[ "$(cat "$dir/.nel-complete" 2>/dev/null)" != "$spec" ]]; then
  echo "[peers] installing $spec into $dir" >&2
  rm -rf "$dir"
  $py312 -m venv "$dir"
  "$dir/bin/pip" install -q --upgrade pip
  "$dir/bin/pip" install -q "$spec"
  printf '%s' "$spec" > "$dir/.nel-complete"
fi
mkdir -p "$(dirname "$link")"
if [[ -e "$link" && ! -L "$link" ]]; then
  echo "[peers] $link is a directory of its own: using it as it is" >&2
else
  ln -sfn "$dir" "$link"
fi
