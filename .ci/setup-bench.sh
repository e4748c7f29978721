#!/usr/bin/env bash
# bench/instructions.py counts the instructions of a rollout with valgrind (cachegrind): a figure that,
# unlike CPU time, does not move with the machine's load. Its smoke test (tests/bench) needs valgrind.
# Idempotent: a machine that already has valgrind returns at once. Set PALAESTRA_SKIP_VALGRIND=1 to skip.
set -euo pipefail
if [[ "${PALAESTRA_SKIP_VALGRIND:-0}" == "1" ]]; then
  echo "setup-bench: skipped (PALAESTRA_SKIP_VALGRIND=1)"
  exit 0
fi
if command -v valgrind >/dev/null 2>&1; then
  echo "setup-bench: $(valgrind --version) already installed"
  exit 0
fi
source "$(dirname "$0")/apt.sh"
apt_install setup-bench valgrind
command -v valgrind >/dev/null 2>&1 || { echo "setup-bench: ERROR: no valgrind after the install" >&2; exit 1; }
