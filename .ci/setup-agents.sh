#!/usr/bin/env bash
# External coding-agent CLIs for tests/agents (palaestra.agents.external): OpenAI's Codex CLI, Anthropic's
# Claude Code, OpenCode, KiloCode and Pi from npm, mini-SWE-agent from PyPI (in a virtual environment of its
# own: its litellm pins much of the OpenAI stack). Everything goes under $PALAESTRA_AGENTS_DIR (default
# /opt/palaestra-agents): npm/ for the npm packages, mini-swe-agent/ for the venv. Pinned versions. npm
# install scripts are not run; the three that matter only copy a native binary from the platform package
# npm installed over a placeholder (no download), and are run by hand afterwards: Claude Code's
# install.cjs, OpenCode's and Kilo's postinstall.mjs. Idempotent: returns at once when the pinned versions
# are there; any failure stops it with a non-zero status.
# PALAESTRA_SKIP_AGENTS=1 skips it (the tests then skip, and CI does not require the `agents` capability).
set -euo pipefail
if [[ "${PALAESTRA_SKIP_AGENTS:-0}" == "1" ]]; then
  echo "setup-agents: skipped (PALAESTRA_SKIP_AGENTS=1)"
  exit 0
fi
DIR="${PALAESTRA_AGENTS_DIR:-/opt/palaestra-agents}"
CODEX_VERSION=0.171.0
CLAUDE_VERSION=2.1.197   # the newest release whose engines accept Node 18/20 (later ones need Node 22)
MINI_VERSION=2.4.6
OPENCODE_VERSION=1.18.33
KILO_VERSION=7.7.7       # 7.8.1's platform packages are not published on npm
PI_VERSION=0.73.1
PY="${PYTHON:-python3}"

die() { echo "setup-agents: ERROR: $*" >&2; exit 1; }

npm_version() {  # installed version of an npm package under $DIR/npm, or nothing (a query, not an install)
  local pj="$DIR/npm/node_modules/$1/package.json"
  if [[ -f "$pj" ]]; then node -e "process.stdout.write(require('$pj').version)"; fi
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  source "$(dirname "$0")/apt.sh"
  apt_install setup-agents nodejs npm
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || die "node/npm missing after the install"
fi

mkdir -p "$DIR/npm"
want=()
[[ "$(npm_version @openai/codex)" == "$CODEX_VERSION" ]] || want+=("@openai/codex@$CODEX_VERSION")
[[ "$(npm_version @anthropic-ai/claude-code)" == "$CLAUDE_VERSION" ]] \
  && "$DIR/npm/node_modules/.bin/claude" --version >/dev/null 2>&1 \
  || want+=("@anthropic-ai/claude-code@$CLAUDE_VERSION")
# OpenCode and Kilo ship their binary in a platform package (an optional dependency npm installs); their
# postinstall.mjs only copies it over the placeholder in bin/ (it would download only if it were missing).
[[ "$(npm_version opencode-ai)" == "$OPENCODE_VERSION" ]] \
  && "$DIR/npm/node_modules/.bin/opencode" --version >/dev/null 2>&1 || want+=("opencode-ai@$OPENCODE_VERSION")
[[ "$(npm_version @kilocode/cli)" == "$KILO_VERSION" ]] \
  && "$DIR/npm/node_modules/.bin/kilo" --version >/dev/null 2>&1 || want+=("@kilocode/cli@$KILO_VERSION")
[[ "$(npm_version @mariozechner/pi-coding-agent)" == "$PI_VERSION" ]] \
  || want+=("@mariozechner/pi-coding-agent@$PI_VERSION")
if [[ ${#want[@]} -gt 0 ]]; then
  npm install --prefix "$DIR/npm" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "@openai/codex@$CODEX_VERSION" "@anthropic-ai/claude-code@$CLAUDE_VERSION" "opencode-ai@$OPENCODE_VERSION" \
    "@kilocode/cli@$KILO_VERSION" "@mariozechner/pi-coding-agent@$PI_VERSION" >/dev/null \
    || die "npm could not install ${want[*]}"
  (cd "$DIR/npm/node_modules/@anthropic-ai/claude-code" && node install.cjs >/dev/null) \
    || die "Claude Code's install.cjs failed"
  for pkg in opencode-ai @kilocode/cli; do
    (cd "$DIR/npm/node_modules/$pkg" && node postinstall.mjs >/dev/null) || die "$pkg's postinstall.mjs failed"
  done
  for exe in codex claude opencode kilo pi; do
    out="$("$DIR/npm/node_modules/.bin/$exe" --version 2>&1)" || die "$exe does not run: $out"  # pi prints to stderr
  done
  echo "setup-agents: installed ${want[*]} under $DIR/npm"
fi

MINI="$DIR/mini-swe-agent"
mini_installed=""
if [[ -f "$MINI/.palaestra-version" ]]; then mini_installed="$(cat "$MINI/.palaestra-version")"; fi
if [[ "$mini_installed" != "$MINI_VERSION" ]]; then
  rm -rf "$MINI"
  "$PY" -m venv "$MINI" || die "could not create the venv $MINI with $PY"
  log="$(mktemp)"
  if ! "$MINI/bin/python" -m pip install -q --disable-pip-version-check "mini-swe-agent==$MINI_VERSION" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -30 >&2
    rm -rf "$MINI" "$log"  # no half-installed venv a later run could take for a finished one
    die "pip could not install mini-swe-agent==$MINI_VERSION (output above)"
  fi
  rm -f "$log"
  "$MINI/bin/mini" --help >/dev/null 2>&1 || die "mini-swe-agent did not install (mini --help fails)"
  echo "$MINI_VERSION" > "$MINI/.palaestra-version"
  echo "setup-agents: installed mini-swe-agent $MINI_VERSION in $MINI"
fi
echo "setup-agents: codex $(npm_version @openai/codex), claude-code $(npm_version @anthropic-ai/claude-code)," \
  "opencode $(npm_version opencode-ai), kilo $(npm_version @kilocode/cli), pi $(npm_version @mariozechner/pi-coding-agent)," \
  "mini-swe-agent $(cat "$MINI/.palaestra-version") in $DIR"
