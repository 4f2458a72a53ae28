//! Counting the feed without walking it. Triggers keep exact counts of each tenant's items by
//! day and by hour of creation, application, kind, channel and stored status
//! (`activity_counts_daily`, `activity_counts`; on PostgreSQL plus the changes not folded yet,
//! `activity_count_deltas`). A filter's count is then a sum over a few thousand counters rather
//! than a count over up to millions of rows, and a deep page finds its start by walking days,
//! then the hours of one day, instead of skipping rows.
//!
//! The counters are exact where a count cannot change with time alone:
//! - a notification's shown status is its stored status, so its counters serve every whole hour;
//! - an OTP's shown status depends on the time (a `sent` code becomes `expired`), so its counters
//!   serve only hours in which every code has run out (a code lives at most
//!   `OTP_MAX_TTL_SECONDS`), where a stored `sent` always shows as `expired`;
//! - partial hours at the ends of a `from`/`to` range, and OTP codes of the last minutes, are
//!   counted from the rows (a few thousand at most).

use std::collections::BTreeMap;

use herald_common::api::activity::ActivityStatus;

use super::{ActivityFilter, Arg, Sql, conditions};
use crate::store::{Conn, Engine, OTP_MAX_TTL_SECONDS, StoreResult};

/// The width of an hourly counter, in milliseconds.
pub(super) const HOUR: i64 = 3_600_000;
/// Hours in a daily counter.
const HOURS_PER_DAY: i64 = 24;
const DAY: i64 = HOURS_PER_DAY * HOUR;

/// A span of creation time `[start, end)` and how many items of the filter it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Bucket {
    pub start: i64,
    pub end: i64,
    pub n: i64,
}

impl Bucket {
    fn is_day(&self) -> bool {
        self.end - self.start == DAY
    }
}

/// `[from, to)` in whole units, or empty.
type Range = (i64, i64);

/// Which source counts which part of `[lo, hi)`: whole days and whole hours from the
/// counters, the rest from the rows. Days are shared by both kinds (they lie where OTP counters
/// are settled); the hours outside them differ, as OTP counters stop where codes may still run.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    days: Range,
    notification_hours: Vec<Range>,
    otp_hours: Vec<Range>,
    notification_rows: Vec<Range>,
    otp_rows: Vec<Range>,
}

fn nonempty(ranges: impl IntoIterator<Item = Range>) -> Vec<Range> {
    ranges.into_iter().filter(|(a, b)| a < b).collect()
}

/// The plan for `[lo, hi)` (milliseconds) when OTP hours before `settled` (an hour number) are
/// final.
fn plan(lo: i64, hi: i64, settled: i64) -> Plan {
    let first_hour = lo.div_euclid(HOUR) + i64::from(lo.rem_euclid(HOUR) != 0);
    let end_hour = hi.div_euclid(HOUR).max(first_hour);
    let otp_end_hour = settled.clamp(first_hour, end_hour);
    let first_day =
        first_hour.div_euclid(HOURS_PER_DAY) + i64::from(first_hour.rem_euclid(HOURS_PER_DAY) != 0);
    let end_day = otp_end_hour.div_euclid(HOURS_PER_DAY).max(first_day);
    let (day_start, day_end) = (first_day * HOURS_PER_DAY, end_day * HOURS_PER_DAY);
    let hours = |end: i64| {
        if first_day < end_day {
            nonempty([(first_hour, day_start), (day_end, end)])
        } else {
            nonempty([(first_hour, end)])
        }
    };
    // Rows: the partial hours at both ends, and for OTP the hours that are not settled.
    let rows = |end: i64| {
        if first_hour < end {
            nonempty([(lo, (first_hour * HOUR).min(hi)), ((end * HOUR).max(lo), hi)])
        } else {
            nonempty([(lo, hi)])
        }
    };
    Plan {
        days: (first_day, end_day),
        notification_hours: hours(end_hour),
        otp_hours: hours(otp_end_hour),
        notification_rows: rows(end_hour),
        otp_rows: rows(otp_end_hour),
    }
}

