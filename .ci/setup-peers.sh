#!/usr/bin/env bash
# The peers bench/side_by_side.py runs beside Palaestra, each from PyPI in a virtual environment of its own
# outside the repository (their pins are theirs, never Palaestra's):
#   - Inspect AI (inspect-ai, with the openai package its `openai-api` provider drives), driven with
#     `inspect eval TASKFILE --model openai-api/...`;
#   - PrimeIntellect verifiers 0.3 (its classic API: vf.SingleTurnEnv, vf.Rubric, `vf-eval`; 0.4 keeps only
#     the v1 API, in the venv .ci/setup-verifiers.sh builds), driven with `vf-eval MODULE`;
#   - EleutherAI's lm-evaluation-harness (lm-eval with its `api` extra: API models only, no torch), driven
#     with `lm_eval run --model local-chat-completions --include_path DIR --tasks NAME`.
# tests/fixtures/peers.py says where they are (the same default locations as here); the bench and
# tests/bench/test_side_by_side_smoke.py look there.
#
#   bash .ci/setup-peers.sh        # idempotent: a second run only reads each venv's version marker
#
# Knobs: PALAESTRA_INSPECT_VENV (default ~/.cache/palaestra-bench/inspect-ai), INSPECT_AI_VERSION (0.3.285),
#        INSPECT_OPENAI_VERSION (3.63.0), PALAESTRA_VERIFIERS_CLASSIC_VENV (~/.cache/palaestra-bench/verifiers-0.3),
#        VERIFIERS_CLASSIC_VERSION (0.3.1), PALAESTRA_LM_EVAL_VENV (~/.cache/palaestra-bench/lm-eval),
#        LM_EVAL_VERSION (0.4.13), PEERS_PYTHON (the interpreter to build them all from; default
#        python3.11, else python3), PALAESTRA_SKIP_PEERS=1 skips the install (the tests then skip, and CI
#        leaves them out), PEERS_UV (the uv to build the venvs with; default /opt/palaestra-agents/uv/bin/uv,
#        else uv on PATH; PEERS_UV=none: python -m venv + pip, as where no uv is found).
# Any failure stops this script with a non-zero status and says what failed.
set -euo pipefail

if [[ "${PALAESTRA_SKIP_PEERS:-0}" == "1" ]]; then
  echo "setup-peers: skipped (PALAESTRA_SKIP_PEERS=1)"
  exit 0
fi
CACHE="$HOME/.cache/palaestra-bench"
INSPECT_VENV="${PALAESTRA_INSPECT_VENV:-$CACHE/inspect-ai}"
INSPECT_VERSION="${INSPECT_AI_VERSION:-0.3.285}"
OPENAI_VERSION="${INSPECT_OPENAI_VERSION:-3.63.0}"
VF_VENV="${PALAESTRA_VERIFIERS_CLASSIC_VENV:-$CACHE/verifiers-0.3}"
VF_VERSION="${VERIFIERS_CLASSIC_VERSION:-0.3.1}"
LM_EVAL_VENV="${PALAESTRA_LM_EVAL_VENV:-$CACHE/lm-eval}"
LM_EVAL_VERSION="${LM_EVAL_VERSION:-0.4.13}"
MARKER=".palaestra-peer"  # in each venv: the exact requirements it was built from, written once it imports
die() { echo "setup-peers: ERROR: $*" >&2; exit 1; }

UV=""
if [[ -n "${PEERS_UV:-}" && "$PEERS_UV" != "none" ]]; then
  [[ -x "$PEERS_UV" ]] || die "PEERS_UV=$PEERS_UV is not an executable (a path to uv, or none for pip)"
  UV="$PEERS_UV"
elif [[ -z "${PEERS_UV:-}" ]]; then
  for candidate in /opt/palaestra-agents/uv/bin/uv /opt/palaestra-agents/uv "$(command -v uv || true)"; do
    if [[ -n "$candidate" && -f "$candidate" && -x "$candidate" ]]; then UV="$candidate"; break; fi
  done
