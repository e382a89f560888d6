#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: C toolchains + Python dependencies + pt2c.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in gcc clang make cmake nm; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing system packages for: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc clang make cmake binutils >/dev/null
fi

python3 -m pip install -q -r requirements-dev.txt
python3 -m pip install -q --no-deps -e .
echo "setup: done ($(python3 -c 'import torch; print("torch", torch.__version__)'), $(gcc --version | head -1), $(clang --version | head -1))"