/// The counters' conditions for the filter's application, channel and status. In settled time an
/// OTP that was sent shows as expired, so a status filter means other stored statuses there.
fn counter_filters(filter: &ActivityFilter, sql: &mut Sql) -> (String, String, String) {
    let mut scope = format!("tenant_id = {}", sql.text(&filter.tenant_id));
    if let Some(application) = &filter.application_id {
        scope.push_str(&format!(" AND application_id = {}", sql.text(application)));
    }
    if let Some(channel) = &filter.channel {
        scope.push_str(&format!(" AND channel = {}", sql.text(channel)));
    }
    let (notification, otp) = match filter.status {
        None => (String::new(), String::new()),
        Some(status) => {
            let p = sql.text(status);
            let otp = match status {
                ActivityStatus::Expired => " AND status IN ('sent', 'sending', 'expired')".to_owned(),
                ActivityStatus::Verified | ActivityStatus::Tombstoned | ActivityStatus::Failed => {
                    format!(" AND status = {p}")
                }
                _ => " AND 1 = 0".to_owned(),
            };
            (format!(" AND status = {p}"), otp)
        }
    };
    (scope, notification, otp)
}

/// `unit IN [a, b) OR …` over ranges, with numbered parameters.
fn in_ranges(unit: &str, ranges: &[Range], sql: &mut Sql) -> String {
    if ranges.is_empty() {
        return "1 = 0".to_owned();
    }
    let terms: Vec<String> = ranges
        .iter()
        .map(|(a, b)| format!("({unit} >= {} AND {unit} < {})", sql.int(*a), sql.int(*b)))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// Sums counters per `unit` (`hour` or `day`) where each kind's unit lies in its ranges.
async fn sum_counters(
    conn: &mut Conn<'_>,
    filter: &ActivityFilter,
    daily: bool,
    notification_ranges: &[Range],
    otp_ranges: &[Range],
) -> StoreResult<Vec<(i64, i64)>> {
    if notification_ranges.is_empty() && otp_ranges.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::default();
    let (scope, n_status, o_status) = counter_filters(filter, &mut sql);
    let all: Vec<Range> = notification_ranges.iter().chain(otp_ranges).copied().collect();
    let (low, high) =
        (all.iter().map(|r| r.0).min().unwrap_or(0), all.iter().map(|r| r.1).max().unwrap_or(0));
    let (unit, table, delta_unit, per) = if daily {
        ("day", "activity_counts_daily", "hour / 24", HOURS_PER_DAY)
    } else {
        ("hour", "activity_counts", "hour", 1)
    };
    let (low_p, high_p) = (sql.int(low), sql.int(high));
    let (delta_low, delta_high) = (sql.int(low * per), sql.int(high * per));
    let counters = format!(
        "SELECT {unit} AS unit, kind, status, n FROM {table} WHERE {scope} AND {unit} >= {low_p} AND {unit} < {high_p}"
    );
    // PostgreSQL's counters have changes beside them that are not folded in yet; SQLite's never.
    let source = match conn.engine() {
        Engine::Sqlite => counters,
        Engine::Postgres => format!(
            "{counters} UNION ALL SELECT {delta_unit} AS unit, kind, status, n FROM activity_count_deltas
             WHERE {scope} AND hour >= {delta_low} AND hour < {delta_high}"
        ),
    };
    let n_in = in_ranges("unit", notification_ranges, &mut sql);
    let o_in = in_ranges("unit", otp_ranges, &mut sql);
    let text = format!(
        "SELECT unit, CAST(SUM(n) AS BIGINT) FROM ({source}) c
         WHERE (kind = 'n' AND {n_in}{n_status}) OR (kind = 'o' AND {o_in}{o_status})
         GROUP BY unit"
    );
    Ok(dynamic!(&mut *conn, fetch_all, query_as::<(i64, i64)>, text, sql.args)?)
}

/// Counts rows per hour in each table's time ranges (milliseconds).
async fn count_rows(
    conn: &mut Conn<'_>,
    filter: &ActivityFilter,
    now: i64,
    notification_ranges: &[Range],
    otp_ranges: &[Range],
) -> StoreResult<Vec<(i64, i64)>> {
    let mut sql = Sql::default();
    let now_p = sql.int(now);
    let (n_where, o_where) = conditions(filter, &mut sql, &now_p);
    let mut parts = Vec::new();
    for (table, alias, cond, ranges) in [
        ("notifications", "n", &n_where, notification_ranges),
        ("otp_transactions", "o", &o_where, otp_ranges),
    ] {
        for (a, b) in ranges {
            let (a, b) = (sql.int(*a), sql.int(*b));
            parts.push(format!(
                "SELECT {alias}.created_at / {HOUR} AS hour, COUNT(*) AS n FROM {table} {alias}
                 WHERE {cond} AND {alias}.created_at >= {a} AND {alias}.created_at < {b}
                 GROUP BY {alias}.created_at / {HOUR}"
            ));
        }
    }
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let text = format!("SELECT hour, CAST(n AS BIGINT) FROM ({}) counted", parts.join(" UNION ALL "));
    Ok(dynamic!(&mut *conn, fetch_all, query_as::<(i64, i64)>, text, sql.args)?)
}

/// The hour at and after which OTP counters may still change with time alone.
fn settled_hour(now: i64) -> i64 {
    (now - i64::from(OTP_MAX_TTL_SECONDS) * 1000).div_euclid(HOUR)
}

/// The filter's items per day and per hour (whichever is coarsest that is exact), newest first;
/// buckets without items are left out.
pub(super) async fn buckets(
    conn: &mut Conn<'_>,
    filter: &ActivityFilter,
    now: i64,
) -> StoreResult<Vec<Bucket>> {
    let lo = filter.from.unwrap_or(0).max(0);
    let hi = filter.to.unwrap_or(i64::MAX);
    if lo >= hi {
        return Ok(Vec::new());
    }
    let plan = plan(lo, hi, settled_hour(now));
    let mut hours: BTreeMap<i64, i64> = BTreeMap::new();
    for (hour, n) in sum_counters(conn, filter, false, &plan.notification_hours, &plan.otp_hours).await? {
        *hours.entry(hour).or_default() += n;
    }
    for (hour, n) in count_rows(conn, filter, now, &plan.notification_rows, &plan.otp_rows).await? {
        *hours.entry(hour).or_default() += n;
    }
    let days = if plan.days.0 < plan.days.1 {
        sum_counters(conn, filter, true, &[plan.days], &[plan.days]).await?
    } else {
        Vec::new()
    };
    let mut buckets: Vec<Bucket> = hours
        .into_iter()
        .map(|(h, n)| Bucket { start: h * HOUR, end: (h + 1) * HOUR, n })
        .chain(days.into_iter().map(|(d, n)| Bucket { start: d * DAY, end: (d + 1) * DAY, n }))
        .filter(|b| b.n > 0)
        .collect();
    buckets.sort_by_key(|b| std::cmp::Reverse(b.start));
    Ok(buckets)
}

/// The hours of one settled day bucket, newest first (for a page that starts inside it).
async fn hours_of(conn: &mut Conn<'_>, filter: &ActivityFilter, day: Bucket) -> StoreResult<Vec<Bucket>> {
    let hours = [(day.start / HOUR, day.end / HOUR)];
    let mut found: Vec<Bucket> = sum_counters(conn, filter, false, &hours, &hours)
        .await?
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(h, n)| Bucket { start: h * HOUR, end: (h + 1) * HOUR, n })
        .collect();
    found.sort_by_key(|b| std::cmp::Reverse(b.start));
    Ok(found)
}

