#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker) for the alert-rule tests, if it is missing.
#
# From Debian's `prometheus` package, unpacked rather than installed: only the promtool binary
# is needed, and installing the package would register (and on some systems start) the server.
# Idempotent: does nothing when promtool is already beside the environment's python.
#
# Usage: scripts/install-promtool.sh [PYTHON]   (default: .venv/bin/python, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${1:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
BIN_DIR="$("$PY" -c 'import sys, sysconfig; print(sysconfig.get_path("scripts"))')"

if [[ -x "$BIN_DIR/promtool" ]] && "$BIN_DIR/promtool" --version >/dev/null 2>&1; then
  echo "promtool already installed: $BIN_DIR/promtool"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb root
install -m 0755 root/usr/bin/promtool "$BIN_DIR/promtool"
echo "promtool installed: $BIN_DIR/promtool ($("$BIN_DIR/promtool" --version 2>&1 | head -1))"
