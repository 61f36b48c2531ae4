#!/usr/bin/env bash
# System packages the real-component tests need (Debian): headless Chromium for the
# Dagster UI and HTML report tests, pdflatex to compile the LaTeX report fragment.
# Idempotent; needs root (or passwordless sudo).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pdflatex >/dev/null 2>&1 || need+=(texlive-latex-base)
if ((${#need[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi
echo "system deps ok: ${need[*]:-nothing to install}"
