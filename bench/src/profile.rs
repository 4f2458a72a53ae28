//! `--perf DIR`: a measured phase runs under `perf record -a -g` (the whole machine: the load
//! generator, the daemon and the database server share its two cores), and the bench prints
//! where the CPU went, by thread name. The recording stays in `DIR/<phase>.data` for
//! `perf report -i DIR/<phase>.data` (by symbol, with call graphs).
//!
//! Thread names tell the parts apart: `bench-load` is this harness (load generator and SMTP
//! sink), `tokio-runtime-w` the daemon's runtime, `herald-sqlite-w` its SQLite writer,
//! `postgres` the database server's processes, `swapper` idle.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, bail};

/// A `perf record` running for one phase.
pub struct Recording {
    child: tokio::process::Child,
    data: PathBuf,
    phase: String,
}

/// Starts recording `phase` if `dir` is set.
pub async fn start(dir: Option<&Path>, phase: &str) -> anyhow::Result<Option<Recording>> {
    let Some(dir) = dir else { return Ok(None) };
    std::fs::create_dir_all(dir)?;
    let data = dir.join(format!("{phase}.data"));
    let child = tokio::process::Command::new("perf")
        .args(["record", "-a", "-g", "-F", "499", "-o"])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("perf record (install linux-perf)")?;
    // perf needs a moment to open its events on every CPU before the phase starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(Some(Recording { child, data, phase: phase.to_owned() }))
}

impl Recording {
    /// Stops the recording and prints the phase's CPU by thread name.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let Some(pid) = self.child.id() else { bail!("perf record ended early") };
        let status = tokio::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().await?;
        if !status.success() {
            bail!("could not stop perf record");
        }
        self.child.wait().await?;
        let report = tokio::process::Command::new("perf")
            .args(["report", "--stdio", "--sort", "comm", "-g", "none", "--percent-limit", "1", "-i"])
            .arg(&self.data)
            .output()
            .await?;
        let text = String::from_utf8_lossy(&report.stdout);
        let shares: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                Some(format!("{} {}", parts.next_back()?, parts.next()?))
            })
            .collect();
        println!("perf, {} phase ({}): {}", self.phase, self.data.display(), shares.join(", "));
        Ok(())
    }
}

/// Stops `recording` if there is one.
pub async fn stop(recording: Option<Recording>) -> anyhow::Result<()> {
    match recording {
        Some(r) => r.stop().await,
        None => Ok(()),
    }
}