/// Where the page at `offset` starts: the index of the bucket holding its first item, and how
/// many of that bucket's items come before it.
fn start_of(buckets: &[Bucket], offset: i64) -> Option<(usize, i64)> {
    let mut before = 0;
    for (i, bucket) in buckets.iter().enumerate() {
        if before + bucket.n > offset {
            return Some((i, offset - before));
        }
        before += bucket.n;
    }
    None
}

/// The span of creation time `[lower, upper)` that holds the page at `offset` of `limit` items,
/// and how many of the span's newest items to skip. Narrowed to an hour where it starts, so the
/// rows skipped are fewer than one hour's.
pub(super) async fn page_span(
    conn: &mut Conn<'_>,
    filter: &ActivityFilter,
    mut buckets: Vec<Bucket>,
    offset: i64,
    limit: i64,
) -> StoreResult<Option<(i64, i64, i64)>> {
    let Some((mut index, mut skip)) = start_of(&buckets, offset) else {
        return Ok(None);
    };
    if buckets[index].is_day() {
        // A day's hours add up to the day (the same triggers keep both, read in one snapshot).
        let hours = hours_of(conn, filter, buckets[index]).await?;
        let Some((inner, inner_skip)) = start_of(&hours, skip) else {
            return Ok(None);
        };
        buckets.splice(index..=index, hours);
        index += inner;
        skip = inner_skip;
    }
    let mut gathered = -skip;
    let last = buckets[index..]
        .iter()
        .position(|b| {
            gathered += b.n;
            gathered >= limit
        })
        .map_or(buckets.len() - 1, |i| index + i);
    Ok(Some((buckets[last].start, buckets[index].end, skip)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_covers_the_range_once_with_the_coarsest_exact_source() {
        let h = HOUR;
        // Thirty days and a bit, the last hours not settled for OTP.
        let (lo, hi, settled) = (10 * DAY + 30 * 60_000, 41 * DAY + 5 * h + 17, 41 * 24 + 3);
        let p = plan(lo, hi, settled);
        assert_eq!(p.days, (11, 41));
        assert_eq!(p.notification_hours, vec![(10 * 24 + 1, 11 * 24), (41 * 24, 41 * 24 + 5)]);
        assert_eq!(p.otp_hours, vec![(10 * 24 + 1, 11 * 24), (41 * 24, 41 * 24 + 3)]);
        assert_eq!(p.notification_rows, vec![(lo, (10 * 24 + 1) * h), ((41 * 24 + 5) * h, hi)]);
        assert_eq!(p.otp_rows, vec![(lo, (10 * 24 + 1) * h), ((41 * 24 + 3) * h, hi)]);

        // Inside one hour: rows only.
        let p = plan(5 * h + 10, 5 * h + 20, 1_000);
        assert_eq!((p.days.0 < p.days.1, p.notification_hours.len()), (false, 0));
        assert_eq!(p.notification_rows, vec![(5 * h + 10, 5 * h + 20)]);
        // No range: everything up to now; codes of the last hours from the rows.
        let p = plan(0, i64::MAX, 100 * 24 + 7);
        assert_eq!(p.days, (0, 100));
        assert_eq!(p.otp_hours, vec![(100 * 24, 100 * 24 + 7)]);
        assert_eq!(p.otp_rows, vec![((100 * 24 + 7) * h, i64::MAX)]);
    }

    #[test]
    fn pages_start_in_the_bucket_holding_their_first_item() {
        let b = |n| Bucket { start: 0, end: HOUR, n };
        let buckets = [b(3), b(5), b(2)];
        assert_eq!(start_of(&buckets, 0), Some((0, 0)));
        assert_eq!(start_of(&buckets, 2), Some((0, 2)));
        assert_eq!(start_of(&buckets, 3), Some((1, 0)));
        assert_eq!(start_of(&buckets, 9), Some((2, 1)));
        assert_eq!(start_of(&buckets, 10), None);
    }
}
