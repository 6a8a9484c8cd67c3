#!/usr/bin/env bash
# Logs where admins look: a daemon started by systemd (its stderr the
# journal's stream, JOURNAL_STREAM naming it, as systemd sets it) writes
# its log lines there too, with syslog priorities (sd-daemon's <N>
# prefixes), so `journalctl -u cachectl@NAME` shows the attach, mode
# changes with the flush's progress, flushes, and I/O errors as they come
# (the origin here is nbdkit with its error filter, failing reads on
# demand). Without JOURNAL_STREAM nothing goes to stderr; daemon.log has
# every line either way.
# Usage: journal_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in nbdkit qemu-io; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state CACHECTL_ERROR_WATCH_SECONDS=1
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  [ -f "$W/nbdkit.pid" ] && kill "$(cat "$W/nbdkit.pid")" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
source "$(dirname "$0")/support/cli_lib.sh"
truncate -s 64M "$W/origin.img" "$W/plain.img"
truncate -s 32M "$W/ssd.img" "$W/ssd2.img"
# Reads of the origin fail with EIO while $W/fail exists.
nbdkit --exit-with-parent -P "$W/nbdkit.pid" -U "$W/origin.sock" --filter=error file file="$W/origin.img" \
  error-pread=EIO error-pread-rate=100% error-pread-file="$W/fail" &
for _ in $(seq 100); do [ -s "$W/nbdkit.pid" ] && break; sleep 0.1; done
[ -s "$W/nbdkit.pid" ] || { echo "FAIL: nbdkit did not start"; exit 1; }

echo "== under systemd: the journal's stream"
touch "$W/journal"
JOURNAL_STREAM=$(stat -c '%d:%i' "$W/journal") "$C" attach --origin "nbd+unix:///?socket=$W/origin.sock" \
  --cache "$W/ssd.img" --name vol --mode writeback --frontend socket >"$W/out" 2>>"$W/journal" ||
  fail "attach: $(cat "$W/out" "$W/journal")"
expect 0 "" -- set vol --seq-cutoff 0
io vol -c 'write -P 0x5a 0 4M'
expect 0 "" -- set vol --mode writethrough
expect 0 "" -- flush vol
touch "$W/fail"
qemu-io -f raw "$(nbd vol)" -c 'read 32M 64k' >/dev/null 2>&1
rm -f "$W/fail"
for _ in $(seq 200); do grep -q '^<3>origin.read: ' "$W/journal" && break; sleep 0.1; done
for line in '^<6>attached: nbd+unix:///?socket=.* cached on .*ssd.img; serving vol (writeback)' \
            '^<6>mode -> writethrough$' '^<6>mode switch: flush: 0 %, 64 dirty lines left$' \
            '^<6>mode switch: flush: 100 %, 0 dirty lines left$' '^<6>mode -> writethrough: done$' \
            '^<6>flush: done$' '^<3>origin.read: [0-9]* more ([0-9]* since start)$'; do
  grep -q "$line" "$W/journal" || fail "the journal lacks '$line':"$'\n'"$(cat "$W/journal")"
done
grep -q ' error origin.read: ' "$W/state/vol/daemon.log" || fail "daemon.log lacks the error: $(cat "$W/state/vol/daemon.log")"
expect 0 "" -- detach vol

echo "== otherwise: daemon.log alone"
"$C" attach --origin "$W/plain.img" --cache "$W/ssd2.img" --name plain --frontend socket >"$W/out" 2>"$W/stderr" ||
  fail "attach: $(cat "$W/stderr")"
expect 0 "" -- flush plain
[ ! -s "$W/stderr" ] || fail "the daemon wrote to stderr without the journal: $(cat "$W/stderr")"
grep -q ' info attached: ' "$W/state/plain/daemon.log" || fail "daemon.log: $(cat "$W/state/plain/daemon.log")"
expect 0 "" -- detach plain
finish journal_test
