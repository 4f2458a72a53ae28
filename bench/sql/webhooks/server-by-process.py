#!/usr/bin/env python3
"""Where the PostgreSQL server's CPU goes during a dispatch table (twenty-eighth session).

    server-by-process.py record SAMPLES DBNAME [--statements] &
    herald-bench webhooks --dispatch-only ... | server-by-process.py stamp > BENCH_OUT
    kill %1
    server-by-process.py report SAMPLES BENCH_OUT [REQUESTS_PER_ROW]

`record` samples every `postgres` process's CPU (utime + stime from /proc, and the postmaster's
children's, for exited processes) every 0.2 s, and once a second what each connection last ran
(pg_stat_activity); with --statements, pg_stat_statements every 0.25 s too (it must be loaded:
shared_preload_libraries, `pg_stat_statements.track = all` for the triggers' statements, and the
extension created in DBNAME). One psql process serves every query; its own connection shows in
the report (some 9 ms per 1,000 dispatches with --statements, alike in every case).
`stamp` prefixes each line of the bench's output with the time. `report` takes each row's
window from its line (its end) and its rate (its length: REQUESTS / rate) and prints, per case,
the median over its rows of the CPU per 1,000 dispatches by process (connections named by what
they ran most), then, with --statements samples, each statement's time and calls per 1,000. A
delivering row's line comes once its deliveries arrived, so its window holds their tail, not
its dispatches; the none and down rows' windows are their dispatches (and the vacuum and
checkpoint just before).
"""
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


class Psql:
    """One psql process, queries in and rows out, each answer ended by a marker."""

    def __init__(self, dbname):
        self.p = subprocess.Popen(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", dbname, "-qAtX", "-F", "\x1f"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def rows(self, sql):
        self.p.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo __end__\n")
        out = []
        for line in self.p.stdout:
            if line.rstrip("\n") == "__end__":
                return out
            out.append(line.rstrip("\n").split("\x1f"))
        return out


def processes():
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open(f"/proc/{pid}/comm").read().strip() != "postgres":
                continue
            stat = open(f"/proc/{pid}/stat").read()
            fields = stat[stat.rfind(")") + 2:].split()
            title = open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
            found[pid] = [int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]), title]
        except (OSError, IndexError, ValueError):
            pass
    return found


ACTIVITY = ("SELECT pid, backend_type, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) "
            "FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
STATEMENTS = ("SELECT queryid || ':' || toplevel, calls, total_exec_time + total_plan_time, "
              "left(regexp_replace(query, '\\s+', ' ', 'g'), 100) FROM public.pg_stat_statements "
              "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")


def record(path, dbname, statements):
    psql = Psql(dbname)
    out = open(path, "w")
    texts, last_activity, last_statements = set(), 0.0, 0.0
    while True:
        now = time.time()
        sample = {"t": now, "p": processes()}
        if now - last_activity >= 1.0:
            last_activity = now
            sample["a"] = psql.rows(ACTIVITY)
        if statements and now - last_statements >= 0.25:
            last_statements = now
            sample["s"] = {}
            for key, calls, ms, text in psql.rows(STATEMENTS):
                if key not in texts:
                    texts.add(key)
                    out.write(json.dumps({"text": [key, text]}) + "\n")
                sample["s"][key] = [int(calls), float(ms)]
        out.write(json.dumps(sample) + "\n")
        out.flush()
        time.sleep(max(0.0, 0.2 - (time.time() - now)))


def stamp():
    for line in sys.stdin:
        print(f"{time.time():.3f} {line}", end="", flush=True)


def report(samples_path, bench_path, requests):
    samples, texts = [], {}
    for line in open(samples_path):
        record_ = json.loads(line)
        if "text" in record_:
            texts[record_["text"][0]] = record_["text"][1]
        else:
            samples.append(record_)
    rows = []
    for line in open(bench_path):
        at, _, rest = line.partition(" ")
        match = re.match(r"\| ([^|]+?) \| (\d+) \|", rest)
        if match and rest.count("|") > 10:
            rows.append((float(at), match.group(1), int(match.group(2))))
    ran = collections.defaultdict(collections.Counter)
    for sample in samples:
        for pid, kind, query in (a for a in sample.get("a", []) if len(a) == 3):
            ran[pid][f"{kind}: {query[:45]}"] += 1
    postmasters = {pid for pid, (_, _, title) in samples[0]["p"].items() if "postgres:" not in title}

    def name(pid, title):
        if pid in postmasters:
            return "postmaster"
        for kind in ("walwriter", "checkpointer", "background writer", "autovacuum", "logical replication"):
            if kind in title:
                return kind
        return f"{pid} {ran[pid].most_common(1)[0][0]}" if ran[pid] else f"{pid} {title[-40:]}"

    def at(t, part="p"):
        return max((s for s in samples if s["t"] <= t and part in s), key=lambda s: s["t"])

    per_process = collections.defaultdict(lambda: collections.defaultdict(list))
    per_statement = collections.defaultdict(lambda: collections.defaultdict(list))
    cases = []
    for end, case, rate in rows:
        if case not in cases:
            cases.append(case)
        before, after = at(end - requests / rate - 0.3), at(end)
        spent = collections.Counter()
        for pid, (cpu, children, title) in after["p"].items():
            earlier = before["p"].get(pid, [0, 0, ""])
            spent[name(pid, title)] += cpu - earlier[0]
            if pid in postmasters:
                spent["exited processes"] += children - earlier[1]
        for key in set(spent) | set(per_process):
            per_process[key][case].append(spent[key] / TICK * 1000 / requests * 1000)
        if any("s" in sample for sample in samples):
            before, after = at(end - requests / rate - 0.3, "s"), at(end, "s")
            for key, (calls, ms) in after["s"].items():
                earlier = before["s"].get(key, [0, 0.0])
                per_statement[key][case].append(((ms - earlier[1]) / requests * 1000,
                                                 (calls - earlier[0]) / requests * 1000))

    def median(values):
        return statistics.median(values) if values else float("nan")

    print("CPU ms per 1,000 dispatches, median over each case's rows:", " | ".join(cases))
    for key in sorted(per_process, key=lambda k: -sum(map(sum, per_process[k].values()))):
        print(" | ".join(f"{median(per_process[key][c]):7.1f}" for c in cases), "|", key[:90])
    if per_statement:
        print("\nstatements, ms (wall) and calls per 1,000 dispatches:", " | ".join(cases))
        ranked = sorted(per_statement, key=lambda k: -max(median([x[0] for x in per_statement[k][c]]) or 0
                                                           for c in cases if per_statement[k][c]))
        for key in ranked[:25]:
            cells = [f"{median([x[0] for x in per_statement[key][c]]):7.1f} ms {median([x[1] for x in per_statement[key][c]]):6.1f}"
                     for c in cases]
            print(" | ".join(cells), "|", "top" if key.endswith(":true") else "nested", texts.get(key, "?")[:90])


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "record":
        record(sys.argv[2], sys.argv[3], "--statements" in sys.argv)
    elif command == "stamp":
        stamp()
    elif command == "report":
        report(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 30000)
    else:
        sys.exit(__doc__)
