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
source "$(dirname "$0")/apt.sh"
apt_install setup-browser chromium fonts-dejavu-core
[[ -x /usr/bin/chromium ]] || { echo "setup-browser: ERROR: no /usr/bin/chromium after the install" >&2; exit 1; }
