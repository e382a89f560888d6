#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: C toolchains (native + cross + emulators
# for the target tests) + Python dependencies + pt2c itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# command -> Debian package(s) providing it
declare -A PKGS=(
    [gcc]="gcc" [g++]="g++" [clang]="clang" [make]="make" [cmake]="cmake" [nm]="binutils"
    [pkg-config]="pkg-config" [ninja]="ninja-build" [bazel]="bazel-bootstrap bazel-platforms"
    [aarch64-linux-gnu-gcc]="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
    [riscv64-linux-gnu-gcc]="gcc-riscv64-linux-gnu libc6-dev-riscv64-cross"
    [x86_64-w64-mingw32-gcc]="gcc-mingw-w64-x86-64" [qemu-aarch64]="qemu-user" [wine]="wine wine64"
    [arm-none-eabi-gcc]="gcc-arm-none-eabi libnewlib-arm-none-eabi"
)
need=()
for tool in "${!PKGS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || need+=(${PKGS[$tool]})
done
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing system packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 -m pip install -q -r requirements-dev.txt
python3 -m pip install -q --no-deps -e .
echo "setup: done ($(python3 -c 'import torch; print("torch", torch.__version__)'), $(gcc --version | head -1), $(clang --version | head -1))"
