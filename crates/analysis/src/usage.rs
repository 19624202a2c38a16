//! Usage: the slot time a cluster had over a range of time, what its jobs
//! used of it, and the idle rest apportioned to the jobs that ran, so that
//! every slot-second is accounted for.
//!
//! The range is cut into hours (the first and last partial). In each hour:
//! - *capacity* is each executor's slots times the time it was up in the
//!   hour (`store::cluster`);
//! - *busy* is the jobs' slot time (`format::usage`), each job's spread
//!   evenly over its run from start to end (a job's tasks are not kept in
//!   memory; over a day this is exact to the hour for any job shorter than
//!   the hour it ran in, and the totals are exact for jobs wholly inside the
//!   range);
//! - *idle* is capacity less busy; it goes to the jobs that ran in the hour
//!   in proportion to their busy time, or, when none ran, to
//!   *unattributed*; the history's own jobs (`format::origin`, the group
//!   [`HISTORY_GROUP`]) are busy but take no idle share: it goes to the
//!   users' jobs of the hour, or is unattributed;
//! - busy beyond capacity (a job whose cluster recorded nothing: upstream's
//!   scheduler, a scheduler without a cluster log, a lying log) is
//!   reported apart as *over capacity*, never as negative idle.
//!
//! So for any range: `capacity = busy - over_capacity + idle` and
//! `idle = Σ idle shares + unattributed idle`, to within the rounding of
//! each figure to a millisecond.

pub use bjh_format::origin::HISTORY_GROUP;
use bjh_store::cluster::SlotInterval;
use serde::Serialize;
use std::collections::HashMap;

const HOUR_MS: u64 = 3_600_000;
/// Groups listed at most; the rest are summed in one `(others)` group.
pub const MAX_GROUPS: usize = 1_000;

/// One job as usage sees it.
#[derive(Debug, Clone)]
pub struct UsageJob {
    /// The group it counts in (a query hash, a name, a scheduler id).
    pub key: String,
    /// Start and end (epoch millis).
    pub start: u64,
    /// End (epoch millis; the start when earlier).
    pub end: u64,
    /// Its busy slot-milliseconds.
    pub busy_slot_ms: u64,
    /// How long it waited in the queue before it started (ms).
    pub waited_ms: u64,
}

/// One hour of the range.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct HourUsage {
    /// The hour's start (epoch millis; the range's start for the first).
    pub start: u64,
    /// Slot-milliseconds up.
    pub capacity_slot_ms: u64,
    /// Slot-milliseconds busy.
    pub busy_slot_ms: u64,
    /// Slot-milliseconds idle.
    pub idle_slot_ms: u64,
    /// The most slots up at once in the hour.
    pub peak_slots: u64,
}

/// One group's part.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct GroupUsage {
    /// Its key.
    pub key: String,
    /// Jobs counted.
    pub jobs: u64,
    /// Its busy slot-milliseconds in the range.
    pub busy_slot_ms: u64,
    /// Its share of the idle slot-milliseconds.
    pub idle_share_slot_ms: u64,
    /// Busy plus idle share.
    pub total_slot_ms: u64,
    /// Its jobs' time in the queue, from queued to started, summed (ms).
    pub waited_ms: u64,
    /// What that cost, at the server's slot-hour price (`null` without
    /// one).
    pub cost: Option<f64>,
}

/// Usage over a range.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Usage {
    /// Range start (epoch millis).
    pub from: u64,
    /// Range end (epoch millis, exclusive).
    pub to: u64,
    /// Slot-milliseconds up.
    pub capacity_slot_ms: u64,
    /// Of which estimated (an executor's end not recorded).
    pub estimated_capacity_slot_ms: u64,
    /// Slot-milliseconds the jobs used.
    pub busy_slot_ms: u64,
    /// Busy beyond what the cluster log shows up.
    pub over_capacity_slot_ms: u64,
    /// Capacity not used.
    pub idle_slot_ms: u64,
    /// Idle in hours when no job ran.
    pub unattributed_idle_slot_ms: u64,
    /// Busy over capacity, 0 to 1 (`null` without capacity).
    pub utilisation: Option<f64>,
    /// The capacity's cost at the server's slot-hour price (`null`
    /// without one).
    pub cost: Option<f64>,
    /// Jobs counted.
    pub jobs: u64,
    /// Their time in the queue, from queued to started, summed (ms).
    pub waited_ms: u64,
    /// Jobs that ran in the range whose slot time is not known (their logs
    /// do not state it).
    pub jobs_without_usage: u64,
    /// By hour.
    pub hours: Vec<HourUsage>,
    /// By group, the largest total first.
    pub groups: Vec<GroupUsage>,
}

