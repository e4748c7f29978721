#!/usr/bin/env bash
# NeMo Gym from PyPI, in a virtual environment of its own outside the repository, for two users:
#   - tests/adapters/test_nemo_gym.py reads our `export nemo-gym` files back with NeMo Gym's own code;
#   - bench/side_by_side.py runs NeMo Gym beside Palaestra on the same fake model and rows.
#   - tests/parity/test_nemo_parity.py scores rows with NeMo Gym's own verifiers (mcqa, gpqa_diamond,
#     math_with_judge) against Palaestra's.
# Both find the venv through tests/fixtures/nemo_gym.py (the same default location as here).
#
#   bash .ci/setup-nemo-gym.sh        # idempotent: a second run only checks the installed version
#
# Knobs: PALAESTRA_NEMO_GYM_VENV (default ~/.cache/palaestra-bench/nemo-gym), NEMO_GYM_VERSION (0.7.0),
#        NEMO_GYM_PYTHON (the interpreter to build the venv from; default: the newest pyenv 3.13, else
#        python3.13 on PATH), PALAESTRA_SKIP_NEMO_GYM=1 skips the install (its test then skips and says why).
# nemo-gym 0.5-0.7 declare Requires-Python >=3.13.14; where only an older 3.13 exists (pyenv 3.13.0 here),
# pip is told --ignore-requires-python, and bench/side_by_side.py tells uv the same for the server venvs
# `gym env start` builds. Any failure stops this script with a non-zero status and says what failed.
set -euo pipefail

if [[ "${PALAESTRA_SKIP_NEMO_GYM:-0}" == "1" ]]; then
  echo "setup-nemo-gym: skipped (PALAESTRA_SKIP_NEMO_GYM=1)"
  exit 0
fi
VERSION="${NEMO_GYM_VERSION:-0.7.0}"
VENV="${PALAESTRA_NEMO_GYM_VENV:-$HOME/.cache/palaestra-bench/nemo-gym}"
die() { echo "setup-nemo-gym: ERROR: $*" >&2; exit 1; }

installed_version() {  # the nemo-gym version the venv holds, empty when none
  [[ -x "$VENV/bin/python" ]] || return 0
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("nemo-gym"))' 2>/dev/null || true
}

# tests/parity imports NeMo Gym's verifiers in this venv; the math_with_judge one needs its own pin of
# math-verify (read from the wheel's requirements.txt, so it follows NeMo Gym's pin).
verifier_deps() {
  local req pins
  req="$("$VENV/bin/python" -c 'import resources_servers, pathlib; print(pathlib.Path(resources_servers.__path__[0]) / "math_with_judge" / "requirements.txt")' 2>/dev/null)" \
    || die "nemo-gym in $VENV has no resources_servers package"
  pins="$(grep -E '^math-verify' "$req" || echo math-verify)"
  "$VENV/bin/python" -c 'import math_verify' 2>/dev/null && return 0
  "$VENV/bin/python" -m pip install -q $pins >/dev/null 2>&1 || die "pip could not install $pins into $VENV"
}

if [[ "$(installed_version)" == "$VERSION" && -x "$VENV/bin/gym" && -x "$VENV/bin/uv" ]]; then
  verifier_deps
  echo "setup-nemo-gym: nemo-gym $VERSION already in $VENV"
  exit 0
fi

if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" ]]; then  # never delete a folder that is not a venv
  die "$VENV exists and is not a virtual environment: move it away, or set PALAESTRA_NEMO_GYM_VENV elsewhere"
fi

find_python() {  # an interpreter of the 3.13 series: NeMo Gym 0.7 needs it
  if [[ -n "${NEMO_GYM_PYTHON:-}" ]]; then echo "$NEMO_GYM_PYTHON"; return; fi
  local root candidate
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    candidate="$(ls -d "$root"/versions/3.13.* 2>/dev/null | sort -V | tail -1 || true)"
    if [[ -n "$candidate" && -x "$candidate/bin/python" ]]; then echo "$candidate/bin/python"; return; fi
  fi
  command -v python3.13 || true
}
PY="$(find_python)"
[[ -n "$PY" && -x "$PY" ]] || die "no Python 3.13 interpreter found (nemo-gym $VERSION needs one): install one with pyenv, or set NEMO_GYM_PYTHON"
PY_VERSION="$("$PY" -c 'import platform; print(platform.python_version())')" || die "$PY does not run"

flags=()
# Requires-Python of nemo-gym >= 0.5 is >=3.13.14: an older 3.13 runs it, but pip would refuse it.
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info[:3] >= (3, 13, 14) else 1)'; then
  flags+=(--ignore-requires-python)
fi

echo "setup-nemo-gym: installing nemo-gym $VERSION on Python $PY_VERSION into $VENV (a few minutes, ~1-2 GB)"
t0=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" || die "could not create the venv $VENV with $PY"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# uv: `gym env start` builds one venv per server with it.
if ! "$VENV/bin/python" -m pip install -q --upgrade pip >"$log" 2>&1 \
   || ! "$VENV/bin/python" -m pip install -q "${flags[@]}" "nemo-gym==$VERSION" uv >"$log" 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
  rm -rf "$VENV"  # never leave a half-installed venv that a later run would take for a finished one
  die "pip could not install nemo-gym==$VERSION (output above)"
fi
got="$(installed_version)"
[[ "$got" == "$VERSION" ]] || die "after pip install, the venv reports nemo-gym '${got:-none}', not $VERSION"
# The modules the export test uses must import; Hydra writes outputs/ into the cwd, hence the scratch dir.
(cd "$(mktemp -d)" && "$VENV/bin/python" -c 'import nemo_gym.reward_profile, nemo_gym.base_resources_server') \
  || die "nemo-gym $VERSION is installed in $VENV but does not import"
[[ -x "$VENV/bin/gym" ]] || die "nemo-gym $VERSION installed no 'gym' command in $VENV"
verifier_deps
echo "setup-nemo-gym: installed nemo-gym $VERSION into $VENV in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))" \
     "${flags[*]:+(${flags[*]})}"
