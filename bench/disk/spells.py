#!/usr/bin/env python3
"""Sets each spell of a `HERALD_BENCH_TIMELINE=1 herald-bench webhooks` run (a 100 ms bucket
whose slowest first attempt waited over 50 ms) beside what bench/disk/sampler.sh saw the disk do
in the 250 ms before and 350 ms after it: a writeback of 50 MB or more, or a second or more of
write waits summed over the requests in one 50 ms sample.

    bench/disk/spells.py bench-output.txt sampler-output.txt
"""
import re
import sys


def seconds(clock):
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main(bench, sampler):
    rows = [line.split() for line in open(sampler) if len(line.split()) >= 6]
    busy = []
    for before, after in zip(rows, rows[1:]):
        sectors = int(after[3]) - int(before[3])
        waited = int(after[4]) - int(before[4])
        if sectors >= 100_000 or waited >= 1000:
            busy.append((seconds(after[0]), after[0], sectors * 512 // 2**20, waited, int(before[1]) // 1024))
    print(f"disk samples with 50 MB or more written, or 1 s or more of write waits: {len(busy)}")
    start = None
    for line in open(bench):
        if m := re.search(r"first event at \S+T(\d\d:\d\d:\d\d\.\d+)Z", line):
            start = seconds(m.group(1))
        elif (m := re.search(r"t\+([\d.]+) s: \d+ events, slowest (\d+) ms", line)) and start is not None:
            at = start + float(m.group(1))
            near = [b for b in busy if -0.25 <= b[0] - at <= 0.35]
            clock = f"{int(at // 3600):02d}:{int(at % 3600 // 60):02d}:{at % 60:06.3f}"
            seen = "; ".join(f"{b[1]}: {b[2]} MB written, {b[3]} ms of write waits, {b[4]} MB dirty before" for b in near)
            print(f"spell at {clock}, slowest {m.group(2)} ms: {seen or 'nothing on the disk over the thresholds'}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
