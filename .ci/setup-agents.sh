#!/usr/bin/env bash
# External coding-agent CLIs for tests/agents (palaestra.agents.external): OpenAI's Codex CLI and
# Anthropic's Claude Code from npm, mini-SWE-agent from PyPI (in a virtual environment of its own: its
# litellm pins much of the OpenAI stack). Everything goes under $PALAESTRA_AGENTS_DIR (default
# /opt/palaestra-agents): npm/ for the npm packages, mini-swe-agent/ for the venv. Pinned versions. npm
# install scripts are not run; Claude Code's own postinstall (install.cjs: it only copies the native binary
# from its platform package over a placeholder, no download) is run by hand afterwards. Idempotent:
# returns at once when the pinned versions are there. PALAESTRA_SKIP_AGENTS=1 skips it (the tests then skip).
set -euo pipefail
if [[ "${PALAESTRA_SKIP_AGENTS:-0}" == "1" ]]; then
  echo "setup-agents: skipped (PALAESTRA_SKIP_AGENTS=1)"
  exit 0
fi
DIR="${PALAESTRA_AGENTS_DIR:-/opt/palaestra-agents}"
CODEX_VERSION=0.171.0
CLAUDE_VERSION=2.1.197   # the newest release whose engines accept Node 18/20 (later ones need Node 22)
MINI_VERSION=2.4.6
PY="${PYTHON:-python3}"

npm_version() {  # installed version of an npm package under $DIR/npm, or nothing
  local pj="$DIR/npm/node_modules/$1/package.json"
  [[ -f "$pj" ]] && node -e "process.stdout.write(require('$pj').version)" 2>/dev/null || true
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-cache show nodejs >/dev/null 2>&1 || $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm >/dev/null
fi

mkdir -p "$DIR/npm"
want=()
[[ "$(npm_version @openai/codex)" == "$CODEX_VERSION" ]] || want+=("@openai/codex@$CODEX_VERSION")
[[ "$(npm_version @anthropic-ai/claude-code)" == "$CLAUDE_VERSION" ]] \
  && "$DIR/npm/node_modules/.bin/claude" --version >/dev/null 2>&1 \
  || want+=("@anthropic-ai/claude-code@$CLAUDE_VERSION")
if [[ ${#want[@]} -gt 0 ]]; then
  npm install --prefix "$DIR/npm" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "@openai/codex@$CODEX_VERSION" "@anthropic-ai/claude-code@$CLAUDE_VERSION" >/dev/null
  (cd "$DIR/npm/node_modules/@anthropic-ai/claude-code" && node install.cjs >/dev/null)
  for exe in codex claude; do
    "$DIR/npm/node_modules/.bin/$exe" --version >/dev/null || { echo "setup-agents: $exe does not run" >&2; exit 1; }
  done
  echo "setup-agents: installed ${want[*]} under $DIR/npm"
fi

MINI="$DIR/mini-swe-agent"
if [[ "$(cat "$MINI/.palaestra-version" 2>/dev/null || true)" != "$MINI_VERSION" ]]; then
  rm -rf "$MINI"
  "$PY" -m venv "$MINI"
  "$MINI/bin/python" -m pip install -q --disable-pip-version-check "mini-swe-agent==$MINI_VERSION" 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$MINI/bin/mini" --help >/dev/null 2>&1 || { echo "setup-agents: mini-swe-agent did not install" >&2; exit 1; }
  echo "$MINI_VERSION" > "$MINI/.palaestra-version"
  echo "setup-agents: installed mini-swe-agent $MINI_VERSION in $MINI"
fi
echo "setup-agents: codex $(npm_version @openai/codex), claude-code $(npm_version @anthropic-ai/claude-code)," \
  "mini-swe-agent $(cat "$MINI/.palaestra-version") in $DIR"
