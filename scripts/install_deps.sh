#!/usr/bin/env bash
# Installs the Debian 12 packages ckpt needs, only those missing. Idempotent.
set -euo pipefail
PKGS=(build-essential cmake pkg-config git libhdf5-dev hdf5-tools libzstd-dev zstd libssl-dev libxxhash-dev
      libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev libgtest-dev googletest
      python3 python3-venv python3-pip python3-h5py python3-numpy python3-torch python3-pybind11 python3-pytest python3-mpi4py
      python3-matplotlib libcurl4-openssl-dev clang-format-14)
# torch: the convert logits oracle, the Python API (python/, tests/python) and examples/torch_gpt;
# libxxhash-dev: XXH3-128, the optional fast chunk hash (`ckpt save --hash xxh3-128`);
# python3-venv, python3-pip: `pip install .` into a venv (README "Install");
# libcurl4-openssl-dev: the S3 backend (ckpt/storage/s3, curl's SigV4);
# pybind11: the Python API's extension; matplotlib: the `make demo` plot and the bench plots
# clang-format-14: ctest `style` (scripts/style_check.py; another major formats differently)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The S3 test servers (s3rver from npm, Ceph radosgw from Debian). Test tools only: where a
# registry is out of reach the build goes on and the S3 tests report SKIPPED with the reason.
if ! bash "$(dirname "$0")/install_s3_servers.sh"; then
  echo "warning: the S3 test servers were not installed; the S3 tests will be skipped" >&2
fi
