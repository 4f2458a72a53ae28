#!/usr/bin/env python3
"""SQLite's notification triggers, timed per row: 28-row inserts of in-app notifications into an
in-memory database made from migrations/sqlite up to a migration (`0021`: the triggers before the
wanted test, `0022`: with it), with no endpoint or one paused endpoint subscribed to TYPES
(`all`, or `,a,b,` as the column stores them). The CPU per row, median of the passes, the cases
interleaved (the tables grow alike).

    python3 bench/sql/webhooks/sqlite-trigger-rows.py [PASSES]
"""
import glob
import os
import sqlite3
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
MIGRATIONS = sorted(glob.glob(os.path.join(ROOT, "migrations", "sqlite", "*.sql")))
COLUMNS = ("(id, tenant_id, application_id, channel, recipient, recipient_masked, body, status, "
           "retryable, retry_count, created_at, updated_at)")
ROW = "(?, 'ten_1', 'app_1', 'in_app', 'user_1', 'u***', 'Hello body', 'delivered', 0, 0, 5, 5)"
CASES = [("0021", "none"), ("0021", ",notification.delivered,"), ("0022", "none"),
         ("0022", ",notification.delivered,"), ("0022", "all"), ("0022", ",otp.verified,")]


def database(up_to, types):
    db = sqlite3.connect(":memory:", isolation_level=None)
    for migration in MIGRATIONS:
        if os.path.basename(migration)[:4] > up_to:
            break
        db.executescript(open(migration).read())
    db.execute("INSERT INTO tenants (id, name, created_at) VALUES ('ten_1', 't', 0)")
    db.execute("INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_1', 'ten_1', 'a', 0)")
    if types != "none":
        db.execute("INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, status, created_at, "
                   "updated_at, paused_after) VALUES ('whe_1', 'ten_1', 'http://x/', ?, 'enabled', 0, 0, 0)",
                   (None if types == "all" else types,))
    return db


def per_row(db, statements, first):
    sql = f"INSERT INTO notifications {COLUMNS} VALUES " + ",".join([ROW] * 28)
    db.execute("BEGIN")
    started = time.process_time()
    for i in range(statements):
        db.execute(sql, [f"notif_{first + i}_{j}" for j in range(28)])
    spent = time.process_time() - started
    db.execute("COMMIT")
    return spent / (statements * 28) * 1e6


def main():
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    databases = {case: database(*case) for case in CASES}
    times = {case: [] for case in CASES}
    for p in range(passes):
        for case in CASES:
            times[case].append(per_row(databases[case], 150, p * 1000))
    print(f"SQLite {sqlite3.sqlite_version}, µs of CPU per notification row, median of {passes} passes")
    for (up_to, types), spent in times.items():
        print(f"  up to {up_to}, endpoint {types}: {statistics.median(spent):.2f}")


if __name__ == "__main__":
    main()
