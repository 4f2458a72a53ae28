//! Step 1 of `herald-bench webhooks`: what one endpoint subscribed costs in-app dispatch, saturated
//! (rounds bracketed by two rows with no endpoint) and at a steady rate (see `webhooks.rs`).

use std::time::Duration;

use herald_tests::Backend;

use super::{Api, Options, Receiver, in_app, in_app_body, nothing};
use crate::{costs, load};

/// The case (0 none, 1 delivering, 2 down) of row `row` of the saturated table: each round is
/// bracketed by two rows with no endpoint, the other two cases between them in an order that
/// alternates (0 1 2 0, then 0 2 1 0). Each case is compared with the mean of its round's two
/// none rows, which takes out the drift of a database that grows by each row (none's rows fell
/// 18 % over a run of 15 rows on SQLite), and the two none rows' own difference is the noise it
/// is compared with.
fn bracketed_case(row: usize) -> usize {
    match (row % 4, (row / 4).is_multiple_of(2)) {
        (0 | 3, _) => 0,
        (1, true) | (2, false) => 1,
        _ => 2,
    }
}

/// The case (0 none, 1 delivering, 2 down) of row `row`: the rounds run the three in turn, in
/// an order that alternates (0 1 2, then 2 1 0), so that none goes first as often as last.
fn case(row: usize) -> usize {
    if (row / 3).is_multiple_of(2) { row % 3 } else { 2 - row % 3 }
}

/// The dispatch-cost rows' three cases (`case`): no endpoint, one that takes every event (the
/// receiver's `name`), one that is down (`dead-name`). Subscribes the case's endpoint:
/// the row's label, and the endpoint's id and receiver name. The one that is down has been down
/// a while when the row starts, as a dead endpoint is: it is sent a few events first, and the
/// row waits until it failed five (the dispatcher then probes it, and pauses it in the store),
/// and a moment more. (Subscribed as the row began, it was never tried while the dispatches ran:
/// a saturated writer holds the deliveries back.)
async fn subscribe(
    table: &Table<'_>,
    case: usize,
    name: &str,
) -> anyhow::Result<(&'static str, Option<(String, String)>)> {
    let Table { api, receiver, hook, o, .. } = *table;
    let (label, name) = match case {
        0 => ("none", None),
        1 if o.other_events => ("one, wanting other events (otp.verified)", Some(name.to_owned())),
        1 => ("one, delivering meanwhile", Some(name.to_owned())),
        _ if o.down_control => {
            ("none, after one tripped and removed (control)", Some(format!("dead-{name}")))
        }
        _ => ("one, down (503)", Some(format!("dead-{name}"))),
    };
    let Some(name) = name else { return Ok((label, None)) };
    let wanted = if case == 1 && o.other_events { "otp.verified" } else { "notification.delivered" };
    let id = api.add_endpoint_for(&hook(&name), wanted).await?;
    if case == 2 {
        load::run(&api.url, Some(&api.key), 20, 4, in_app(), nothing()).await;
        anyhow::ensure!(receiver.wait_for(&name, 5, Duration::from_secs(30)).await, "{name} was never tried");
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        if o.down_control {
            // The row then runs with no endpoint, in the down case's place and after its
            // preparation: what those cost, apart from the endpoint.
            api.remove_endpoint(&id).await?;
            receiver.take(&name);
            return Ok((label, None));
        }
    }
    Ok((label, Some((id, name))))
}

