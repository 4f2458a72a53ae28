#!/bin/bash
# The whole server's instructions (every process: backends, WAL writer, checkpointer, autovacuum)
# for one writer statement of 15 in-app dispatches sent by pgbench from two connections, counted
# under valgrind (cachegrind, children traced): N and 2N statements from the same copy of a
# private cluster, the difference over N. What statement-instructions.sh does for one backend,
# here for all of them (the cost around the statement: commits, locks, vacuum).
#
#   bench/sql/webhooks/server-instructions.sh none|paused|other [N] [VARIANT.sql]
set -eu
mode=$1 n=${2:-200} variant=${3:+$(readlink -f "$3")}
. "$(dirname "$0")/statement-setup.sh"
schema=herald_server_instructions
private_base "$schema" "$mode" "$variant"
echo "$(statement_inline);" >"$dir/script.sql"
chmod a+r "$dir/script.sql"
instructions() {
    rm -rf "$dir/data" "$dir/cg"
    cp -a "$dir/base" "$dir/data"
    mkdir "$dir/cg" && chown postgres "$dir/cg"
    as_postgres valgrind -q --tool=cachegrind --cache-sim=no --trace-children=yes \
        --cachegrind-out-file="$dir/cg/%p" "$bin/postgres" -D "$dir/data" -p $port -k "$dir" \
        -c listen_addresses= -c synchronous_commit=off >"$dir/log" 2>&1 &
    for _ in $(seq 1 120); do psql "$url" -qAtX -c "SELECT 1" >/dev/null 2>&1 && break; sleep 1; done
    PGOPTIONS="-c search_path=$schema" pgbench -n -M prepared -c 2 -t "$(($1 / 2))" -f "$dir/script.sql" "$url" >/dev/null 2>&1
    as_postgres "$bin/pg_ctl" -s -D "$dir/data" -m fast -w -t 300 stop
    wait
    cat "$dir"/cg/* | sed -n 's/^summary: *//p' | awk '{s += $1} END {printf "%d\n", s}'
}
once=$(instructions "$n")
twice=$(instructions "$((2 * n))")
echo "$mode${variant:+ ($(basename "$variant"))}: $(( (twice - once) / n )) server instructions per statement of ${STATEMENT_ROWS:-15} (N = $n)"
rm -rf "$dir"
