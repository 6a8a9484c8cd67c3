#!/usr/bin/env bash
# Encryption at rest from the command line, with real files and clients:
# attach --encrypt with a key file; data written through the NBD export
# reads back, and neither the cache file nor the metadata store holds any of
# its plaintext; a restart with the key is warm; a wrong, missing or
# unsafe key is refused with one line and changes nothing; check verifies
# the encrypted blocks with the key; a key in the kernel keyring works the
# same way; detach leaves the origin with all the data.
#
#   encryption_cli_test.sh CACHECTL
set -uo pipefail
C=$(readlink -f "$1")
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
keyring_key=
cleanup() {
  for n in $(ls "$W/state" 2>/dev/null); do
    pid=$(cat "$W/run/$n/pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
  done
  [ -n "$keyring_key" ] && keyctl unlink "$keyring_key" @u >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1
for tool in qemu-io keyctl; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (scripts/setup.sh installs it)"; exit 1; }
done
truncate -s 64M origin.img
truncate -s 32M ssd.img
head -c 64 /dev/urandom > key
chmod 600 key
sock=$W/run/enc/nbd
uri() { echo "nbd+unix:///$1?socket=$W/run/$1/nbd"; }
# A recognisable plaintext: every 16 bytes the same marker.
printf 'PLAINTEXT-MARKER%.0s' $(seq 1 4096) > marker   # 64 KiB
marker_in() { grep -c "PLAINTEXT-MARKER" "$1" 2>/dev/null || true; }

expect() {  # exit status, words, command...
  local want=$1 words=$2; shift 2
  "$C" "$@" >out 2>&1; local got=$?
  [ "$got" = "$want" ] || fail "'$*' exited $got, not $want: $(cat out)"
  grep -q -- "$words" out || fail "'$*' does not say '$words': $(cat out)"
  [ "$(wc -l <out)" = 1 ] || fail "'$*' printed more than one line: $(cat out)"
}

echo "== bad key options: one line each, no cache made"
expect 2 "needs --key-file" attach --origin origin.img --cache ssd.img --name enc --frontend socket --encrypt
expect 2 "go with --encrypt" attach --origin origin.img --cache ssd.img --name enc --frontend socket --key-file key
head -c 16 /dev/urandom > short && chmod 600 short
expect 2 "at least 32" attach --origin origin.img --cache ssd.img --name enc --frontend socket --encrypt --key-file short
cp key open && chmod 644 open
expect 2 "chmod 600" attach --origin origin.img --cache ssd.img --name enc --frontend socket --encrypt --key-file open
expect 3 "does not exist" attach --origin origin.img --cache ssd.img --name enc --frontend socket --encrypt --key-file nokey
expect 3 "no key 'cachectl-test-none'" attach --origin origin.img --cache ssd.img --name enc --frontend socket \
  --encrypt --key-keyring cachectl-test-none
[ -e "$W/state/enc" ] && fail "a refused attach left a state directory"
[ "$(head -c 4096 ssd.img | tr -d '\0' | wc -c)" = 0 ] || fail "a refused attach wrote to the cache device"

echo "== attach --encrypt, write, read back"
"$C" attach --origin origin.img --cache ssd.img --name enc --frontend socket --mode writeback --encrypt --key-file key \
  >out 2>&1 || { cat out; echo "FAIL: attach"; exit 1; }
grep -q "encrypted (AES-256-XTS" out || fail "attach does not say the cache is encrypted: $(cat out)"
"$C" set enc --seq-cutoff 0 >/dev/null || fail "set --seq-cutoff 0"  # cache the long writes too
"$C" stats enc --json | grep -q '"encryption": "aes-256-xts"' || fail "stats does not show the encryption"
for at in 0 1M 5M; do
  qemu-io -f raw "$(uri enc)" -c "write -s marker $at 64k" >/dev/null 2>&1 || fail "writing at $at"
done
qemu-io -f raw "$(uri enc)" -c 'write -P 0x6b 8M 4M' -c flush >/dev/null 2>&1 || fail "writing the pattern"
for pass in 1 2; do
  qemu-io -f raw "$(uri enc)" -c 'read -P 0x6b 8M 4M' >io 2>&1 && ! grep -q "verification failed\|error" io ||
    fail "reading back: $(tail -2 io)"
done
qemu-io -f raw "$(uri enc)" -c "read -v 1M 64k" 2>/dev/null | grep -q "PLAINTEXT.MARKER" || fail "the marker does not read back"
"$C" stop enc >/dev/null || fail "stop"
[ "$(marker_in ssd.img)" = 0 ] || fail "the cache device holds the plaintext ($(marker_in ssd.img) lines)"
! grep -rqa "PLAINTEXT-MARKER" "$W/state/enc" || fail "the state directory holds the plaintext"
[ "$(marker_in origin.img)" = 0 ] || echo "   (the origin holds the marker: write-back cleaned it there)"

echo "== a wrong or missing key: refused, nothing changed"
cp ssd.img ssd.before
mv key key.right
head -c 64 /dev/urandom > key
chmod 600 key
expect 4 "is not the key of this cache" start enc
cmp -s ssd.img ssd.before || fail "a start with the wrong key changed the cache device"
rm key
expect 3 "does not exist" start enc
cmp -s ssd.img ssd.before || fail "a start without the key changed the cache device"
mv key.right key

echo "== with the key: warm, and check verifies the encrypted blocks"
"$C" check enc >out 2>&1 || fail "check: $(cat out)"
grep -q "^ok" out || fail "check does not say ok: $(cat out)"
"$C" start enc >/dev/null 2>&1 || fail "start with the key"
qemu-io -f raw "$(uri enc)" -c 'read -P 0x6b 8M 4M' >io 2>&1 && ! grep -q "verification failed\|error" io ||
  fail "reading back after the restart: $(tail -2 io)"
hits=$("$C" stats enc --json | sed -n 's/.*"read_hits": \([0-9]*\).*/\1/p')
[ "${hits:-0}" -gt 0 ] || fail "the restart is not warm (no read hits)"
"$C" detach enc >/dev/null || fail "detach"
qemu-io -f raw origin.img -c 'read -P 0x6b 8M 4M' >io 2>&1 && ! grep -q "verification failed\|error" io ||
  fail "the origin after detach: $(tail -2 io)"
[ "$(marker_in origin.img)" -gt 0 ] || fail "the origin lacks the marker after detach"

echo "== a key in the kernel keyring"
truncate -s 0 ssd.img && truncate -s 32M ssd.img
keyring_key=$(keyctl padd user cachectl-test-enc @u < key) || fail "keyctl padd"
"$C" attach --origin origin.img --cache ssd.img --name encr --frontend socket --encrypt --key-keyring cachectl-test-enc \
  >out 2>&1 || fail "attach --key-keyring: $(cat out)"
"$C" set encr --seq-cutoff 0 >/dev/null || fail "set --seq-cutoff 0"
qemu-io -f raw "$(uri encr)" -c 'write -P 0x3c 0 4M' -c 'read -P 0x3c 0 4M' -c 'read -P 0x3c 0 4M' >io 2>&1 &&
  ! grep -q "verification failed\|error" io || fail "through the keyring-keyed cache: $(tail -2 io)"
"$C" stop encr >/dev/null && "$C" start encr >/dev/null 2>&1 || fail "stop and start with the keyring key"
grep -q "cachectl-test-enc" "$W/state/encr/cache.conf" || fail "cache.conf does not name the keyring key"
! grep -qa "$(od -An -tx1 key | tr -d ' \n' | head -c 32)" "$W/state/encr/cache.conf" || fail "cache.conf holds the key"
"$C" detach encr >/dev/null || fail "detach encr"

[ $failures = 0 ] && echo "encryption_cli_test: all passed"
exit $((failures > 0))
