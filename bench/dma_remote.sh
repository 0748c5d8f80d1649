#!/bin/sh
# dma_remote.sh - run dma_bench against a segment of another node: two vscid
# nodes, each in its own network namespace joined by a veth pair (as
# `vsci bench --paths remote` sets them up), `dma_bench -owner` on node 2 and
# `dma_bench -rn 2 [ARGS]` on node 1.  Needs root (ip netns).  Everything it
# creates is removed on exit.
#
#   sudo bench/dma_remote.sh [-quick] [-s abcde]      (after `make`)
set -eu

BUILD=${VSCI_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
TAG=vsci-dma-$$
DIR=$(mktemp -d "/tmp/$TAG.XXXXXX")
NS1=$TAG-n1
NS2=$TAG-n2
NET=10.215.$(( $$ % 250 + 1 ))
PIDS=""

cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$NS1" 2>/dev/null || true
    ip netns del "$NS2" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

ip netns add "$NS1"
ip netns add "$NS2"
ip link add vd1 netns "$NS1" type veth peer name vd2 netns "$NS2"
ip -n "$NS1" link set lo up
ip -n "$NS2" link set lo up
ip -n "$NS1" addr add "$NET.1/24" dev vd1
ip -n "$NS2" addr add "$NET.2/24" dev vd2
ip -n "$NS1" link set vd1 up
ip -n "$NS2" link set vd2 up

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/cluster.key"
chmod 600 "$DIR/cluster.key"
cat > "$DIR/cluster.toml" <<EOF
key_file = "cluster.key"

[[node]]
id = 1
address = "$NET.1:7100"

[[node]]
id = 2
address = "$NET.2:7100"
EOF

for n in 1 2; do
    ip netns exec "$TAG-n$n" "$BUILD/bin/vscid" --config "$DIR/cluster.toml" --node-id "$n" \
        --socket "$DIR/node$n.sock" > "$DIR/node$n.log" 2>&1 &
    PIDS="$PIDS $!"
done

# Wait until node 1 sees node 2 up, then give the RMA engines a moment (as
# `vsci bench` does).
i=0
until VSCI_SOCKET="$DIR/node1.sock" "$BUILD/bin/vsci" status --json 2>/dev/null \
        | tr -d ' \n' | grep -q '"node_id":2,[^}]*"state":"up"'; do
    i=$((i + 1))
    if [ $i -gt 300 ]; then
        echo "dma_remote.sh: node 2 never came up" >&2
        cat "$DIR/node1.log" "$DIR/node2.log" >&2
        exit 1
    fi
    sleep 0.1
done
sleep 1.5

VSCI_SOCKET="$DIR/node2.sock" ip netns exec "$NS2" "$BUILD/bench/dma_bench" -owner > "$DIR/owner.log" 2>&1 &
OWNER=$!
PIDS="$OWNER $PIDS"
i=0
until grep -q "OWNER READY" "$DIR/owner.log"; do
    i=$((i + 1))
    [ $i -le 300 ] || { cat "$DIR/owner.log" >&2; exit 1; }
    sleep 0.1
done

VSCI_SOCKET="$DIR/node1.sock" ip netns exec "$NS1" "$BUILD/bench/dma_bench" -rn 2 "$@"
