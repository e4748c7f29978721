#!/usr/bin/env bash
# tests/cluster/test_slurm.py submits a real one-node Slurm job: it needs Debian's slurmctld, slurmd,
# slurm-client and munge. The test starts munged, slurmctld and slurmd itself (its own config, key and
# ports, everything on 127.0.0.1) and stops them; nothing here starts a daemon. Ray itself comes from
# PyPI (the [ray] extra). Idempotent and quick when everything is installed; fails loudly otherwise
# (PALAESTRA_SKIP_SLURM=1 skips it, and CI then does not require the `slurm` capability).
set -euo pipefail
if [[ "${PALAESTRA_SKIP_SLURM:-0}" == "1" ]]; then
  echo "setup-cluster: skipped (PALAESTRA_SKIP_SLURM=1)"
  exit 0
fi

need=()
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
if [[ ${#need[@]} -eq 0 ]]; then
  echo "setup-cluster: munge and Slurm are already installed"
  exit 0
fi

source "$(dirname "$0")/apt.sh"
apt_install setup-cluster "${need[@]}"
for exe in munged slurmctld slurmd sbatch; do
  command -v "$exe" >/dev/null 2>&1 || { echo "setup-cluster: ERROR: $exe is missing after the install" >&2; exit 1; }
done
