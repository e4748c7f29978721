#!/usr/bin/env bash
# tests/cluster/test_slurm.py submits a real one-node Slurm job: it needs Debian's slurmctld, slurmd,
# slurm-client and munge. The test starts munged, slurmctld and slurmd itself (its own config, key and
# ports, everything on 127.0.0.1) and stops them; nothing here starts a daemon. Ray itself comes from
# PyPI (the [ray] extra). Idempotent and quick when everything is installed.
set -euo pipefail

need=()
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
if [[ ${#need[@]} -eq 0 ]]; then
  echo "setup-cluster: munge and Slurm are already installed"
  exit 0
fi

# The Slurm test skips with a reason where nothing can be installed, so no root is not an error.
source "$(dirname "$0")/apt.sh"
apt_install setup-cluster 0 "${need[@]}"
