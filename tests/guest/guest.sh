#!/usr/bin/env bash
# Runs a test script inside a qemu guest booted from a Debian kernel (the
# bookworm-backports 6.12 kernel: device-mapper, nbd and ublk as modules),
# with the project's binaries. Prints the guest's console; exits with the
# script's exit status. A panic, a hang (timeout) or a missing result
# marker is a failure.
#
#   guest.sh CACHE_DIR TEST_SCRIPT BINARY...
#
# CACHE_DIR keeps the kernel and the base initramfs between runs. The kernel
# package is fetched with a private APT_CONFIG whose source is the mirror
# of this machine's own apt configuration plus bookworm-backports; nothing
# is installed and /etc/apt is not touched.
set -euo pipefail
cache=$1 script=$2
shift 2
binaries=("$@")
timeout_s=${GUEST_TIMEOUT:-600}
# Bump when build_base changes, so cached initramfs images are rebuilt.
base_image=base-v4.cpio.gz
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
    case "$uri" in */debian) echo "$uri"; return;; esac
  done
  awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null
}

fetch_kernel() {
  [ -f "$cache/kernel.ready" ] && return
  local apt=$cache/apt uri
  uri=$(mirror)
  [ -n "$uri" ] || { echo "guest: no Debian mirror in this machine's apt sources" >&2; exit 1; }
  mkdir -p "$apt/lists/partial" "$apt/archives/partial"
  echo "deb $uri bookworm-backports main" >"$apt/sources.list"
  cat >"$apt/apt.conf" <<CONF
Dir::State "$apt";
Dir::State::Lists "$apt/lists";
Dir::State::status "/var/lib/dpkg/status";
Dir::Cache "$apt";
Dir::Cache::archives "$apt/archives";
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "/nonexistent";
CONF
  export APT_CONFIG=$apt/apt.conf
  apt-get update -qq
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
  (cd "$apt" && apt-get download -qq "$pkg" 2>/dev/null)
  rm -rf "$cache/kernel"
  dpkg-deb -x "$apt"/linux-image-*.deb "$cache/kernel"
  rm -f "$apt"/linux-image-*.deb
  touch "$cache/kernel.ready"
}

# Copies a program into the root at $1 (at path $3, by default its own)
# and the libraries ldd lists (at their own paths).
add_program() {
  local root=$1 prog=$2 dest=${3:-$2} lib
  install -D -m 755 "$prog" "$root/$dest"
  for lib in $(ldd "$prog" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$root/$lib" ] || install -D "$lib" "$root/$lib"
  done
}

build_base() {
  [ -f "$cache/$base_image" ] && return
  local root=$cache/base version
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,proc,sys,dev,run,tmp,mnt,etc}
  cp /bin/busybox "$root/bin/busybox"
  version=$(ls "$cache/kernel/lib/modules")
  local mods=$cache/kernel/lib/modules/$version/kernel m
  for m in drivers/block/nbd drivers/block/ublk_drv drivers/block/loop drivers/md/dm-mod \
           drivers/md/dm-delay drivers/md/dm-flakey drivers/md/dm-bufio fs/ext4/ext4 fs/jbd2/jbd2 \
           fs/mbcache lib/crc16 crypto/crc32c_generic lib/libcrc32c arch/x86/crypto/crc32c-intel \
           fs/configfs/configfs drivers/nvme/common/nvme-auth drivers/nvme/common/nvme-keyring \
           drivers/nvme/host/nvme-core drivers/nvme/host/nvme-fabrics drivers/nvme/host/nvme-tcp \
           drivers/nvme/target/nvmet drivers/nvme/target/nvmet-tcp; do
    [ -f "$mods/$m.ko.xz" ] || continue
    mkdir -p "$root/lib/modules/$version/kernel/$(dirname "$m")"
    xz -dc "$mods/$m.ko.xz" >"$root/lib/modules/$version/kernel/$m.ko"
  done
  depmod -b "$root" "$version"
  ln -s ../bin/busybox "$root/sbin/modprobe"
  for p in /usr/sbin/dmsetup /usr/sbin/mkfs.ext4 /usr/sbin/mke2fs /usr/sbin/e2fsck /usr/sbin/losetup; do
    add_program "$root" "$p"
  done
  cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin DM_DISABLE_UDEV=1
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
echo "GUEST-START" >/dev/console
sh /test/run.sh >/dev/console 2>&1
echo "GUEST-RESULT: $?" >/dev/console
poweroff -f
INIT
  chmod +x "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$cache/$base_image"
}

# Several guest tests may start at once (ctest -j): one prepares the cache.
exec 9>"$cache/lock"
flock 9
fetch_kernel
build_base
flock -u 9
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
payload=$work/root
mkdir -p "$payload/test"
install -m 755 "$script" "$payload/test/run.sh"
# The project's binaries go to /usr/local/bin, whatever their path here
# (a build under /tmp would vanish under the guest's own /tmp).
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "guest: $b is not installed (the test needs it in the guest)" >&2; exit 1; }
  add_program "$payload" "$(readlink -f "$b")" "/usr/local/bin/$(basename "$b")"
done
(cd "$payload" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/payload.cpio.gz"
cat "$cache/$base_image" "$work/payload.cpio.gz" >"$work/initrd.gz"

# tsc=unstable: under TCG the kernel otherwise marks sched_clock stable at
# a late initcall (and may later find the TSC unstable), each time
# live-patching sched_clock_cpu, which the other vCPU runs constantly;
# multi-threaded TCG has been seen to lose that race ("Oops: int3" in
# sched_clock_cpu, a panic while booting). Told at boot, it never patches.
boot_guest() {
  timeout "$timeout_s" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 1024 \
    -nographic -no-reboot -kernel "$cache/kernel/boot"/vmlinuz-* -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet tsc=unstable" >"$console" 2>&1
}

# A kernel that dies before the test's first step (the emulator's fault,
# nothing of ours has run) boots again, saying so; at most three boots.
console=$work/console.log
for attempt in 1 2 3; do
  set +e
  boot_guest
  qemu_rc=$?
  set -e
  grep -a -q 'GUEST-START' "$console" && break
  [ $qemu_rc -eq 124 ] && break
  [ $attempt -lt 3 ] || break
  cat "$console"
  echo "guest: the kernel died while booting, before the test started (boot $attempt of 3)" >&2
done
cat "$console"
if [ $qemu_rc -eq 124 ]; then echo "guest: timed out after ${timeout_s}s" >&2; exit 1; fi
result=$(grep -a -o 'GUEST-RESULT: [0-9]*' "$console" | tail -1 | awk '{print $2}' || true)
if [ -z "$result" ]; then echo "guest: no result marker (a panic, or the test died)" >&2; exit 1; fi
exit "$result"
