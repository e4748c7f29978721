#!/usr/bin/env bash
# Sandbox tests (tests/sandbox, tests/envs/test_code.py, tests/envs/test_terminal.py) need bubblewrap
# (the `local` provider) and, to test the `docker` provider against a real engine, Debian's docker.io
# (dockerd, containerd, runc) plus busybox-static for the test image's root filesystem. The tests start
# and stop dockerd themselves (--bridge=none --iptables=false: nothing but loopback is touched) and
# build their image with `docker import`; nothing is pulled. iproute2 gives `ip netns` for the test
# namespace. Idempotent and quick when everything is installed. PALAESTRA_SKIP_DOCKER=1 skips docker.io.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if [[ "${PALAESTRA_SKIP_DOCKER:-0}" != "1" ]]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  [[ -x /bin/busybox ]] || need+=(busybox-static)
fi
if [[ ${#need[@]} -eq 0 ]]; then
  echo "setup-sandbox: $(bwrap --version) and the other tools are already installed"
  exit 0
fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-sandbox: not root and no sudo; install ${need[*]} by hand" >&2
    exit 1
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
# policy-rc.d keeps the package from starting a daemon of its own: the tests start dockerd themselves.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
echo "setup-sandbox: installed ${need[*]}"
