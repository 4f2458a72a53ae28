#!/usr/bin/env bash
# Profiles the release daemon on SQLite under in-app dispatch load: wrk posts notifications for
# 8 s while `perf record -g` samples the daemon. Needs wrk and perf (Debian: wrk, linux-perf).
# Then: perf report -i "$dir/perf.data" --no-children --sort symbol --stdio -g none | head -40
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(mktemp -d)"
export HERALD_DATABASE_URL="sqlite://$dir/h.db" HERALD_DATA_DIR="$dir/data" HERALD_LOG=warn \
       HERALD_SECRET=bench-secret-bench-secret-bench-secret-00 HERALD_LISTEN=127.0.0.1:18181
key=$("$root/target/release/heraldd" admin bootstrap --json | python3 -c 'import sys, json; print(json.load(sys.stdin)["api_key"])')
"$root/target/release/heraldd" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 1
cat > "$dir/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, "/api/v1/notifications", nil,
    '{"channel":"in_app","recipient":"user-' .. (counter % 1000) .. '","title":"Bench","body":"hello"}')
end
LUA
perf record -F 999 -g -p "$pid" -o "$dir/perf.data" -- sleep 8 &
wrk -t1 -c64 -d8s -s "$dir/post.lua" http://127.0.0.1:18181
wait
echo "profile: $dir/perf.data"