/// The overlap of `[a0, a1)` and `[b0, b1)`, in milliseconds.
fn overlap(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

/// The range's hours: the first and last cut to the range.
struct Hours {
    from: u64,
    to: u64,
    first: u64,
    n: usize,
}

impl Hours {
    fn new(from: u64, to: u64) -> Self {
        let first = from - from % HOUR_MS;
        let n = usize::try_from(to.saturating_sub(first).div_ceil(HOUR_MS)).unwrap_or(0);
        Self { from, to, first, n }
    }

    /// Hour `h`'s `[start, end)` inside the range.
    fn bounds(&self, h: usize) -> (u64, u64) {
        let start = self.first + h as u64 * HOUR_MS;
        (start.max(self.from), (start + HOUR_MS).min(self.to))
    }

    /// The hours `[a, b]` touches, as indices `first..=last`.
    fn touched(&self, a: u64, b: u64) -> std::ops::RangeInclusive<usize> {
        let at = |t: u64| {
            ((t.clamp(self.from, self.to.saturating_sub(1)) - self.first) / HOUR_MS) as usize
        };
        at(a)..=at(b).min(self.n.saturating_sub(1))
    }
}

/// Per hour: capacity, the estimated part of the whole, and the peak.
struct Capacity {
    by_hour: Vec<f64>,
    estimated: u64,
    peaks: Vec<u64>,
}

fn capacity(intervals: &[SlotInterval], hours: &Hours) -> Capacity {
    let mut by_hour = vec![0f64; hours.n];
    let mut estimated = 0u64;
    let mut edges: Vec<Vec<(u64, i64)>> = vec![Vec::new(); hours.n];
    for i in intervals
        .iter()
        .filter(|i| i.from < hours.to && i.to > hours.from)
    {
        if i.estimated {
            let ms = overlap(i.from, i.to, hours.from, hours.to);
            estimated += ms * u64::from(i.slots);
        }
        for h in hours.touched(i.from, i.to.saturating_sub(1)) {
            let (h0, h1) = hours.bounds(h);
            by_hour[h] += overlap(i.from, i.to, h0, h1) as f64 * f64::from(i.slots);
            edges[h].push((i.from.max(h0), i64::from(i.slots)));
            edges[h].push((i.to.min(h1), -i64::from(i.slots)));
        }
    }
    let peaks = edges.iter_mut().map(|e| peak(e)).collect();
    Capacity {
        by_hour,
        estimated,
        peaks,
    }
}

/// Per hour and per group: the jobs' busy time, each job's spread evenly
/// over its run.
struct Busy<'a> {
    by_hour: Vec<f64>,
    /// The busy time of the jobs that take an idle share, per hour.
    sharing_by_hour: Vec<f64>,
    keys: Vec<&'a str>,
    jobs: Vec<u64>,
    waited: Vec<u64>,
    /// `(hour, group)` → busy.
    by_key: HashMap<(usize, usize), f64>,
}

