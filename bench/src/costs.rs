//! What one dispatch costs, beside how fast it goes: the daemon's calls into the database (one
//! round trip each on PostgreSQL), the mean size of its write batches, and the CPU the daemon
//! and the PostgreSQL server processes spent (from `/proc`, on this machine); and PostgreSQL's
//! own floor for single-row inserts (`pgbench`), measured in the same run.

use std::{collections::HashMap, path::Path, time::Duration};

use anyhow::{Context, bail};

/// Counters read at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    calls: f64,
    batches: f64,
    operations: f64,
    daemon_cpu: Duration,
    /// Bytes the daemon had written to storage (`/proc/PID/io` `write_bytes`: its WAL, its
    /// checkpoints; 0 where it cannot be read).
    daemon_written: u64,
    /// Per process: PostgreSQL's backends and workers come and go (autovacuum, `pgbench`'s
    /// clients), so a sum over those alive at each moment may even fall between two samples.
    postgres_cpu: HashMap<u32, Duration>,
}

/// What happened between two samples, per unit of work.
pub struct Cost {
    pub calls_per_unit: f64,
    /// The writer's batches (transactions, each a commit) per unit.
    pub batches_per_unit: f64,
    pub operations_per_batch: f64,
    pub daemon_cpu_ms_per_unit: f64,
    pub postgres_cpu_ms_per_unit: f64,
    /// KiB the daemon wrote to storage per unit.
    pub daemon_kib_written_per_unit: f64,
}

/// Reads the daemon's `/metrics` and the CPU time of the daemon (`pid`) and of every process
/// named `postgres`.
pub async fn sample(http: &reqwest::Client, url: &str, pid: Option<u32>) -> anyhow::Result<Sample> {
    let text = http.get(format!("{url}/metrics")).send().await?.error_for_status()?.text().await?;
    let metric = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let tick = clock_tick();
    let daemon_cpu = pid.and_then(|pid| cpu_of(&format!("/proc/{pid}/stat"), tick)).unwrap_or_default();
    let daemon_written = pid.and_then(|pid| written_by(&format!("/proc/{pid}/io"))).unwrap_or_default();
    let mut postgres_cpu = HashMap::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        let stat = entry.path().join("stat");
        if std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|comm| comm.trim() == "postgres") {
            postgres_cpu.insert(pid, cpu_of(&stat.display().to_string(), tick).unwrap_or_default());
        }
    }
    Ok(Sample {
        calls: metric("herald_store_calls_total"),
        batches: metric("herald_store_write_batches_total"),
        operations: metric("herald_store_write_operations_total"),
        daemon_cpu,
        daemon_written,
        postgres_cpu,
    })
}

impl Sample {
    /// The cost of `units` of work done between `self` and `later`.
    pub fn until(&self, later: &Sample, units: usize) -> Cost {
        let units = units.max(1) as f64;
        let per_unit = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64() * 1000.0 / units;
        Cost {
            calls_per_unit: (later.calls - self.calls) / units,
            batches_per_unit: (later.batches - self.batches) / units,
            operations_per_batch: (later.operations - self.operations)
                / (later.batches - self.batches).max(1.0),
            daemon_cpu_ms_per_unit: per_unit(self.daemon_cpu, later.daemon_cpu),
            daemon_kib_written_per_unit: later.daemon_written.saturating_sub(self.daemon_written) as f64
                / 1024.0
                / units,
            // What each process alive at the later sample spent since the earlier one (all of
            // it if it started since); a process that ended between the two is not counted.
            postgres_cpu_ms_per_unit: later
                .postgres_cpu
                .iter()
                .map(|(pid, cpu)| per_unit(self.postgres_cpu.get(pid).copied().unwrap_or_default(), *cpu))
                .sum(),
        }
    }
}

/// User plus system time of one process from its `/proc/PID/stat` (fields 14 and 15, after the
/// parenthesised name, which may hold spaces).
fn cpu_of(path: &str, tick: f64) -> Option<Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(Duration::from_secs_f64(ticks / tick))
}

/// `write_bytes` of one process's `/proc/PID/io`.
fn written_by(path: &str) -> Option<u64> {
    let io = std::fs::read_to_string(path).ok()?;
    io.lines().find_map(|line| line.strip_prefix("write_bytes:")?.trim().parse().ok())
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux unless built otherwise).
fn clock_tick() -> f64 {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// PostgreSQL's floor on this machine: `pgbench` with 8 clients, each transaction one single-row
/// insert, for `seconds`, in the database (and schema) at `url`. Transactions per second.
pub async fn pgbench_single_row_inserts(url: &str, dir: &Path, seconds: u32) -> anyhow::Result<f64> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.context("connect for the pgbench table")?;
    sqlx::query("CREATE TABLE IF NOT EXISTS pgbench_floor (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    let script = dir.join("floor.sql");
    std::fs::write(&script, "INSERT INTO pgbench_floor (body) VALUES ('a single-row insert');\n")?;
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-c", "8", "-j", "2", "-T", &seconds.to_string(), "-f"])
        .arg(&script)
        .arg(url)
        .output()
        .await
        .context("run pgbench (Debian: postgresql-client)")?;
    if !out.status.success() {
        bail!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no tps in pgbench's output:\n{text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_read_past_a_name_with_spaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        std::fs::write(&path, "42 (post gres) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 1 0").unwrap();
        assert_eq!(cpu_of(&path.display().to_string(), 100.0), Some(Duration::from_secs(3)));
    }

    #[test]
    fn bytes_written_are_read_from_io() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("io");
        std::fs::write(
            &path,
            "rchar: 10\nwchar: 20\nread_bytes: 0\nwrite_bytes: 40960\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        assert_eq!(written_by(&path.display().to_string()), Some(40960));
    }
}
