#!/usr/bin/env bash
# Installs the Debian packages among $2... that are missing (apt-get, with
# sudo when not root); $1 labels the messages. Shared by setup.sh and
# test_arm64.sh.
#   scripts/apt_install.sh LABEL PACKAGE...
set -euo pipefail
label=$1; shift
missing=""
for p in "$@"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "$label: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
