#!/usr/bin/env bash
# Runs build/bench/ckpt_s3_bench against s3rver and radosgw (each started on
# 127.0.0.1 on a free port and stopped). Usage: bench/s3_bench.sh BUILD [MIB]
set -euo pipefail
build=$(realpath "$1"); mib=${2:-256}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
p=$(port)
"${CKPT_TOOLS_DIR:-/opt/ckpt-tools}/node_modules/.bin/s3rver" -d "$tmp/s3rver" -a 127.0.0.1 -p "$p" --silent >/dev/null 2>&1 &
s3pid=$!
trap 'kill $s3pid 2>/dev/null; "$src/scripts/s3/stop_radosgw.sh" "$tmp/rgw"; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/s3rver"; sleep 1.5
echo -n '{"server": "s3rver", "result": '
AWS_ENDPOINT_URL=http://127.0.0.1:$p AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
  "$build/bench/ckpt_s3_bench" s3://bench/run "$mib" | tr -d '\n'; echo '}'
if command -v radosgw >/dev/null; then
  r=$(port)
  "$src/scripts/s3/start_radosgw.sh" "$tmp/rgw" "$r" >/dev/null 2>&1
  echo -n '{"server": "radosgw", "result": '
  AWS_ENDPOINT_URL=http://127.0.0.1:$r AWS_ACCESS_KEY_ID=CKPTTESTKEY AWS_SECRET_ACCESS_KEY=ckpt-test-secret \
    "$build/bench/ckpt_s3_bench" s3://bench/run "$mib" | tr -d '\n'; echo '}'
fi