/// 1b. The same three cases at a steady `--rate` for `--seconds`, `--rounds` times in turn: how
/// long the API takes to answer a dispatch when the machine is not saturated (what an
/// integrator's request sees), against no endpoint. At saturation (above) the deliveries' claims
/// and records queue for the writer with the dispatches; here the writer keeps up, so this says
/// whether subscribing an endpoint slows the dispatch path itself.
async fn steady_dispatch(table: &Table<'_>) -> anyhow::Result<()> {
    let Table { api, receiver, o, engine, pid, .. } = *table;
    println!(
        "\n{engine}: in-app dispatch at a steady {} a second for {} s: the API's answer times\n",
        o.rate, o.seconds
    );
    println!(
        "| endpoint subscribed | accepted | p50 ms | p99 ms | max ms | writer commits per dispatch | KiB written per dispatch | daemon CPU ms per 1,000 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let total = o.rate * o.seconds as usize;
    let mut p99s: [Vec<f64>; 3] = Default::default();
    for round in 0..3 * o.rounds.max(1) {
        let (label, endpoint) = subscribe(table, case(round), "steady").await?;
        let before = costs::sample(&api.http, &api.url, pid).await?;
        let paced =
            load::paced(&api.url, &api.key, "/api/v1/notifications", o.rate, total, in_app_body, |_| {})
                .await;
        if case(round) == 1 && !o.other_events {
            receiver.wait_for("steady", paced.accepted, Duration::from_secs(120)).await;
        }
        let cost = before.until(&costs::sample(&api.http, &api.url, pid).await?, paced.accepted);
        let ms = |p: f64| load::percentile(&paced.answered, p).as_secs_f64() * 1000.0;
        p99s[case(round)].push(ms(99.0));
        println!(
            "| {label} | {} | {:.2} | {:.2} | {:.2} (at {:.1} s) | {:.2} | {:.1} | {:.0} |",
            paced.accepted,
            ms(50.0),
            ms(99.0),
            ms(100.0),
            paced.slowest.0.as_secs_f64(),
            cost.batches_per_unit,
            cost.daemon_kib_written_per_unit,
            cost.daemon_cpu_ms_per_unit * 1000.0
        );
        if let Some((id, name)) = endpoint {
            api.remove_endpoint(&id).await?;
            receiver.take(&name);
        }
    }
    println!(
        "\n{engine}: p99 answer time at {}/s, medians of {} rounds: {}",
        o.rate,
        o.rounds.max(1),
        against_none(medians(p99s), " ms", 2)
    );
    Ok(())
}

/// The median of each case's rows.
fn medians(rows: [Vec<f64>; 3]) -> [f64; 3] {
    rows.map(|mut r| {
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    })
}

/// "none …; one delivering … (±n %); one down … (±n %)", each against none.
fn against_none(m: [f64; 3], unit: &str, decimals: usize) -> String {
    let against = |x: f64| (x / m[0].max(f64::MIN_POSITIVE) - 1.0) * 100.0;
    format!(
        "none {:.*}{unit}; one delivering {:.*}{unit} ({:+.0} %); one down {:.*}{unit} ({:+.0} %)",
        decimals,
        m[0],
        decimals,
        m[1],
        against(m[1]),
        decimals,
        m[2],
        against(m[2])
    )
}

/// Each case against the mean of its round's two none rows, per round and the median over the
/// rounds, and none's own noise: how far a round's two none rows are from their mean.
fn bracketed(engine: &str, rounds: &[[Vec<f64>; 3]]) -> String {
    let percent = |x: f64, mean: f64| (x / mean.max(f64::MIN_POSITIVE) - 1.0) * 100.0;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
    };
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:+.0}")).collect::<Vec<_>>().join(", ");
    let mut against: [Vec<f64>; 3] = Default::default();
    for round in rounds {
        let [none, delivering, down] = round;
        let mean = none.iter().sum::<f64>() / none.len().max(1) as f64;
        if let [first, _] = none[..] {
            against[0].push(percent(first, mean).abs());
        }
        for (case, rates) in [(1, delivering), (2, down)] {
            against[case].extend(rates.iter().map(|&rate| percent(rate, mean)));
        }
    }
    format!(
        "{engine}: against the mean of each round's two none rows, medians of {} rounds: one delivering {:+.0} % ({} %), one down {:+.0} % ({} %); none's two rows lie ±{:.0} % from their mean (median; {} %)",
        rounds.len(),
        median(against[1].clone()),
        list(&against[1]),
        median(against[2].clone()),
        list(&against[2]),
        median(against[0].clone()),
        against[0].iter().map(|x| format!("±{x:.0}")).collect::<Vec<_>>().join(", ")
    )
}

