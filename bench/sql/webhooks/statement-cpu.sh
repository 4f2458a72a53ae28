#!/bin/bash
# The server's CPU for one writer statement of 15 in-app dispatches (the writer's
# INSERT_NOTIFICATIONS, read from daemon/src/store/notifications/writes.rs, its input generated),
# timed rather than counted: `pgbench` runs STATEMENTS of them (each its own transaction,
# `synchronous_commit` off) from CLIENTS connections, with no endpoint or with one paused (the
# dispatch table's down case), in a schema made from migrations/postgres; the CPU of every
# PostgreSQL process over the run (the backends', which have exited by then, from the
# postmaster's count of its children's) divided by STATEMENTS. It moves ±3 % between runs here:
# run the cases in turn, several times (docs/PERFORMANCE.md, twenty-fourth session).
#
#   bench/sql/webhooks/statement-cpu.sh URL none|paused [STATEMENTS] [CLIENTS] [VARIANT.sql]
#
# URL: a database to use (a schema `herald_statement_cpu` is made in it and dropped at the end);
# needs `pgbench` and the server on this machine (it reads /proc).
set -eu
url=$1 mode=$2 statements=${3:-8000} clients=${4:-2} variant=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
schema=herald_statement_cpu
psql "$url" -qX -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema" 2>/dev/null
export PGOPTIONS="-c search_path=$schema -c synchronous_commit=off"
for f in "$root"/migrations/postgres/*.sql; do psql "$url" -qX -v ON_ERROR_STOP=1 -1 -f "$f" >/dev/null; done
psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO tenants VALUES ('ten_1', 't', 0);
    INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_1', 'ten_1', 'a', 0);"
if [ "$mode" = paused ]; then
    psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO webhook_endpoints (id, tenant_id, url, status, created_at, updated_at, paused_after)
        VALUES ('whe_1', 'ten_1', 'http://127.0.0.1:9/', 'enabled', 0, 0, 0)"
fi
[ -n "$variant" ] && psql "$url" -qX -v ON_ERROR_STOP=1 -f "$variant" >/dev/null
psql "$url" -qX -v ON_ERROR_STOP=1 -c "CREATE FUNCTION statement_cpu_random(kind TEXT) RETURNS TEXT[] LANGUAGE sql VOLATILE AS \$\$
    SELECT array_agg(CASE kind WHEN 'user' THEN 'user' || (random() * 1000)::int
                               ELSE kind || md5(random()::text) END) FROM generate_series(1, 15) \$\$;"
statement=$(awk '/^const INSERT_NOTIFICATIONS: &str = "/ { f = 1; sub(/^const INSERT_NOTIFICATIONS: &str = "/, "") }
    f { if (/";$/) { sub(/";$/, ""); print; exit } print }' "$root/daemon/src/store/notifications/writes.rs")
[ -n "$statement" ] || { echo "INSERT_NOTIFICATIONS not found in writes.rs" >&2; exit 1; }
fill() { echo "array_fill($1, ARRAY[15])"; }
random() { echo "statement_cpu_random('$1')"; }
now="(extract(epoch FROM clock_timestamp()) * 1000)::int8"
# The statement's 21 parameters, as expressions (pgbench then prepares it whole).
arguments=("$(random ntf_)" "$(fill "'ten_1'::text")" "$(fill "'app_1'::text")" "$(fill "'in_app'::text")"
    "$(random user)" "$(fill "'u***'::text")" "$(fill "NULL::text")" "$(fill "NULL::text")" "$(fill "'Hello'::text")"
    "$(fill "'A body of some length for the bench'::text")" "$(fill "NULL::text")" "$(fill "NULL::text")"
    "$(fill "NULL::text")" "$(fill "'delivered'::text")" "$(fill "1::int8")" "$(fill "$now")"
    "$(random inb_)" "$(fill "'Hello'::text")" "$(fill "NULL::text")" "$(random key)" "ARRAY['x']")
script=$(mktemp)
STATEMENT="$statement" python3 -c '
import os, re, sys
print(re.sub(r"\$([0-9]+)(?![0-9])", lambda m: sys.argv[int(m.group(1))], os.environ["STATEMENT"]) + ";")' \
    "${arguments[@]}" >"$script"
cpu() {
    { for p in $(pgrep -x postgres); do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null; done
      awk '{print $16 + $17}' "/proc/$(pgrep -o -x postgres)/stat"; } | awk '{s += $1} END {print s}'
}
# Every run starts just after a checkpoint (one falling inside a run adds its full-page images).
psql "$url" -qX -c CHECKPOINT
before=$(cpu)
latency=$(pgbench -n -M prepared -c "$clients" -t "$((statements / clients))" -f "$script" "$url" 2>&1 |
    sed -n 's/latency average = //p')
after=$(cpu)
ticks=$(getconf CLK_TCK)
psql "$url" -qAtX -c "SELECT '$mode: the server''s CPU per statement of 15 ' || round(($after - $before) * 1000000.0 / $ticks / $statements) || ' µs, latency $latency, '
    || (SELECT COUNT(*) FROM notifications) || ' notifications, ' || (SELECT COALESCE(SUM(cardinality(event_ids)), 0) FROM webhook_event_batches) || ' events in batches'"
rm -f "$script"
psql "$url" -qX -c "DROP SCHEMA $schema CASCADE" 2>/dev/null
