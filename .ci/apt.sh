# Sourced by .ci/setup-*.sh (not run by the setup loop: its name does not match). One way to install
# Debian packages in CI: as root or through sudo, updating the package lists only when a package is
# unknown to apt (a fresh image has none), quietly, without letting a package start its own daemons.
#   apt_install TAG NO_ROOT_EXIT PACKAGE...   (NO_ROOT_EXIT: the exit code when neither root nor sudo)
apt_install() {
  local tag="$1" no_root_exit="$2"
  shift 2
  local sudo=""
  if [[ "$(id -u)" != "0" ]]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "$tag: not root and no sudo; install $* by hand" >&2
      exit "$no_root_exit"
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
  $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null
  echo "$tag: installed $*"
}
