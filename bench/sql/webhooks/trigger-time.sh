#!/bin/sh
# The time PostgreSQL spends in the notifications' webhook trigger for a statement inserting 15
# in-app notifications (a writer's batch), from EXPLAIN ANALYZE, each statement rolled back:
# the median and quartiles of 37 statements (3 more warm up).
#
#   bench/sql/webhooks/trigger-time.sh URL SCHEMA none|paused [VARIANT.sql]
#
# URL: the bench's database (HERALD_TEST_DATABASE_URL); SCHEMA: a schema a `herald-bench` run
# left there (`herald_it_…`, holding its notifications); `paused`: one enabled endpoint, paused,
# as the dispatch table's down case (the schema's endpoints are replaced); VARIANT: SQL applied
# first (this directory's files). Changes the schema: use a bench's, never one you keep.
set -eu
url=$1 schema=$2 mode=$3 variant=${4:-}
export PGOPTIONS="-c search_path=$schema"
psql "$url" -qX -v ON_ERROR_STOP=1 -c "DELETE FROM webhook_endpoints"
if [ "$mode" = paused ]; then
    psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO webhook_endpoints (id, tenant_id, url, status, created_at, updated_at, paused_after)
        SELECT 'whe_trigger_time', id, 'http://127.0.0.1:9/', 'enabled', 0, 0, 0 FROM tenants LIMIT 1"
fi
[ -n "$variant" ] && psql "$url" -qX -v ON_ERROR_STOP=1 -f "$variant"
i=0
while [ $i -lt 40 ]; do
    echo "BEGIN;"
    echo "EXPLAIN (ANALYZE) INSERT INTO notifications (id, tenant_id, application_id, channel, recipient,
            recipient_masked, sender, subject, title, body, html_body, data, template_id, status, failure_reason,
            retryable, retry_count, attempt_count, created_at, updated_at, category, recipient_key)
        SELECT 'ntf_' || md5(random()::text), tenant_id, application_id, channel, recipient, recipient_masked,
               sender, subject, title, body, html_body, data, template_id, status, failure_reason, retryable,
               retry_count, attempt_count, created_at, updated_at, category, recipient_key
        FROM (SELECT * FROM notifications WHERE channel = 'in_app' LIMIT 1) t, generate_series(1, 15);"
    echo "ROLLBACK;"
    i=$((i + 1))
done | psql "$url" -qX | sed -n 's/.*Trigger webhook_notifications_inserted: time=\([0-9.]*\).*/\1/p' | tail -n +4 | sort -n |
    awk '{a[NR] = $1} END {printf "webhook trigger per statement of 15: median %.3f ms (quartiles %.3f-%.3f), %d statements\n", a[int(NR / 2) + 1], a[int(NR / 4) + 1], a[int(3 * NR / 4) + 1], NR}'
