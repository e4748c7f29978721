#!/usr/bin/env bash
# Browser tests (tests/report/test_browser.py) drive Debian's Chromium through Playwright.
# Installs the chromium package when /usr/bin/chromium is missing; never downloads a browser of its own
# (`playwright install` is not used: the Python package only needs an executable path).
# Idempotent: a machine that already has Chromium returns at once. Set PALAESTRA_SKIP_BROWSER=1 to skip.
set -euo pipefail
if [[ "${PALAESTRA_SKIP_BROWSER:-0}" == "1" ]]; then
  echo "setup-browser: skipped (PALAESTRA_SKIP_BROWSER=1)"
  exit 0
fi
if [[ -x /usr/bin/chromium ]]; then
  echo "setup-browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) already installed"
  exit 0
fi
SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-browser: not root and no sudo; install the Debian package 'chromium' by hand" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when chromium is unknown to apt (a fresh image has empty lists).
if ! apt-cache show chromium >/dev/null 2>&1; then
  $SUDO apt-get update -q
fi
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "setup-browser: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
