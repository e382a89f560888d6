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
# libFuzzer + ASan/UBSan runtimes for tests/test_fuzz_capi.py (a library, not a command: checked by linking).
# Debian 12 / Ubuntu 24.04 ship them in libclang-rt-<N>-dev, older releases in libclang-common-<N>-dev.
if command -v clang >/dev/null 2>&1 && ! printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' |
        clang -x c - -fsanitize=fuzzer,address,undefined -o /tmp/pt2c-setup-fuzz.$$ >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    v=$(clang -dumpversion | cut -d. -f1)
    $SUDO apt-get update -qq
    rt="libclang-rt-$v-dev"
    apt-cache show "$rt" >/dev/null 2>&1 || rt="libclang-common-$v-dev"
    echo "setup: installing the libFuzzer / sanitizer runtime: $rt"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$rt" >/dev/null
fi
rm -f /tmp/pt2c-setup-fuzz.$$

# The CPU OpenCL driver pocl, the ICD loader and the OpenCL headers: the GPU backend's OpenCL artifacts are
# built and run on it by tests/test_gpu.py (no GPU needed).
if [ ! -e /etc/OpenCL/vendors/pocl.icd ] || [ ! -e /usr/include/CL/cl.h ] || ! ldconfig -p | grep -q 'libOpenCL.so '; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing the OpenCL CPU driver (pocl), ICD loader and headers"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends pocl-opencl-icd \
        ocl-icd-opencl-dev opencl-headers clinfo >/dev/null
fi

python3 -m pip install -q -r requirements-dev.txt
python3 -m pip install -q --no-deps -e .
echo "setup: done ($(python3 -c 'import torch; print("torch", torch.__version__)'), $(gcc --version | head -1), $(clang --version | head -1))"
