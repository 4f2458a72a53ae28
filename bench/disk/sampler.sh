#!/bin/bash
# Samples the kernel's dirty pages and a disk's writes every 50 ms, one line per sample:
#   UTC time, Dirty kB, Writeback kB, sectors written, ms spent writing, requests in flight
# (the last three are /proc/diskstats' cumulative fields 10-12). Run it beside a bench and
# stop it after; bench/disk/spells.py sets the bench's timeline beside it.
#   bench/disk/sampler.sh > /tmp/disk.txt & herald-bench webhooks ...; kill %1
dev=${DEV:-$(basename "$(findmnt -no SOURCE /)")}   # the root filesystem's device, or DEV
while :; do
  t=$(date -u +%H:%M:%S.%3N)
  d=$(awk '/^Dirty:/{d=$2} /^Writeback:/{w=$2} END{print d, w}' /proc/meminfo)
  s=$(awk -v dev="$dev" '$3==dev{print $10, $11, $12}' /proc/diskstats)
  echo "$t $d $s"
  sleep 0.05
done