/// What the dispatch-cost table's rows run against.
#[derive(Clone, Copy)]
pub(super) struct Table<'a> {
    pub(super) api: &'a Api,
    pub(super) receiver: &'a Receiver,
    pub(super) o: &'a Options,
    pub(super) engine: &'a str,
    pub(super) hook: &'a dyn Fn(&str) -> String,
    pub(super) pid: Option<u32>,
    /// PostgreSQL's URL (the bench's database), to read how much WAL each row wrote.
    pub(super) postgres: Option<&'a str>,
}

/// Where PostgreSQL's WAL ends now, in bytes (`None` on SQLite). The WAL a row wrote, per
/// dispatch, is the work its transactions gave the server, counted exactly: the rows' rates move
/// ±5 % between runs of one build on this machine, and this does not (docs/PERFORMANCE.md,
/// twenty-first session).
async fn wal_position(postgres: Option<&str>) -> Option<i64> {
    let at = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint";
    Some(Backend::Postgres.count(postgres?, at).await)
}

/// 1. The dispatch-cost table, saturated, then at a steady rate (1b).
pub(super) async fn dispatch_costs(table: &Table<'_>) -> anyhow::Result<()> {
    let Table { api, receiver, o, engine, pid, postgres, .. } = *table;
    let nothing = nothing();
    // 1. In-app dispatch with no endpoint, with one subscribed that takes every event as it
    //    comes, and with one subscribed that is down (the outbox's writes without the sends),
    //    in turn.
    println!("\n{engine}: in-app dispatch, {} requests per row, concurrency 64\n", o.requests);
    println!(
        "| endpoint subscribed | accepted/s | p50 ms | p99 ms | errors | delivered while dispatching | writer commits per 1,000 | KiB written per dispatch | daemon CPU ms per 1,000 | PostgreSQL CPU ms per 1,000 | PostgreSQL WAL KiB per dispatch |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut cpu: [Vec<f64>; 3] = Default::default();
    let mut wal: [Vec<f64>; 3] = Default::default();
    // Each round's rates by case (none's two in order), for the bracketed comparison.
    let mut rounds: Vec<[Vec<f64>; 3]> = Vec::new();
    for row in 0..4 * o.rounds.max(1) {
        let case = bracketed_case(row);
        if row % 4 == 0 {
            rounds.push(Default::default());
        }
        let (label, endpoint) = subscribe(table, case, "dispatch").await?;
        // PostgreSQL: every row starts with the webhook tables vacuumed and just after a
        // checkpoint. The row before may have left tens of thousands of dead rows (its endpoint's
        // messages and attempts, deleted with it; batches expanded) for autovacuum to clean
        // while this row runs. And a row writes some 75 MB of WAL, so the server's own
        // checkpoints came every 25 s or so here, and the row just after one paid for the
        // full-page images of every page it first touched: rows of one case moved by ±10 %
        // between rounds. Now each pays them alike, and none in its middle.
        if let Some(url) = postgres {
            let vacuum =
                "VACUUM (ANALYZE) webhook_messages, webhook_attempts, webhook_events, webhook_event_batches";
            Backend::Postgres.execute(url, &[vacuum.to_owned(), "CHECKPOINT".to_owned()]).await;
        }
        let before = costs::sample(&api.http, &api.url, pid).await?;
        let wal_before = wal_position(postgres).await;
        let report = load::run(&api.url, Some(&api.key), o.requests, 64, in_app(), nothing.clone()).await;
        // How many of the deliveries shared the dispatches' time (the rest came after).
        let meanwhile = match &endpoint {
            Some((id, name)) if case == 1 => {
                // PostgreSQL: and how many of its messages were made by then (the fan-out's
                // share of the burst).
                let made = match postgres {
                    Some(url) => {
                        let sql = format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{id}'");
                        format!(" (of {} made)", Backend::Postgres.count(url, &sql).await)
                    }
                    None => String::new(),
                };
                format!("{}{made}", receiver.count(name))
            }
            _ => "–".to_owned(),
        };
        if case == 1 && !o.other_events {
            // The CPU of the deliveries too: what a dispatch costs in all.
            receiver.wait_for("dispatch", report.ok, Duration::from_secs(120)).await;
        }
        let cost = before.until(&costs::sample(&api.http, &api.url, pid).await?, report.ok);
        let wal_kib = match (wal_before, wal_position(postgres).await) {
            (Some(a), Some(b)) => (b - a) as f64 / 1024.0 / report.ok.max(1) as f64,
            _ => f64::NAN,
        };
        rates[case].push(report.per_second());
        cpu[case].push(cost.daemon_cpu_ms_per_unit * 1000.0);
        wal[case].push(wal_kib);
        let wal_cell = if postgres.is_some() { format!("{wal_kib:.2}") } else { "–".to_owned() };
        if let Some(round) = rounds.last_mut() {
            round[case].push(report.per_second());
        }
        println!(
            "| {label} | {:.0} | {:.2} | {:.2} | {} | {meanwhile} | {:.0} | {:.1} | {:.0} | {:.0} | {wal_cell} |",
            report.per_second(),
            report.percentile(50.0).as_secs_f64() * 1000.0,
            report.percentile(99.0).as_secs_f64() * 1000.0,
            report.errors,
            cost.batches_per_unit * 1000.0,
            cost.daemon_kib_written_per_unit,
            cost.daemon_cpu_ms_per_unit * 1000.0,
            cost.postgres_cpu_ms_per_unit * 1000.0
        );
        if let Some((id, name)) = endpoint {
            api.remove_endpoint(&id).await?;
            receiver.take(&name);
        }
    }
    if o.down_control {
        println!("\n{engine}: --down-control: \"one down\" below is the down slot run with no endpoint");
    }
    if o.other_events {
        println!(
            "\n{engine}: --other-events: \"one delivering\" below is an endpoint subscribed to otp.verified alone"
        );
    }
    println!("\n{}", bracketed(engine, &rounds));
    println!("\n{engine}: medians of {} rounds: {}", o.rounds.max(1), against_none(medians(rates), "/s", 0));
    let cpu = medians(cpu);
    println!(
        "{engine}: the daemon's CPU per 1,000 dispatches (medians): none {:.0} ms; one delivering {:.0} ms ({:+.0} %, its deliveries included); one down {:.0} ms ({:+.0} %)",
        cpu[0],
        cpu[1],
        (cpu[1] / cpu[0].max(1.0) - 1.0) * 100.0,
        cpu[2],
        (cpu[2] / cpu[0].max(1.0) - 1.0) * 100.0
    );
    if postgres.is_some() {
        println!(
            "{engine}: the server's WAL per dispatch (medians; the delivering row's includes its deliveries): {}",
            against_none(medians(wal), " KiB", 2)
        );
    }
    if o.seconds == 0 {
        return Ok(());
    }
    steady_dispatch(table).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturated_rounds_are_bracketed_by_none_and_alternate_the_cases_between() {
        let rows: Vec<usize> = (0..8).map(bracketed_case).collect();
        assert_eq!(rows, [0, 1, 2, 0, 0, 2, 1, 0]);
    }

    #[test]
    fn each_case_is_compared_with_its_rounds_none_rows() {
        // Drift: the second round is slower by a tenth, none's rows 1 % either side of its mean.
        let rounds =
            [[vec![101.0, 99.0], vec![95.0], vec![100.0]], [vec![90.9, 89.1], vec![85.5], vec![90.0]]];
        let line = bracketed("SQLite", &rounds);
        assert!(line.contains("one delivering -5 % (-5, -5 %)"), "{line}");
        assert!(line.contains("one down +0 % (+0, +0 %)"), "{line}");
        assert!(line.contains("±1 % from their mean"), "{line}");
    }

    #[test]
    fn rounds_alternate_the_order_of_the_cases() {
        let rows: Vec<usize> = (0..12).map(case).collect();
        assert_eq!(rows, [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]);
        // Over two rounds each case is run as often early as late.
        for c in 0..3 {
            let positions: usize = (0..6).filter(|&row| case(row) == c).map(|row| row % 3).sum();
            assert_eq!(positions, 2);
        }
    }
}