fn busy<'a>(jobs: &'a [UsageJob], hours: &Hours) -> Busy<'a> {
    let mut out = Busy {
        by_hour: vec![0f64; hours.n],
        sharing_by_hour: vec![0f64; hours.n],
        keys: Vec::new(),
        jobs: Vec::new(),
        waited: Vec::new(),
        by_key: HashMap::new(),
    };
    let mut index: HashMap<&str, usize> = HashMap::new();
    for job in jobs {
        let end = job.end.max(job.start);
        if job.start >= hours.to || end < hours.from || hours.n == 0 {
            continue;
        }
        let k = *index.entry(&job.key).or_insert_with(|| {
            out.keys.push(&job.key);
            out.jobs.push(0);
            out.waited.push(0);
            out.keys.len() - 1
        });
        out.jobs[k] += 1;
        out.waited[k] = out.waited[k].saturating_add(job.waited_ms);
        let span = end - job.start;
        for h in hours.touched(job.start, end) {
            let (h0, h1) = hours.bounds(h);
            let part = if span == 0 {
                f64::from(u8::from(job.start >= h0 && job.start < h1.max(h0 + 1)))
            } else {
                overlap(job.start, end, h0, h1) as f64 / span as f64
            };
            let ms = job.busy_slot_ms as f64 * part;
            if ms > 0.0 {
                out.by_hour[h] += ms;
                if job.key != HISTORY_GROUP {
                    out.sharing_by_hour[h] += ms;
                }
                *out.by_key.entry((h, k)).or_default() += ms;
            }
        }
    }
    out
}

fn round(x: f64) -> u64 {
    x.round().max(0.0) as u64
}

/// The groups, each with its idle share (`idle` by hour), the largest
/// total first; past [`MAX_GROUPS`] the rest in one.
fn groups(b: &Busy<'_>, idle: &[f64], price: Option<f64>) -> Vec<GroupUsage> {
    let mut busy = vec![0f64; b.keys.len()];
    let mut share = vec![0f64; b.keys.len()];
    for (&(h, k), &ms) in &b.by_key {
        busy[k] += ms;
        if b.keys[k] != HISTORY_GROUP {
            share[k] += idle[h] * ms / b.sharing_by_hour[h];
        }
    }
    let out: Vec<GroupUsage> = b
        .keys
        .iter()
        .enumerate()
        .map(|(k, key)| GroupUsage {
            key: key.to_string(),
            jobs: b.jobs[k],
            busy_slot_ms: round(busy[k]),
            idle_share_slot_ms: round(share[k]),
            total_slot_ms: round(busy[k] + share[k]),
            waited_ms: b.waited[k],
            cost: price.map(|p| cost(busy[k] + share[k], p)),
        })
        .collect();
    capped(out, price)
}

/// `groups` the largest total first; past [`MAX_GROUPS`] the rest summed
/// in one `(others)`.
fn capped(mut out: Vec<GroupUsage>, price: Option<f64>) -> Vec<GroupUsage> {
    out.sort_by(|a, b| {
        b.total_slot_ms
            .cmp(&a.total_slot_ms)
            .then(a.key.cmp(&b.key))
    });
    if out.len() > MAX_GROUPS {
        let rest = out.split_off(MAX_GROUPS - 1);
        let sum =
            |f: fn(&GroupUsage) -> u64| rest.iter().map(f).fold(0u64, |a, b| a.saturating_add(b));
        let total = sum(|g| g.total_slot_ms);
        out.push(GroupUsage {
            key: "(others)".into(),
            jobs: sum(|g| g.jobs),
            busy_slot_ms: sum(|g| g.busy_slot_ms),
            idle_share_slot_ms: sum(|g| g.idle_share_slot_ms),
            total_slot_ms: total,
            waited_ms: sum(|g| g.waited_ms),
            cost: price.map(|p| cost(total as f64, p)),
        });
    }
    out
}

/// The cost of `slot_ms` at `price` a slot-hour, to the cent's hundredth.
fn cost(slot_ms: f64, price: f64) -> f64 {
    (slot_ms / HOUR_MS as f64 * price * 10_000.0).round() / 10_000.0
}

