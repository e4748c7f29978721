#!/usr/bin/env bash
# The NeMo Gym export test reads our exported rollouts with NeMo Gym's own code, from a NeMo Gym venv
# outside the repo. Where the shared benchmark kit is beside the checkout, install it there (idempotent:
# a second run only checks the version). Where it is not, that one test skips and says why.
set -u
kit="$(cd "$(dirname "$0")/../.." && pwd)/shared/bench/install_nemo_gym.sh"
[ -f "$kit" ] || { echo "setup-nemo-gym: no shared bench kit beside the checkout; skipping"; exit 0; }
bash "$kit" >/dev/null 2>&1 || echo "setup-nemo-gym: NeMo Gym could not be installed; its export test will skip"
exit 0