fi
PY=""
base_python() {  # the interpreter the venvs are built from (a venv's own base, never a venv)
  [[ -n "$PY" ]] && return 0
  local py="${PEERS_PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
  [[ -n "$py" ]] || die "no python3.11 or python3 on PATH (set PEERS_PYTHON)"
  "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "$py is older than 3.11, which verifiers $VF_VERSION needs (set PEERS_PYTHON)"
  PY="$("$py" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))')" \
    || die "$py does not run (set PEERS_PYTHON)"
}

# peer_venv LABEL KNOB VENV CHECK-CODE REQUIREMENTS...: build VENV (the knob's value, or its default) with
# REQUIREMENTS unless its marker already names exactly them; CHECK-CODE (Python) must run in it before the
# marker is written.
peer_venv() {
  local label="$1" knob="$2" venv="$3" check="$4" want log t0=$SECONDS
  shift 4
  want="$*"
  if [[ -f "$venv/$MARKER" && "$(cat "$venv/$MARKER")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "setup-peers: $label ($want) already in $venv"
    return 0
  fi
  if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" ]]; then  # never delete a folder that is not a venv
    die "$venv exists and is not a virtual environment: move it away, or set $knob elsewhere"
  fi
  base_python
  echo "setup-peers: installing $want on Python $("$PY" -c 'import platform; print(platform.python_version())') into $venv${UV:+ (uv)}"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  log="$(mktemp)"
  if [[ -n "$UV" ]]; then
    if ! { "$UV" venv -q --python "$PY" "$venv" && "$UV" pip install -q --python "$venv/bin/python" "$@"; } >"$log" 2>&1; then
      tail -30 "$log" >&2
      rm -rf "$venv" "$log"  # never leave a half-installed venv that a later run would take for a finished one
      die "uv could not install $want into $venv (output above)"
    fi
  else
    if ! { "$PY" -m venv "$venv" && "$venv/bin/python" -m pip install -q "$@"; } >"$log" 2>&1; then
      grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -30 >&2
      rm -rf "$venv" "$log"
      die "pip could not install $want into $venv (output above)"
    fi
  fi
  rm -f "$log"
  "$venv/bin/python" -I -c "$check" || die "$want is installed in $venv but does not import (check: $check)"
  echo "$want" > "$venv/$MARKER"
  echo "setup-peers: installed $want into $venv in $((SECONDS - t0)) s ($(du -sh "$venv" | cut -f1))"
}

peer_venv "Inspect AI" PALAESTRA_INSPECT_VENV "$INSPECT_VENV" \
  'import inspect_ai, openai, inspect_ai.log; from inspect_ai.model import get_model' \
  "inspect-ai==$INSPECT_VERSION" "openai==$OPENAI_VERSION"
peer_venv verifiers PALAESTRA_VERIFIERS_CLASSIC_VENV "$VF_VENV" \
  'import verifiers as vf, datasets; vf.SingleTurnEnv, vf.Rubric, vf.Parser, vf.extract_boxed_answer' \
  "verifiers==$VF_VERSION"
peer_venv lm-eval PALAESTRA_LM_EVAL_VENV "$LM_EVAL_VENV" \
  'import lm_eval, lm_eval.evaluator, lm_eval.tasks, lm_eval.models.openai_completions, datasets' \
  "lm-eval[api]==$LM_EVAL_VERSION"
[[ -x "$INSPECT_VENV/bin/inspect" ]] || die "no inspect command in $INSPECT_VENV/bin"
[[ -x "$VF_VENV/bin/vf-eval" ]] || die "no vf-eval command in $VF_VENV/bin"
[[ -x "$LM_EVAL_VENV/bin/lm_eval" ]] || die "no lm_eval command in $LM_EVAL_VENV/bin"
