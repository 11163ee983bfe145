#!/usr/bin/env bash
# Installs the S3-protocol servers the S3 tests run against (README "S3 test
# servers"), only what is missing. Idempotent. Called by install_deps.sh.
#  - s3rver (npm) into ${CKPT_TOOLS_DIR:-/opt/ckpt-tools}: a fast fake
#    (~1 s start) for the client tests; node + npm from Debian when absent.
#  - Ceph radosgw (Debian ceph-mon ceph-osd radosgw, ~75 s to install once,
#    ~15 s to start a memstore cluster): checks signatures, implements
#    If-None-Match. CKPT_S3_RADOSGW=0 skips it (its tests then skip, saying so).
set -euo pipefail
tools=${CKPT_TOOLS_DIR:-/opt/ckpt-tools}
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
if ! command -v npm >/dev/null; then apt_install nodejs npm; fi
if [[ ! -x $tools/node_modules/.bin/s3rver ]]; then
  $SUDO mkdir -p "$tools"
  $SUDO npm install --prefix "$tools" --no-audit --no-fund --silent s3rver@3.7.1
fi
if [[ ${CKPT_S3_RADOSGW:-1} != 0 ]]; then
  apt_install ceph-mon ceph-osd radosgw
fi
