#!/usr/bin/env bash
# Installs what cachectl needs from Debian's packages (as root, with apt-get)
# and builds everything into build/. Safe to run again: it installs only
# what is missing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config ccache zstd
  librocksdb-dev libaio-dev libboost-program-options-dev libgtest-dev libzstd-dev libnbd-dev
  libdevmapper-dev liburing-dev libgnutls28-dev
  # encryption at rest: AES-256-XTS (libcrypto), keys from the kernel keyring (keyctl in the tests)
  libssl-dev libkeyutils-dev keyutils
  # NBD over TLS: the tests' keys and certificates (psktool, certtool)
  gnutls-bin
  # NBD clients the interop tests use
  libnbd-bin python3-libnbd qemu-utils fio fuse3 e2fsprogs nbdkit
  # the security test looks for TCP listeners with ss; the metrics test scrapes with curl
  iproute2 curl
  # the benchmarks' plots (scripts/bench; its smoke test runs with the tests)
  python3-matplotlib
  # cachectl advise --plot draws with gnuplot
  gnuplot-nox
  # the qemu guest with a real kernel (tests/guest)
  qemu-system-x86 busybox-static kmod cpio xz-utils dmsetup
  # the NVMe/TCP export's guest test connects with nvme-cli
  nvme-cli
  # libFuzzer targets (tests/fuzz), and the clang build with -Wthread-safety (scripts/test.sh)
  clang libclang-rt-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages: ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Warnings are errors only when asked: scripts/test.sh (CI) sets
# CACHECTL_WERROR=ON. Unset, build/ keeps what it was configured with (OFF at first).
werror=()
if [ -n "${CACHECTL_WERROR:-}" ]; then werror=(-DCACHECTL_WERROR="$CACHECTL_WERROR"); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${werror[@]}" >/dev/null
cmake --build build -j"$(nproc)"