/// Usage over `[from, to)` of the cluster `intervals` and the `jobs` (those
/// without a known slot time counted in `unknown`); with `price` a
/// slot-hour, the cost of each group and of the whole.
pub fn usage(
    intervals: &[SlotInterval],
    jobs: &[UsageJob],
    unknown: u64,
    (from, to): (u64, u64),
    price: Option<f64>,
) -> Usage {
    let hours = Hours::new(from, to.max(from));
    let cap = capacity(intervals, &hours);
    let b = busy(jobs, &hours);
    let idle: Vec<f64> = (0..hours.n)
        .map(|h| (cap.by_hour[h] - b.by_hour[h]).max(0.0))
        .collect();
    let over: f64 = (0..hours.n)
        .map(|h| (b.by_hour[h] - cap.by_hour[h]).max(0.0))
        .sum();
    let unattributed: f64 = (0..hours.n)
        .filter(|&h| b.sharing_by_hour[h] <= 0.0)
        .map(|h| idle[h])
        .sum();
    let hourly = (0..hours.n)
        .map(|h| HourUsage {
            start: hours.bounds(h).0,
            capacity_slot_ms: round(cap.by_hour[h]),
            busy_slot_ms: round(b.by_hour[h]),
            idle_slot_ms: round(idle[h]),
            peak_slots: cap.peaks[h],
        })
        .collect();
    let total_capacity: f64 = cap.by_hour.iter().sum();
    let total_busy: f64 = b.by_hour.iter().sum();
    Usage {
        from,
        to: hours.to,
        capacity_slot_ms: round(total_capacity),
        estimated_capacity_slot_ms: cap.estimated,
        busy_slot_ms: round(total_busy),
        over_capacity_slot_ms: round(over),
        idle_slot_ms: round(idle.iter().sum()),
        unattributed_idle_slot_ms: round(unattributed),
        utilisation: (total_capacity > 0.0)
            .then(|| ((total_busy - over) / total_capacity).clamp(0.0, 1.0)),
        cost: price.map(|p| cost(total_capacity + over, p)),
        jobs: b.jobs.iter().fold(0u64, |a, &n| a.saturating_add(n)),
        waited_ms: b.waited.iter().fold(0u64, |a, &n| a.saturating_add(n)),
        jobs_without_usage: unknown,
        groups: groups(&b, &idle, price),
        hours: hourly,
    }
}

/// Usages over the same range (one per executor, each over its own
/// intervals and the busy time its jobs had on it) as one: the totals and
/// hours summed (saturating: a sum is never less than a part), each a
/// group keyed `key` whose idle share is the idle time its own usage
/// attributed, past [`MAX_GROUPS`] the rest in `(others)`; the idle time
/// of hours in which nothing ran on it stays unattributed, so the books
/// still balance. `parts` is consumed one at a time, so a lazy iterator
/// holds one part's hours at once, whatever the number of executors.
pub fn combined(
    parts: impl IntoIterator<Item = (String, Usage)>,
    (from, to): (u64, u64),
    price: Option<f64>,
) -> Usage {
    let hours = Hours::new(from, to.max(from));
    let mut out = usage(&[], &[], 0, (from, to), price);
    let mut utilised = 0f64;
    for (key, u) in parts {
        let shares = u
            .groups
            .iter()
            .fold(0u64, |a, g| a.saturating_add(g.idle_share_slot_ms));
        add_totals(&mut out, &u, &mut utilised);
        out.jobs_without_usage = out.jobs_without_usage.max(u.jobs_without_usage);
        let total = u.busy_slot_ms.saturating_add(shares);
        out.groups.push(GroupUsage {
            key,
            jobs: u.jobs,
            busy_slot_ms: u.busy_slot_ms,
            idle_share_slot_ms: shares,
            total_slot_ms: total,
            waited_ms: 0,
            cost: price.map(|p| cost(total as f64, p)),
        });
    }
    debug_assert_eq!(out.hours.len(), hours.n);
    out.groups = capped(std::mem::take(&mut out.groups), price);
    settle(&mut out, utilised, price);
    out
}

/// Usages over the same range of clusters apart (each over its own
/// executors and its own jobs, so one cluster's idle time is shared among
/// its own jobs only) as one: totals, hours and `jobs_without_usage`
/// summed (saturating), the groups of the same key merged, past
/// [`MAX_GROUPS`] the rest in `(others)`. The books balance as each
/// part's do.
pub fn merged(
    parts: impl IntoIterator<Item = Usage>,
    (from, to): (u64, u64),
    price: Option<f64>,
) -> Usage {
    let mut out = usage(&[], &[], 0, (from, to), price);
    let mut utilised = 0f64;
    let mut groups: HashMap<String, GroupUsage> = HashMap::new();
    let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
    for u in parts {
        add_totals(&mut out, &u, &mut utilised);
        add(&mut out.jobs, u.jobs);
        add(&mut out.waited_ms, u.waited_ms);
        add(&mut out.jobs_without_usage, u.jobs_without_usage);
        for g in u.groups {
            match groups.entry(g.key.clone()) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(g);
                }
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let m = e.get_mut();
                    add(&mut m.jobs, g.jobs);
                    add(&mut m.busy_slot_ms, g.busy_slot_ms);
                    add(&mut m.idle_share_slot_ms, g.idle_share_slot_ms);
                    add(&mut m.total_slot_ms, g.total_slot_ms);
                    add(&mut m.waited_ms, g.waited_ms);
                    m.cost = price.map(|p| cost(m.total_slot_ms as f64, p));
                }
            }
        }
    }
    out.groups = capped(groups.into_values().collect(), price);
    settle(&mut out, utilised, price);
    out
}

