#!/bin/bash
# The server's CPU for one writer statement of 15 in-app dispatches (the writer's
# INSERT_NOTIFICATIONS, read from daemon/src/store/notifications/writes.rs, its input generated),
# timed rather than counted: `pgbench` runs STATEMENTS of them (each its own transaction,
# `synchronous_commit` off) from CLIENTS connections, with no endpoint or with one paused (the
# dispatch table's down case), in a schema made from migrations/postgres; the CPU of every
# PostgreSQL process over the run (the backends', which have exited by then, from the
# postmaster's count of its children's) divided by STATEMENTS. It moved ±1–3 % between runs in the
# twenty-fourth session and ±10 % in the twenty-fifth: run the cases in turn, many passes, and
# compare medians (docs/PERFORMANCE.md).
#
#   bench/sql/webhooks/statement-cpu.sh URL none|paused|other [STATEMENTS] [CLIENTS] [VARIANT.sql]
#
# URL: a database to use (a schema `herald_statement_cpu` is made in it and dropped at the end);
# needs `pgbench` and the server on this machine (it reads /proc).
set -eu
url=$1 mode=$2 statements=${3:-8000} clients=${4:-2} variant=${5:-}
schema=herald_statement_cpu
. "$(dirname "$0")/statement-setup.sh"
statement_setup "$url" "$schema" "$mode" "$variant" "-c synchronous_commit=off"
script=$(mktemp)
# The statement with its arguments in place of `$1`…`$21` (pgbench then prepares it whole).
echo "$(statement_inline);" >"$script"
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
