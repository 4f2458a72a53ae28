#!/bin/sh
# The work PostgreSQL does for one writer statement of 15 in-app dispatches (the writer's
# INSERT_NOTIFICATIONS, read from daemon/src/store/notifications/writes.rs, its input generated),
# counted rather than timed: WAL bytes and shared-buffer accesses per statement, over 200
# committed statements, with no endpoint, with one paused endpoint (the dispatch table's down
# case), or with one paused endpoint and a VARIANT of this directory applied first. Times on this
# machine move ±5 % between runs; these counts move by a few bytes.
#
#   bench/sql/webhooks/statement-work.sh URL none|paused|other [VARIANT.sql]
#
# URL: a database to use (a schema `herald_statement_work` is made in it from migrations/postgres
# and dropped at the end).
set -eu
url=$1 mode=$2 variant=${3:-}
schema=herald_statement_work
. "$(dirname "$0")/statement-setup.sh"
statement_setup "$url" "$schema" "$mode" "$variant" ""
{
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