/// Adds `u`'s totals and hours to `out` (saturating), and the slot time
/// it used within capacity to `utilised`.
fn add_totals(out: &mut Usage, u: &Usage, utilised: &mut f64) {
    let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
    add(&mut out.capacity_slot_ms, u.capacity_slot_ms);
    add(
        &mut out.estimated_capacity_slot_ms,
        u.estimated_capacity_slot_ms,
    );
    add(&mut out.busy_slot_ms, u.busy_slot_ms);
    add(&mut out.over_capacity_slot_ms, u.over_capacity_slot_ms);
    add(&mut out.idle_slot_ms, u.idle_slot_ms);
    add(
        &mut out.unattributed_idle_slot_ms,
        u.unattributed_idle_slot_ms,
    );
    *utilised += u.busy_slot_ms.saturating_sub(u.over_capacity_slot_ms) as f64;
    for (mine, theirs) in out.hours.iter_mut().zip(&u.hours) {
        add(&mut mine.capacity_slot_ms, theirs.capacity_slot_ms);
        add(&mut mine.busy_slot_ms, theirs.busy_slot_ms);
        add(&mut mine.idle_slot_ms, theirs.idle_slot_ms);
        add(&mut mine.peak_slots, theirs.peak_slots);
    }
}

/// `out`'s utilisation and cost, from its summed totals.
fn settle(out: &mut Usage, utilised: f64, price: Option<f64>) {
    out.utilisation = (out.capacity_slot_ms > 0)
        .then(|| (utilised / out.capacity_slot_ms as f64).clamp(0.0, 1.0));
    let priced = out
        .capacity_slot_ms
        .saturating_add(out.over_capacity_slot_ms);
    out.cost = price.map(|p| cost(priced as f64, p));
}

