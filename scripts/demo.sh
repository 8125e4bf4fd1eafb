#!/usr/bin/env bash
# podnet's main job on one machine, with nothing else running: two pods on
# one network, one serving HTTP, the other fetching from it by pod IP, plus
# a port mapped from the host. Prints the pods' addresses and set-up times,
# then removes everything it made.
#
# Usage: scripts/demo.sh BINDIR   (BINDIR holds podnet and its plugins)
set -euo pipefail

BIN=$(cd "${1:-bin}" && pwd)
if [ "$(id -u)" != 0 ]; then
	echo "demo: needs root (it creates network namespaces); run: sudo make run" >&2
	exit 1
fi

# The reference plugins podnet drives until podnet's own routed plugin and
# port mapper are installed by `make build`.
UPSTREAM_VERSION=v1.9.1
UPSTREAM="$BIN/upstream-$UPSTREAM_VERSION"
if [ ! -x "$UPSTREAM/portmap" ]; then
	echo "demo: installing reference plugins $UPSTREAM_VERSION from the Go module proxy"
	for p in main/ptp ipam/host-local meta/portmap; do
		GOBIN="$UPSTREAM" go install "github.com/containernetworking/plugins/plugins/$p@$UPSTREAM_VERSION"
	done
fi

WORK=$(mktemp -d /tmp/podnet-demo.XXXXXX)
CONF="$WORK/net.d"
PLUGINS="$WORK/bin"
mkdir -p "$CONF" "$PLUGINS"
cp "$BIN/loopback" "$UPSTREAM"/* "$PLUGINS/"

SUBNET=10.244.250.0/24
cat >"$CONF/10-demo.conflist" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "demo",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$WORK/ipam"}},
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ]
}
CONF

PODNET=("$BIN/podnet" --conf-dir "$CONF" --bin-dir "$PLUGINS" --cache-dir "$WORK/cache" --state-dir "$WORK/state")
podnet() { "${PODNET[@]}" "$@"; }

SERVER_PID=
cleanup() {
	status=$?
	if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill -TERM "$SERVER_PID" && wait "$SERVER_PID" || true
	fi
	for name in $(podnet pod ls 2>/dev/null | awk 'NR>1 {print $1}'); do podnet pod rm "$name" || status=1; done
	rm -rf "$WORK"
	exit $status
}
trap cleanup EXIT

echo "== network"
podnet status

echo "== pod demo-server: HTTP on :8080, host port 18080 mapped to it"
# Not through the function: $! must be podnet's own PID, so that SIGTERM
# reaches it (and it forwards it to the server, then tears the pod down).
"${PODNET[@]}" run -v --name demo-server -p 18080:8080 -- "$BIN/podnet" diag serve --listen :8080 &
SERVER_PID=$!

SERVER_IP=
for _ in $(seq 100); do
	SERVER_IP=$(podnet pod ls | awk '$1 == "demo-server" && $4 != "-" {print $4}')
	[ -n "$SERVER_IP" ] && podnet diag get --timeout 200ms "http://$SERVER_IP:8080/" >/dev/null 2>&1 && break
	sleep 0.1
done
[ -n "$SERVER_IP" ] || { echo "demo: server pod did not come up" >&2; exit 1; }

echo "== pod demo-client fetches from the server by pod IP $SERVER_IP"
podnet run -v --name demo-client -- "$BIN/podnet" diag get "http://$SERVER_IP:8080/"

echo "== the host fetches through the mapped port 127.0.0.1:18080"
podnet diag get "http://127.0.0.1:18080/"

echo "== pods"
podnet pod ls

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || true
SERVER_PID=

left=$(podnet pod ls | awk 'NR>1' | wc -l)
cached=$(ls "$WORK/cache/results" 2>/dev/null | wc -l)
addrs=$(ls "$WORK/ipam/demo" 2>/dev/null | grep -c '^10\.' || true)
echo "== after: $left sandbox(es), $cached cached attachment(s), $addrs allocated address(es)"
[ "$left$cached$addrs" = "000" ] || { echo "demo: something was left behind" >&2; exit 1; }
echo "demo: ok"
