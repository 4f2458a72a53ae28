# Sourced by statement-work.sh, statement-cpu.sh and the two *-instructions.sh (sh and bash): a schema made from
# migrations/postgres with a tenant and its application (and, for `paused`, one enabled endpoint,
# paused: the dispatch table's down case; for `other`, one enabled endpoint subscribed to
# `otp.verified` alone, which an in-app dispatch does not make), a VARIANT of this directory applied, and the writer's
# own statement of 15 in-app dispatches (`INSERT_NOTIFICATIONS`, read from its source; another
# number with STATEMENT_ROWS set) with the expressions of its 21 arrays, generated at each
# execution: 15 in-app notifications to users
# among 1,000, as the bench's dispatches are.
#
#   statement_setup URL SCHEMA none|paused|other VARIANT PGOPTIONS_EXTRA
#
# Sets PGOPTIONS (the schema first on the search path), `statement`, and the expressions for `$1`
# to `$21` in order: `argument_list` one per line, `arguments` comma-separated.
statement_setup() {
    setup_url=$1 setup_schema=$2 setup_mode=$3 setup_variant=$4
    setup_root=$(cd "$(dirname "$0")/../../.." && pwd)
    psql "$setup_url" -qX -c "DROP SCHEMA IF EXISTS $setup_schema CASCADE" -c "CREATE SCHEMA $setup_schema" 2>/dev/null
    export PGOPTIONS="-c search_path=$setup_schema $5"
    for f in "$setup_root"/migrations/postgres/*.sql; do
        psql "$setup_url" -qX -v ON_ERROR_STOP=1 -1 -f "$f" >/dev/null
    done
    psql "$setup_url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO tenants VALUES ('ten_1', 't', 0);
        INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_1', 'ten_1', 'a', 0);"
    if [ "$setup_mode" = other ]; then
        psql "$setup_url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, status, created_at, updated_at)
            VALUES ('whe_1', 'ten_1', 'http://127.0.0.1:9/', ',otp.verified,', 'enabled', 0, 0)"
    fi
    if [ "$setup_mode" = paused ]; then
        psql "$setup_url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO webhook_endpoints (id, tenant_id, url, status, created_at, updated_at, paused_after)
            VALUES ('whe_1', 'ten_1', 'http://127.0.0.1:9/', 'enabled', 0, 0, 0)"
    fi
    if [ -n "$setup_variant" ]; then
        psql "$setup_url" -qX -v ON_ERROR_STOP=1 -f "$setup_variant" >/dev/null
    fi
    # STATEMENT_ROWS random ids (users: one of 1,000) at each execution (EXECUTE takes no subquery).
    psql "$setup_url" -qX -v ON_ERROR_STOP=1 -c "CREATE FUNCTION statement_random(kind TEXT) RETURNS TEXT[] LANGUAGE sql VOLATILE AS \$\$
        SELECT array_agg(CASE kind WHEN 'user' THEN 'user' || (random() * 1000)::int
                                   ELSE kind || md5(random()::text) END) FROM generate_series(1, ${STATEMENT_ROWS:-15}) \$\$;"
    statement=$(awk '/^const INSERT_NOTIFICATIONS: &str = "/ { f = 1; sub(/^const INSERT_NOTIFICATIONS: &str = "/, "") }
        f { if (/";$/) { sub(/";$/, ""); print; exit } print }' "$setup_root/daemon/src/store/notifications/writes.rs")
    [ -n "$statement" ] || { echo "INSERT_NOTIFICATIONS not found in writes.rs" >&2; exit 1; }
    setup_now="(extract(epoch FROM clock_timestamp()) * 1000)::int8"
    argument_list="$(setup_random ntf_)
$(setup_fill "'ten_1'::text")
$(setup_fill "'app_1'::text")
$(setup_fill "'in_app'::text")
$(setup_random user)
$(setup_fill "'u***'::text")
$(setup_fill "NULL::text")
$(setup_fill "NULL::text")
$(setup_fill "'Hello'::text")
$(setup_fill "'A body of some length for the bench'::text")
$(setup_fill "NULL::text")
$(setup_fill "NULL::text")
$(setup_fill "NULL::text")
$(setup_fill "'delivered'::text")
$(setup_fill "1::int8")
$(setup_fill "$setup_now")
$(setup_random inb_)
$(setup_fill "'Hello'::text")
$(setup_fill "NULL::text")
$(setup_random key)
ARRAY['x']"
    arguments=$(printf '%s\n' "$argument_list" | paste -sd, -)
}
setup_fill() { echo "array_fill($1, ARRAY[${STATEMENT_ROWS:-15}])"; }
setup_random() { echo "statement_random('$1')"; }

# The statement with its arguments in place of `$1`…`$21` (after statement_setup), without its
# semicolon: a whole statement pgbench prepares, or the body of a `PREPARE`.
statement_inline() {
    STATEMENT="$statement" ARGUMENTS="$argument_list" python3 -c '
import os, re
arguments = os.environ["ARGUMENTS"].split("\n")
print(re.sub(r"\$([0-9]+)(?![0-9])", lambda m: arguments[int(m.group(1)) - 1], os.environ["STATEMENT"]))'
}

# A private cluster for the valgrind scripts (run as root; the cluster as the `postgres` user):
# made in a new temporary directory `dir`, started on a socket there with `fsync` off. Sets
# `bin`, `dir`, `port` and `url`; `as_postgres CMD…` runs CMD as that user.
private_cluster() {
    bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
    dir=$(mktemp -d) port=5439
    chown postgres "$dir"
    as_postgres "$bin/initdb" -A trust -D "$dir/data" >/dev/null
    as_postgres "$bin/pg_ctl" -s -D "$dir/data" -l "$dir/log" -o "-p $port -k $dir -c fsync=off -c listen_addresses=''" -w start
    url="postgresql:///postgres?host=$dir&port=$port&user=postgres"
}
as_postgres() { runuser -u postgres -- "$@"; }

# A private cluster with the schema SCHEMA made (statement_setup with MODE and VARIANT), stopped
# and copied to `$dir/base`: each count starts from that copy (a seeded random() then makes the
# same statements).
private_base() {
    private_cluster
    statement_setup "$url" "$1" "$2" "$3" ""
    as_postgres "$bin/pg_ctl" -s -D "$dir/data" -m fast -w stop
    cp -a "$dir/data" "$dir/base"
}
