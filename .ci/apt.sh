# Sourced by .ci/setup-*.sh (not run by the setup loop: its name does not match). One way to install
# Debian packages in CI: as root or through sudo, updating the package lists only when a package is
# unknown to apt (a fresh image has none), quietly, without letting a package start its own daemons.
# Any failure (no root and no sudo, an unknown package, a failed install) ends the calling script with a
# non-zero status and says what failed: CI turns the skips of what it installs into failures
# (PALAESTRA_REQUIRE in .ci/run), so an install that quietly did nothing would only move the failure.
#   apt_install TAG PACKAGE...   (an older second argument, a number, is accepted and ignored)
apt_install() {
  local tag="$1"
  shift
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then shift; fi
  local sudo=""
  if [[ "$(id -u)" != "0" ]]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "$tag: ERROR: not root and no sudo; install $* by hand (or set its PALAESTRA_SKIP_* switch)" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  local pkg
  for pkg in "$@"; do
    if ! apt-cache show "$pkg" >/dev/null 2>&1; then
      $sudo apt-get update -q
      break
    fi
  done
  # policy-rc.d keeps packages from starting daemons of their own: the tests start what they need.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    trap "$sudo rm -f /usr/sbin/policy-rc.d" EXIT  # removed however the install ends
  fi
  local log
  log="$(mktemp)"
  if ! $sudo apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1; then
    tail -30 "$log" >&2
    rm -f "$log"
    echo "$tag: ERROR: apt-get could not install $* (output above)" >&2
    exit 1
  fi
  rm -f "$log"
  echo "$tag: installed $*"
}
