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

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-cluster: not root and no sudo; install ${need[*]} by hand (the Slurm test is skipped)" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when one of the packages is unknown to apt (a fresh image has none).
for pkg in "${need[@]}"; do
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    $SUDO apt-get update -q
    break
  fi
done
# policy-rc.d keeps the packages from starting daemons of their own: the test starts its own.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
echo "setup-cluster: installed ${need[*]}"
