#!/bin/bash
# The server's instructions for one writer statement of 15 in-app dispatches (the writer's
# INSERT_NOTIFICATIONS, as statement-cpu.sh runs it; STATEMENT_ROWS=60 for 60 of them), counted
# rather than timed: this machine's timings move ±15 % from one run to the next and it has no
# hardware counters, so a backend runs the statement under valgrind (cachegrind, no cache
# simulation), in single-user mode on a private cluster, N times and then 2N times, each from the
# same copy of the cluster with `random()` seeded; the difference divided by N is one statement's
# instructions (setup and shutdown cancel out). The counts repeat to within a few instructions.
#
#   bench/sql/webhooks/statement-instructions.sh none|paused|other [N] [VARIANT.sql]
#
# Needs valgrind, PostgreSQL's binaries (/usr/lib/postgresql/*/bin) and root (the cluster runs as
# the `postgres` user); the cluster is made in a temporary directory and removed. CG_OUT=FILE.%p
# keeps cachegrind's per-function counts of each run.
set -eu
mode=$1 n=${2:-100} variant=${3:+$(readlink -f "$3")}
. "$(dirname "$0")/statement-setup.sh"
schema=herald_statement_instructions
private_base "$schema" "$mode" "$variant"
# One statement with its arguments in place of `$1`…`$21`, prepared once, executed `count` times.
script() {
    printf 'SET search_path = %s;\n\nSET synchronous_commit = off;\n\nSELECT setseed(0.5);\n\n' "$schema"
    printf 'PREPARE s AS %s;\n\n' "$(statement_inline)"
    for _ in $(seq 1 "$1"); do printf 'EXECUTE s;\n\n'; done
}
instructions() {
    rm -rf "$dir/data"
    cp -a "$dir/base" "$dir/data"
    script "$1" >"$dir/script.sql"
    chown postgres "$dir/script.sql"
    as_postgres valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=${CG_OUT:-/dev/null} \
        "$bin/postgres" --single -j -D "$dir/data" postgres <"$dir/script.sql" 2>&1 >/dev/null |
        sed -n 's/.*I *refs: *//p' | tr -d ,
}
once=$(instructions "$n")
twice=$(instructions "$((2 * n))")
echo "$mode${variant:+ ($(basename "$variant"))}: $(( (twice - once) / n )) instructions per statement of ${STATEMENT_ROWS:-15} (N = $n)"
rm -rf "$dir"
