#!/usr/bin/env bash
# Starts a one-node Ceph cluster (mon + one memstore OSD + radosgw) on
# 127.0.0.1 for the S3 tests that need a server that checks SigV4 signatures
# and implements conditional writes. Usage: start_radosgw.sh DIR RGW_PORT
# Prints "endpoint=http://127.0.0.1:PORT access=... secret=..." when ready;
# stop with stop_radosgw.sh DIR (kills the pids in DIR/pids). Debian packages
# ceph-mon ceph-osd radosgw (scripts/install_s3_servers.sh).
set -euo pipefail
dir=$(realpath -m "$1"); rgw_port=$2
mon_port=$((rgw_port + 1))
mkdir -p "$dir"/{mon,osd0,run,log}
fsid=$(cat /proc/sys/kernel/random/uuid)
conf=$dir/ceph.conf
cat > "$conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon_port]
auth cluster required = none
auth service required = none
auth client required = none
osd objectstore = memstore
memstore device bytes = 2147483648
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
ms bind ipv4 = true
ms bind ipv6 = false
ms mon client mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
ms mon service mode = crc
ms mon cluster mode = crc
[mon.a]
mon data = $dir/mon
public addr = v2:127.0.0.1:$mon_port
[osd.0]
osd data = $dir/osd0
osd journal = $dir/osd0/journal
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/rgw
rgw enable usage log = false
CONF
monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >/dev/null
ceph-mon -c "$conf" -i a
C="ceph -c $conf --connect-timeout 20"
$C osd create >/dev/null
ceph-osd -c "$conf" -i 0 --mkfs >/dev/null 2>&1
ceph-osd -c "$conf" -i 0
mkdir -p "$dir/rgw"
radosgw -c "$conf" -n client.rgw
for _ in $(seq 1 120); do
  curl -s -o /dev/null "http://127.0.0.1:$rgw_port/" && break
  sleep 0.5
done
radosgw-admin -c "$conf" user create --uid=ckpt --display-name=ckpt --access-key=CKPTTESTKEY \
  --secret=ckpt-test-secret >/dev/null
echo "endpoint=http://127.0.0.1:$rgw_port access=CKPTTESTKEY secret=ckpt-test-secret"
