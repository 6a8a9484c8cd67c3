# Shared by the shell tests that drive a cache daemon: sourced, with $C the
# cachectl binary and $W the work directory holding the *.img devices.
failures=0 bad_inputs=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# Any write to an image changes its modification time (nanoseconds).
digest() { stat -c '%n %s %y' "$@" | tr '\n' ' '; }

# expect CODE PATTERN -- ARGS: exit code, one line on stderr matching PATTERN,
# and no change to any image file.
expect() {
  local code=$1 pattern=$2
  shift 3
  [ "$code" -ne 0 ] && bad_inputs=$((bad_inputs + 1))
  local before after
  before=$(digest "$W"/*.img)
  "$C" "$@" >"$W/out" 2>"$W/err"
  local rc=$?
  after=$(digest "$W"/*.img)
  [ "$rc" -eq "$code" ] || fail "cachectl $*: exit $rc, wanted $code ($(cat "$W/err"))"
  if [ "$code" -ne 0 ]; then
    [ "$(wc -l <"$W/err")" -eq 1 ] || fail "cachectl $*: wanted one line on stderr: $(cat "$W/err")"
    grep -q -- "$pattern" "$W/err" || fail "cachectl $*: '$(cat "$W/err")' lacks '$pattern'"
    [ "$before" = "$after" ] || fail "cachectl $*: a device changed"
  fi
}
nbd() { echo "nbd:unix:$W/run/$1/nbd"; }
io() { qemu-io -f raw "$(nbd "$1")" "${@:2}" >"$W/io" 2>&1 || fail "qemu-io $*: $(cat "$W/io")"; \
       ! grep -q "verification failed\|error" "$W/io" || fail "qemu-io $*: $(cat "$W/io")"; }

# Prints the summary; exits 1 when anything failed.
finish() {
  [ -n "${CACHECTL_FIGURES:-}" ] && echo "bad_inputs ${bad_inputs:-0}" >>"$CACHECTL_FIGURES"
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "$1: all passed"
}
