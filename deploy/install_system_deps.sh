#!/usr/bin/env bash
# System packages the real-component tests need (Debian): headless Chromium for the
# Dagster UI and HTML report tests, pdflatex to compile the LaTeX report fragment, bubblewrap
# for the `local` code sandbox, Postgres for the shared Dagster instance
# (deploy/postgres/start_postgres.sh), docker-compose (v1: Debian's) for deploy/docker-compose.yaml,
# npm for the OpenClaw CLI (any npm: OpenClaw's Node 24 comes from the npm registry).
# Idempotent; needs root (or passwordless sudo).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pdflatex >/dev/null 2>&1 || need+=(texlive-latex-base)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)  # deploy/docker-compose.yaml
command -v npm >/dev/null 2>&1 || need+=(npm)  # deploy/agents/install_openclaw.sh (its own Node 24)
if ((${#need[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Another apt-get (a second checkout's setup, unattended upgrades) may hold the dpkg lock:
  # wait for it instead of failing the whole setup.
  apt=($SUDO apt-get -o DPkg::Lock::Timeout=600 -y -q)
  "${apt[@]}" install --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { "${apt[@]}" update >/dev/null && "${apt[@]}" install --no-install-recommends "${need[@]}" >/dev/null; }
fi
echo "system deps ok: ${need[*]:-nothing to install}"
