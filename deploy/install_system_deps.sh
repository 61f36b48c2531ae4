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
  # Another apt (unattended upgrades, a parallel job) may hold the dpkg lock: wait for it
  # rather than fail the CI run ("Could not get lock /var/lib/dpkg/lock-frontend").
  APT=($SUDO apt-get -o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
  "${APT[@]}" install "${need[@]}" >/dev/null 2>&1 \
    || { "${APT[@]}" update >/dev/null && "${APT[@]}" install "${need[@]}" >/dev/null; }
fi
echo "system deps ok: ${need[*]:-nothing to install}"