/// The most slots up at once, from `(time, +slots | -slots)` edges (an end
/// before a start at the same time).
fn peak(edges: &mut [(u64, i64)]) -> u64 {
    edges.sort_by_key(|&(t, d)| (t, d));
    let mut up = 0i64;
    let mut most = 0i64;
    for &(_, d) in edges.iter() {
        up += d;
        most = most.max(up);
    }
    most.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: &str, slots: u32, from: u64, to: u64) -> SlotInterval {
        SlotInterval {
            scheduler_id: "s".into(),
            executor_id: id.into(),
            slots,
            from,
            to,
            estimated: false,
        }
    }

    fn job(key: &str, start: u64, end: u64, busy: u64) -> UsageJob {
        UsageJob {
            key: key.into(),
            start,
            end,
            busy_slot_ms: busy,
            waited_ms: 7,
        }
    }

    /// The books balance for any range: capacity is busy (within it) plus
    /// idle, and idle is the shares plus the unattributed rest.
    #[test]
    fn every_slot_second_is_accounted_for_in_any_range() {
        let h = HOUR_MS;
        let intervals = [up("a", 2, 0, 3 * h), up("b", 4, h / 2, 2 * h)];
        let jobs = [
            job("q1", 10_000, 20_000, 15_000),
            job("q2", h + 1_000, h + 601_000, 1_000_000),
            job("q1", 2 * h + 5, 2 * h + 10, 8),
        ];
        for (from, to) in [(0, 3 * h), (h / 3, 2 * h + 7), (2 * h + 100, 3 * h)] {
            let u = usage(&intervals, &jobs, 0, (from, to), None);
            // Capacity counted another way: each interval's overlap.
            let want: u64 = intervals
                .iter()
                .map(|i| overlap(i.from, i.to, from, to) * u64::from(i.slots))
                .sum();
            assert_eq!(u.capacity_slot_ms, want, "{from}..{to}");
            let shares: u64 = u.groups.iter().map(|g| g.idle_share_slot_ms).sum();
            let near = |a: u64, b: u64| a.abs_diff(b) <= 2;
            assert!(
                near(u.idle_slot_ms, shares + u.unattributed_idle_slot_ms),
                "{u:?}"
            );
            assert!(
                near(
                    u.capacity_slot_ms,
                    u.busy_slot_ms - u.over_capacity_slot_ms + u.idle_slot_ms
                ),
                "{u:?}"
            );
            let hourly: u64 = u.hours.iter().map(|x| x.capacity_slot_ms).sum();
            assert!(near(hourly, u.capacity_slot_ms));
        }
        let all = usage(&intervals, &jobs, 0, (0, 3 * h), Some(2.0));
        assert_eq!(all.busy_slot_ms, 1_015_008);
        assert_eq!(all.waited_ms, 21, "three jobs, 7 ms each");
        assert_eq!(all.hours[1].peak_slots, 6);
        assert_eq!(all.hours[2].peak_slots, 2);
        // Each hour's capacity goes whole to the one query that ran in it:
        // q1 the first and last (4 and 2 slot-hours), q2 the second (6).
        let total = |k: &str| {
            all.groups
                .iter()
                .find(|g| g.key == k)
                .unwrap()
                .total_slot_ms
        };
        assert_eq!((total("q1"), total("q2")), (6 * h, 6 * h));
        // 12 slot-hours at 2 a slot-hour, half each.
        assert_eq!(all.cost, Some(24.0));
        assert!(
            all.groups.iter().all(|g| g.cost == Some(12.0)),
            "{:?}",
            all.groups
        );
    }

    /// By executor: each its own capacity, the busy time it had, its idle
    /// time shared or unattributed; the books still balance.
    #[test]
    fn executors_combined_keep_the_books() {
        let h = HOUR_MS;
        let a = usage(
            &[up("a", 2, 0, 2 * h)],
            &[job("a", 0, h, 1_000)],
            0,
            (0, 2 * h),
            None,
        );
        let b = usage(&[up("b", 1, 0, 2 * h)], &[], 0, (0, 2 * h), None);
        let both = combined(
            vec![("a".into(), a), ("b".into(), b)],
            (0, 2 * h),
            Some(1.0),
        );
        assert_eq!(both.capacity_slot_ms, 6 * h);
        assert_eq!(both.busy_slot_ms, 1_000);
        // a's first hour is its idle share; its second hour and all of b
        // ran nothing.
        assert_eq!(both.groups[0].key, "a");
        assert_eq!(both.groups[0].idle_share_slot_ms, 2 * h - 1_000);
        assert_eq!(both.unattributed_idle_slot_ms, 2 * h + 2 * h);
        let shares: u64 = both.groups.iter().map(|g| g.idle_share_slot_ms).sum();
        assert_eq!(both.idle_slot_ms, shares + both.unattributed_idle_slot_ms);
        assert_eq!(both.hours[0].peak_slots, 3);
        assert_eq!(both.cost, Some(6.0));
    }

    /// A regression test: two executors' parts of 1.2e19 slot-ms each
    /// summed to 5.55e18, less than either.
    #[test]
    fn sums_of_huge_parts_saturate_and_are_never_less_than_a_part() {
        let h = HOUR_MS;
        let part = |key: &str| {
            let u = usage(
                &[],
                &[job(key, 0, h, 12_000_000_000_000_000_000)],
                0,
                (0, h),
                None,
            );
            (key.to_string(), u)
        };
        let both = combined([part("a"), part("b")], (0, h), None);
        let most = both.groups.iter().map(|g| g.busy_slot_ms).max().unwrap();
        assert!(most >= 12_000_000_000_000_000_000, "{both:?}");
        assert!(both.busy_slot_ms >= most, "{} < {most}", both.busy_slot_ms);
        assert!(both.hours[0].busy_slot_ms >= most);
    }

    #[test]
    fn combining_more_executors_than_the_groups_cap_keeps_the_cap_and_the_totals() {
        let h = HOUR_MS;
        let parts = (0..MAX_GROUPS + 5).map(|i| {
            let key = format!("e{i:05}");
            let u = usage(
                &[up(&key, 1, 0, h)],
                &[job(&key, 0, h, 10)],
                0,
                (0, h),
                None,
            );
            (key, u)
        });
        let all = combined(parts, (0, h), None);
        assert_eq!(all.groups.len(), MAX_GROUPS);
        assert_eq!(all.groups.last().unwrap().key, "(others)");
        let busy: u64 = all.groups.iter().map(|g| g.busy_slot_ms).sum();
        assert_eq!(busy, 10 * (MAX_GROUPS as u64 + 5));
        assert_eq!(all.capacity_slot_ms, h * (MAX_GROUPS as u64 + 5));
    }

    /// Two clusters in one bucket: the idle time of the one where q2 did
    /// not run is not q2's (pooled, q2 took half of cluster b's idle).
    #[test]
    fn each_clusters_idle_time_goes_to_its_own_jobs() {
        let h = HOUR_MS;
        let a = usage(
            &[up("a", 1, 0, h)],
            &[job("q1", 0, h, 1_000)],
            0,
            (0, h),
            None,
        );
        let b = usage(
            &[up("b", 3, 0, h)],
            &[job("q2", 0, h, 1_000)],
            0,
            (0, h),
            None,
        );
        let both = merged([a, b], (0, h), None);
        let total = |k: &str| {
            both.groups
                .iter()
                .find(|g| g.key == k)
                .unwrap()
                .total_slot_ms
        };
        assert_eq!((total("q1"), total("q2")), (h, 3 * h));
        assert_eq!(both.capacity_slot_ms, 4 * h);
        let shares: u64 = both.groups.iter().map(|g| g.idle_share_slot_ms).sum();
        assert_eq!(both.idle_slot_ms, shares + both.unattributed_idle_slot_ms);
        // Pooled, the same jobs split the four slot-hours evenly.
        let pooled = usage(
            &[up("a", 1, 0, h), up("b", 3, 0, h)],
            &[job("q1", 0, h, 1_000), job("q2", 0, h, 1_000)],
            0,
            (0, h),
            None,
        );
        assert_eq!(pooled.groups[0].total_slot_ms, 2 * h);
    }

    /// The history's own jobs (its SQL on the cluster) are busy in a
    /// group of their own and take no idle share: the users' job of the
    /// hour takes all of it; an hour when only the history's ran stays
    /// unattributed. The books still balance.
    #[test]
    fn the_historys_own_jobs_take_no_idle_share() {
        let h = HOUR_MS;
        let jobs = [
            job("q", 0, h, 1_000),
            job(HISTORY_GROUP, 0, h, 3_000),
            job(HISTORY_GROUP, h, 2 * h, 500),
        ];
        let u = usage(&[up("a", 1, 0, 2 * h)], &jobs, 0, (0, 2 * h), None);
        let group = |k: &str| u.groups.iter().find(|g| g.key == k).unwrap().clone();
        assert_eq!(group("q").idle_share_slot_ms, h - 4_000);
        assert_eq!(group(HISTORY_GROUP).idle_share_slot_ms, 0);
        assert_eq!(group(HISTORY_GROUP).busy_slot_ms, 3_500);
        assert_eq!(u.unattributed_idle_slot_ms, h - 500);
        let shares: u64 = u.groups.iter().map(|g| g.idle_share_slot_ms).sum();
        assert_eq!(u.idle_slot_ms, shares + u.unattributed_idle_slot_ms);
    }

    #[test]
    fn busy_without_capacity_is_over_capacity_never_negative_idle() {
        let u = usage(&[], &[job("q", 0, 1_000, 500)], 3, (0, HOUR_MS), None);
        assert_eq!((u.capacity_slot_ms, u.idle_slot_ms), (0, 0));
        assert_eq!(u.over_capacity_slot_ms, 500);
        assert_eq!(u.utilisation, None);
        assert_eq!(u.jobs_without_usage, 3);
    }
}
