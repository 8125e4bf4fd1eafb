#!/usr/bin/env bash
# podnet's main job on one machine, with nothing else running: two pods on
# one network, one serving HTTP, the other fetching from it by pod IP, plus
# a port mapped from the host. Prints the pods' addresses and set-up times,
# then removes everything it made.
#
# Usage: scripts/demo.sh BINDIR   (BINDIR holds podnet, BINDIR/cni its plugins)
set -euo pipefail

BIN=$(cd "${1:-bin}" && pwd)
if [ "$(id -u)" != 0 ]; then
	echo "demo: needs root (it creates network namespaces); run: sudo make run" >&2
	exit 1
fi

WORK=$(mktemp -d /tmp/podnet-demo.XXXXXX)
CONF="$WORK/net.d"
PLUGINS="$WORK/bin"
mkdir -p "$CONF" "$PLUGINS"
cp "$BIN/cni/loopback" "$BIN/cni/podnet" "$BIN/cni/podnet-ipam" "$BIN/cni/podnet-portmap" "$PLUGINS/"

SUBNET=10.244.250.0/24
cat >"$CONF/10-demo.conflist" <<CONF
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "plugins": [
    {"type": "podnet", "mode": "routed", "capabilities": {"portMappings": true},
     "ipam": {"type": "podnet-ipam", "store": "bolt:$WORK/ipam.db", "pools": [{"name": "demo", "cidr": "$SUBNET"}]}}
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
	# GC with no pod left lets the plugins drop their now empty tables.
	podnet pod gc demo >/dev/null || status=1
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
echo "== addresses"
"$BIN/podnet" ipam show --blocks --store "bolt:$WORK/ipam.db"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || true
SERVER_PID=

left=$(podnet pod ls | awk 'NR>1' | wc -l)
cached=$(ls "$WORK/cache/results" 2>/dev/null | wc -l)
addrs=$("$BIN/podnet" ipam show --store "bolt:$WORK/ipam.db" -o json | sed -n 's/^  "allocated": \([0-9]*\).*/\1/p')
echo "== after: $left sandbox(es), $cached cached attachment(s), $addrs allocated address(es)"
[ "$left$cached$addrs" = "000" ] || { echo "demo: something was left behind" >&2; exit 1; }
echo "demo: ok"
