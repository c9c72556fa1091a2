#!/usr/bin/env bash
# Installs what hyprof needs on Debian 12 (idempotent; clang and its runtime
# libraries for the fuzz targets of scripts/fuzz.sh), then configures and
# builds it in ./build and installs the Python package `hyprof` (with this
# build's library) into the user's site-packages, so that
# `python3 -c "import hyprof"` works. Used by demo.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config
  libopenblas-dev liblapacke-dev zlib1g-dev
  libgdal-dev gdal-bin python3-gdal libjson-c-dev
  python3-numpy python3-scipy python3-sklearn python3-skimage python3-pywt python3-pytest
  python3-xarray python3-rioxarray python3-tqdm python3-dask python3-distributed
  qgis python3-qgis qgis-providers
  libsvm-dev python3-libsvm libsvm-tools
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "hyprof setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA is built when nvcc is found (HYPROF_CUDA=AUTO); override with HYPROF_CUDA=ON|OFF.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHYPROF_CUDA="${HYPROF_CUDA:-AUTO}" >/dev/null
cmake --build build -j"$(nproc)"
echo "hyprof setup: built $(./build/cli/hyprof --version)"
cmake --install build --component python | sed -n 's/^-- hyprof Python package: /hyprof setup: Python package in /p'
