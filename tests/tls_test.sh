#!/usr/bin/env bash
# NBD over TCP with TLS, end to end with real clients: libnbd's nbdinfo
# and nbdcopy (nbds:// URIs) and qemu-io, with a pre-shared key and
# with X.509 certificates made here (psktool, certtool). A wrong key, an
# unknown user, a client without a certificate and a client that does not
# start TLS are refused; the unix socket stays plain. Bad TLS options are
# refused at attach with one line, and nothing changes.
#
#   tls_test.sh CACHECTL
set -uo pipefail
C=$(readlink -f "$1")
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  for n in $(ls "$W/state" 2>/dev/null); do
    pid=$(cat "$W/run/$n/pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1
for tool in psktool certtool nbdinfo nbdcopy qemu-io; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (scripts/setup.sh installs it)"; exit 1; }
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
truncate -s 64M origin.img
truncate -s 32M ssd.img

echo "== credentials"
umask 077
psktool -u alice -p keys.psk >/dev/null
psktool -u alice -p wrong.psk >/dev/null
mkdir pki client noclient
certtool --generate-privkey --outfile pki/ca-key.pem 2>/dev/null
printf 'cn = cachectl test CA\nca\ncert_signing_key\nexpiration_days = 2\n' >ca.info
certtool --generate-self-signed --load-privkey pki/ca-key.pem --template ca.info --outfile pki/ca-cert.pem 2>/dev/null
certtool --generate-privkey --outfile pki/server-key.pem 2>/dev/null
printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' >server.info
certtool --generate-certificate --load-ca-certificate pki/ca-cert.pem --load-ca-privkey pki/ca-key.pem \
  --load-privkey pki/server-key.pem --template server.info --outfile pki/server-cert.pem 2>/dev/null
certtool --generate-privkey --outfile client/client-key.pem 2>/dev/null
printf 'cn = client\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 2\n' >client.info
certtool --generate-certificate --load-ca-certificate pki/ca-cert.pem --load-ca-privkey pki/ca-key.pem \
  --load-privkey client/client-key.pem --template client.info --outfile client/client-cert.pem 2>/dev/null
cp pki/ca-cert.pem client/
cp pki/ca-cert.pem noclient/
umask 022
[ -s pki/server-cert.pem ] && [ -s client/client-cert.pem ] || { echo "FAIL: certtool made no certificates"; exit 1; }

attach() { "$C" attach --origin origin.img --cache ssd.img --name vol --frontend socket --nbd-tcp "127.0.0.1:$port" "$@" >out 2>&1; }
psk_uri="nbds://alice@127.0.0.1:$port/vol?tls-psk-file=$W/keys.psk"

echo "== bad TLS options: one line, nothing changed"
before=$(stat -c '%y' origin.img ssd.img)
printf 'alice:nothex\n' >bad.psk; chmod 600 bad.psk
cp keys.psk open.psk; chmod 644 open.psk
expect_refused() {  # exit status, message, attach options
  local want=$1 msg=$2
  shift 2
  "$C" attach --origin origin.img --cache ssd.img --name vol --frontend socket "$@" >out 2>&1
  local rc=$?
  [ $rc -eq "$want" ] && [ "$(wc -l <out)" -eq 1 ] && grep -q -- "$msg" out || fail "attach $*: exit $rc: $(cat out)"
}
expect_refused 2 "which is not given" --tls-psk keys.psk
expect_refused 2 "exclude each other" --nbd-tcp "127.0.0.1:$port" --tls-psk keys.psk --tls-cert pki
expect_refused 3 "cannot read $W/missing.psk" --nbd-tcp "127.0.0.1:$port" --tls-psk missing.psk
expect_refused 2 "bad.psk line 1: not 'username:hexkey'" --nbd-tcp "127.0.0.1:$port" --tls-psk bad.psk
expect_refused 2 "readable by every user" --nbd-tcp "127.0.0.1:$port" --tls-psk open.psk
expect_refused 3 "cannot read $W/client/server-cert.pem" --nbd-tcp "127.0.0.1:$port" --tls-cert client
[ "$before" = "$(stat -c '%y' origin.img ssd.img)" ] || fail "a refused attach changed a device"
[ -z "$(ls state 2>/dev/null)" ] || fail "a refused attach left state: $(ls state)"

echo "== PSK: libnbd's tools and qemu"
attach --tls-psk keys.psk || fail "attach --tls-psk: $(cat out)"
head -c 48M /dev/urandom >data
# Four connections with 64 requests in flight each, through the relays.
nbdcopy --connections=4 --requests=64 data "$psk_uri" || fail "nbdcopy to nbds://"
nbdcopy --connections=4 --requests=64 "$psk_uri" back || fail "nbdcopy from nbds://"
cmp -n 50331648 data back || fail "what came back over TLS differs"
nbdinfo --size "$psk_uri" | grep -qx 67108864 || fail "nbdinfo --size over TLS"
mkdir qpsk && cp keys.psk qpsk/keys.psk
qemu-io --object "tls-creds-psk,id=tls0,endpoint=client,dir=$W/qpsk,username=alice" \
  --image-opts "driver=nbd,host=127.0.0.1,port=$port,export=vol,tls-creds=tls0" \
  -c 'write -P 0x5c 50M 1M' -c 'read -P 0x5c 50M 1M' >qemu.out 2>&1 || fail "qemu-io over TLS: $(cat qemu.out)"
nbdcopy "nbd+unix:///vol?socket=$W/run/vol/nbd" back2 || fail "the unix socket (plain) no longer serves"
cmp -n 50331648 data back2 || fail "the unix socket reads other data"
"$C" stats vol | grep -q "NBD over TCP .*127.0.0.1:$port, TLS with a pre-shared key" || fail "stats: $("$C" stats vol)"

echo "== PSK: refused clients"
refused() {  # what, command...
  local what=$1
  shift
  if timeout 30 "$@" >ref.out 2>&1; then fail "$what was served"; fi
}
refused "a wrong key" nbdinfo "nbds://alice@127.0.0.1:$port/vol?tls-psk-file=$W/wrong.psk"
psktool -u bob -p bob.psk >/dev/null
refused "an unknown user" nbdinfo "nbds://bob@127.0.0.1:$port/vol?tls-psk-file=$W/bob.psk"
refused "a client without TLS" nbdinfo --size "nbd://127.0.0.1:$port/vol"
grep -q "requires TLS" ref.out || fail "a plain client is not told TLS is required: $(cat ref.out)"
nbdinfo --size "$psk_uri" >/dev/null || fail "refused clients stopped the server"
"$C" stop vol >/dev/null
"$C" start vol >out 2>&1 || fail "start with TLS: $(cat out)"
nbdcopy "$psk_uri" back || fail "nbdcopy after a restart"
cmp -n 50331648 data back || fail "data after a restart"
"$C" detach vol >/dev/null || fail "detach"

echo "== X.509: a certificate the CA signed, and nothing else"
attach --tls-cert pki || fail "attach --tls-cert: $(cat out)"
cert_uri="nbds://localhost:$port/vol?tls-certificates=$W/client"
nbdcopy data "$cert_uri" || fail "nbdcopy with a client certificate"
nbdcopy "$cert_uri" back || fail "nbdcopy back with a client certificate"
cmp -n 50331648 data back || fail "X.509: what came back differs"
refused "a client without a certificate" nbdinfo "nbds://localhost:$port/vol?tls-certificates=$W/noclient"
refused "a PSK client on an X.509 server" nbdinfo "$psk_uri"
"$C" stats vol | grep -q "TLS with X.509 certificates" || fail "stats: $("$C" stats vol)"
"$C" detach vol >/dev/null || fail "detach"

echo "== with TLS, an address other hosts reach needs no --insecure"
"$C" attach --origin origin.img --cache ssd.img --name vol --frontend socket --nbd-tcp "0.0.0.0:$port" \
  --tls-psk keys.psk >out 2>&1 || fail "attach on 0.0.0.0 with TLS: $(cat out)"
nbdinfo --size "$psk_uri" >/dev/null || fail "nbdinfo on 0.0.0.0"
"$C" detach vol >/dev/null

[ $failures -eq 0 ] && echo "tls_test: all passed" || echo "tls_test: $failures failure(s)"
[ $failures -eq 0 ]
