#!/bin/sh
# The work PostgreSQL does for one writer statement of 15 in-app dispatches (the writer's
# INSERT_NOTIFICATIONS, read from daemon/src/store/notifications/writes.rs, its input generated),
# counted rather than timed: WAL bytes and shared-buffer accesses per statement, over 200
# committed statements, with no endpoint, with one paused endpoint (the dispatch table's down
# case), or with one paused endpoint and a VARIANT of this directory applied first. Times on this
# machine move ±5 % between runs; these counts move by a few bytes.
#
#   bench/sql/webhooks/statement-work.sh URL none|paused [VARIANT.sql]
#
# URL: a database to use (a schema `herald_statement_work` is made in it from migrations/postgres
# and dropped at the end).
set -eu
url=$1 mode=$2 variant=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
schema=herald_statement_work
psql "$url" -qX -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema" 2>/dev/null
export PGOPTIONS="-c search_path=$schema"
for f in "$root"/migrations/postgres/*.sql; do psql "$url" -qX -v ON_ERROR_STOP=1 -1 -f "$f" >/dev/null; done
psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO tenants VALUES ('ten_1', 't', 0);
    INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_1', 'ten_1', 'a', 0);"
if [ "$mode" = paused ]; then
    psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO webhook_endpoints (id, tenant_id, url, status, created_at, updated_at, paused_after)
        VALUES ('whe_1', 'ten_1', 'http://127.0.0.1:9/', 'enabled', 0, 0, 0)"
fi
[ -n "$variant" ] && psql "$url" -qX -v ON_ERROR_STOP=1 -f "$variant" >/dev/null
# The writer's own statement, read from its source, and its 21 arrays generated for each
# execution: 15 in-app notifications to users among 1,000, as the bench's dispatches are.
statement=$(awk '/^const INSERT_NOTIFICATIONS: &str = "/ { f = 1; sub(/^const INSERT_NOTIFICATIONS: &str = "/, "") }
    f { if (/";$/) { sub(/";$/, ""); print; exit } print }' "$root/daemon/src/store/notifications/writes.rs")
[ -n "$statement" ] || { echo "INSERT_NOTIFICATIONS not found in writes.rs" >&2; exit 1; }
fill() { echo "array_fill($1, ARRAY[15])"; }
random() { echo "statement_work_random('$1')"; }
now="(extract(epoch FROM clock_timestamp()) * 1000)::int8"
arguments="$(random ntf_), $(fill "'ten_1'::text"), $(fill "'app_1'::text"),
    $(fill "'in_app'::text"), $(random user), $(fill "'u***'::text"),
    $(fill "NULL::text"), $(fill "NULL::text"), $(fill "'Hello'::text"),
    $(fill "'A body of some length for the bench'::text"), $(fill "NULL::text"), $(fill "NULL::text"),
    $(fill "NULL::text"), $(fill "'delivered'::text"), $(fill "1::int8"), $(fill "$now"),
    $(random inb_), $(fill "'Hello'::text"), $(fill "NULL::text"),
    $(random key), ARRAY['x']"
{
    # 15 random ids (users: one of 1,000) for each execution (EXECUTE takes no subquery).
    echo "CREATE FUNCTION statement_work_random(kind TEXT) RETURNS TEXT[] LANGUAGE sql VOLATILE AS \$\$
        SELECT array_agg(CASE kind WHEN 'user' THEN 'user' || (random() * 1000)::int
                                   ELSE kind || md5(random()::text) END) FROM generate_series(1, 15) \$\$;"
    echo "PREPARE d AS $statement;"
    # Warm up (the first statements plan and fill the tables' first pages).
    i=0; while [ $i -lt 20 ]; do echo "EXECUTE d($arguments);"; i=$((i + 1)); done
    echo "CHECKPOINT;"
    echo "SELECT pg_stat_force_next_flush(); SELECT pg_sleep(0.2);"
    echo "SELECT pg_current_wal_insert_lsn() AS l0, (SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()) AS b0 \\gset"
    i=0; while [ $i -lt 200 ]; do echo "EXECUTE d($arguments);"; i=$((i + 1)); done
    echo "SELECT pg_stat_force_next_flush(); SELECT pg_sleep(0.2);"
    echo "SELECT 'per statement of 15: WAL ' || round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'l0') / 200) || ' bytes, '
        || round(((SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()) - :b0) / 200.0)
        || ' buffer accesses';"
} | psql "$url" -qAtX -v ON_ERROR_STOP=1 | tail -1
psql "$url" -qX -c "DROP SCHEMA $schema CASCADE" 2>/dev/null
