#!/usr/bin/env bash
# Sandbox tests (tests/sandbox, tests/envs/test_code.py, tests/envs/test_terminal.py) need bubblewrap
# (the `local` provider) and, to test the `docker` provider against a real engine, Debian's docker.io
# (dockerd, containerd, runc) plus busybox-static for the test image's root filesystem. The tests start
# and stop dockerd themselves (--bridge=none --iptables=false: nothing but loopback is touched) and
# build their image with `docker import`; nothing is pulled. iproute2 gives `ip netns` for the test
# namespace. podman (+ runc) and gVisor's runsc come from Debian too: the tests import their image into
# podman, register runsc with their dockerd and run gVisor standalone. Idempotent and quick when everything
# is installed. PALAESTRA_SKIP_DOCKER=1 skips docker.io, podman and runsc.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if [[ "${PALAESTRA_SKIP_DOCKER:-0}" != "1" ]]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  [[ -x /bin/busybox ]] || need+=(busybox-static)
  command -v podman >/dev/null 2>&1 || need+=(podman)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  command -v runsc >/dev/null 2>&1 || need+=(runsc)
fi
if [[ ${#need[@]} -eq 0 ]]; then
  echo "setup-sandbox: $(bwrap --version) and the other tools are already installed"
  exit 0
fi

source "$(dirname "$0")/apt.sh"
apt_install setup-sandbox "${need[@]}"
bwrap --version >/dev/null || { echo "setup-sandbox: ERROR: bwrap does not run after the install" >&2; exit 1; }
if [[ "${PALAESTRA_SKIP_DOCKER:-0}" != "1" ]]; then
  # podman needs no daemon; with runc and cgroupfs it runs on cgroups-v1/hybrid hosts (the provider detects
  # and passes those flags). runsc must start a sandbox with its default platform (kvm hangs without
  # nested virtualisation). Either failing here is a broken install, not a skip.
  podman --cgroup-manager=cgroupfs --runtime runc info --format '{{.Version.Version}}' >/dev/null ||
    { echo "setup-sandbox: ERROR: podman does not run after the install" >&2; exit 1; }
  if [[ "$(id -u)" == "0" ]]; then
    (cd / && runsc --network=none do /bin/true) ||
      { echo "setup-sandbox: ERROR: runsc cannot start a sandbox (runsc --network=none do /bin/true)" >&2; exit 1; }
  fi
fi
