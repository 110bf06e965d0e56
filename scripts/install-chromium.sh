#!/usr/bin/env bash
# Installs Chromium (Debian's package) for the explorer's browser test, if it is missing.
#
# The test drives it with Playwright (a Python package, the `dev` extra) through
# `executable_path`: Playwright's own browser downloads are not used.
# Idempotent: does nothing when chromium is already on PATH or GAAMA_CHROMIUM names it.
set -euo pipefail

if [[ -n "${GAAMA_CHROMIUM:-}" && -x "${GAAMA_CHROMIUM}" ]] || command -v chromium >/dev/null; then
  echo "chromium already installed: ${GAAMA_CHROMIUM:-$(command -v chromium)}"
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "chromium is missing; install Debian's chromium package (needs root), or set GAAMA_CHROMIUM" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
}
echo "chromium installed: $(command -v chromium)"
