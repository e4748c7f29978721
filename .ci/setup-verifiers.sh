#!/usr/bin/env bash
# verifiers 0.4 (its v1 API only) from PyPI, in a virtual environment of its own outside the repository:
# it pins mcp==2.0.0 and openai>=2.54, so it cannot share Palaestra's venv, which keeps verifiers 0.3 for
# the classic API. tests/adapters/test_verifiers_v1.py runs v1 tasksets in it through the adapter's child
# process (src/palaestra/adapters/verifiers_v1.py); tests/adapters/vf_v1_envs.py finds it at the same
# default location as here.
#
#   bash .ci/setup-verifiers.sh        # idempotent: a second run only checks the installed version
#
# Knobs: PALAESTRA_VERIFIERS_V1_VENV (default ~/.cache/palaestra-bench/verifiers-0.4), VERIFIERS_V1_VERSION
#        (0.4.0), VERIFIERS_V1_PYTHON (the interpreter to build it from; default python3.11, else python3),
#        PALAESTRA_SKIP_VERIFIERS_V1=1 skips the install (the tests then skip, and CI leaves them out).
# Any failure stops this script with a non-zero status and says what failed.
set -euo pipefail

if [[ "${PALAESTRA_SKIP_VERIFIERS_V1:-0}" == "1" ]]; then
  echo "setup-verifiers: skipped (PALAESTRA_SKIP_VERIFIERS_V1=1)"
  exit 0
fi
VERSION="${VERIFIERS_V1_VERSION:-0.4.0}"
VENV="${PALAESTRA_VERIFIERS_V1_VENV:-$HOME/.cache/palaestra-bench/verifiers-0.4}"
die() { echo "setup-verifiers: ERROR: $*" >&2; exit 1; }

installed_version() {  # the verifiers version the venv holds, empty when none
  [[ -x "$VENV/bin/python" ]] || return 0
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("verifiers"))' 2>/dev/null || true
}

if [[ "$(installed_version)" == "$VERSION" ]]; then
  echo "setup-verifiers: verifiers $VERSION already in $VENV"
  exit 0
fi
if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" ]]; then  # never delete a folder that is not a venv
  die "$VENV exists and is not a virtual environment: move it away, or set PALAESTRA_VERIFIERS_V1_VENV elsewhere"
fi
PY="${VERIFIERS_V1_PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
[[ -n "$PY" ]] || die "no python3.11 or python3 on PATH (set VERIFIERS_V1_PYTHON)"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "$PY is older than 3.11, which verifiers $VERSION needs (set VERIFIERS_V1_PYTHON)"

echo "setup-verifiers: installing verifiers $VERSION on $("$PY" -c 'import platform; print(platform.python_version())') into $VENV"
t0=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" || die "could not create the venv $VENV with $PY"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! "$VENV/bin/python" -m pip install -q "verifiers==$VERSION" >"$log" 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
  rm -rf "$VENV"  # never leave a half-installed venv that a later run would take for a finished one
  die "pip could not install verifiers==$VERSION (output above)"
fi
got="$(installed_version)"
[[ "$got" == "$VERSION" ]] || die "after pip install, the venv reports verifiers '${got:-none}', not $VERSION"
"$VENV/bin/python" -I -c 'import verifiers.v1.utils.loaders, verifiers.v1.trace, verifiers.v1.mcp.server' \
  || die "verifiers $VERSION is installed in $VENV but its v1 API does not import"
echo "setup-verifiers: installed verifiers $VERSION into $VENV in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))"
