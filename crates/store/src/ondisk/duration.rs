//! A segment's order by duration walked lazily, and segments' walks
//! merged: a page sorted by duration reads only its own jobs whole.

use super::{Fixed, Found, Perm, Segment, Want, partition};
use crate::query::{Facts, JobFacts, ListQuery, Order};
use crate::snapshot::IndexError;

/// A segment's order by duration walked lazily: longest first (or
/// shortest), ties by id ascending either way, from after a cursor.
struct DurationWalk<'s> {
    segment: &'s Segment,
    desc: bool,
    /// The next index of the permutation, and the end of its run (the
    /// walk longest first takes runs of one duration from the last).
    next: usize,
    run: [usize; 2],
}

impl<'s> DurationWalk<'s> {
    fn new(
        segment: &'s Segment,
        q: &ListQuery,
        cursor: Option<&Facts>,
    ) -> Result<Self, IndexError> {
        let s = segment;
        let at = cursor.map(|c| (c.duration().unwrap_or(u64::MAX), c.job_id.as_ref()));
        let key_of = |i: usize| -> Result<(u64, String), IndexError> {
            let (f, id) = s.id_of(s.perm(Perm::Duration, i)?)?;
            Ok((f.duration_key(), id))
        };
        let desc = q.order() == Order::Desc;
        if !desc {
            // Ascending: every row after the cursor's (duration, id).
            let next = match at {
                Some((key, id)) => partition(s.rows, |i| {
                    let (k, i) = key_of(i)?;
                    Ok((k, i.as_str()) <= (key, id))
                })?,
                None => 0,
            };
            return Ok(Self {
                segment,
                desc,
                next,
                run: [next, s.rows],
            });
        }
        // Longest first: the cursor's run from after its id, then each
        // shorter run whole.
        let mut walk = Self {
            segment,
            desc,
            next: 0,
            run: [0, 0],
        };
        let hi = match at {
            Some((key, _)) => partition(s.rows, |i| Ok(s.duration_at(i)? <= key))?,
            None => s.rows,
        };
        walk.start_run(hi)?;
        if let Some((key, id)) = at
            && walk.run[0] < walk.run[1]
            && s.duration_at(walk.run[0])? == key
        {
            let [lo, hi] = walk.run;
            walk.next = lo + partition(hi - lo, |i| Ok(key_of(lo + i)?.1.as_str() <= id))?;
        }
        Ok(walk)
    }

    /// Makes the run of the longest duration below `hi` the current one:
    /// its start found by galloping back from its end (runs are mostly
    /// short), then by binary search.
    fn start_run(&mut self, hi: usize) -> Result<(), IndexError> {
        let s = self.segment;
        if hi == 0 {
            (self.next, self.run) = (0, [0, 0]);
            return Ok(());
        }
        let key = s.duration_at(hi - 1)?;
        let (mut known, mut step, mut floor) = (hi - 1, 1, 0);
        while known > 0 {
            let probe = known.saturating_sub(step);
            if s.duration_at(probe)? < key {
                floor = probe + 1;
                break;
            }
            known = probe;
            step *= 2;
        }
        let lo = floor + partition(known - floor, |i| Ok(s.duration_at(floor + i)? < key))?;
        (self.next, self.run) = (lo, [lo, hi]);
        Ok(())
    }

    /// The next row `q` matches: its duration key, id and row.
    fn advance(
        &mut self,
        q: &ListQuery,
        want: Want<'_>,
    ) -> Result<Option<(u64, String, Fixed)>, IndexError> {
        let s = self.segment;
        loop {
            if self.next >= self.run[1] {
                if !self.desc || self.run[0] == 0 {
                    return Ok(None);
                }
                self.start_run(self.run[0])?;
                continue;
            }
            let f = s.fixed(s.perm(Perm::Duration, self.next)?)?;
            self.next += 1;
            if q.matches(&s.probe(&f)) {
                let id = Segment::names(&s.record(&f)?)?.0.to_string();
                if !(want.hidden)(&id) {
                    return Ok(Some((f.duration_key(), id, f)));
                }
            }
        }
    }
}

/// The first `wanted` jobs of `segments` in `q`'s order by duration
/// (filtered by state at most), after the cursor, and how many match:
/// each segment's order walked lazily and merged, so only the page's
/// jobs are read whole.
pub(super) fn merge_by_duration(
    segments: &[&Segment],
    q: &ListQuery,
    cursor: Option<&Facts>,
    want: Want<'_>,
) -> Result<Found, IndexError> {
    let (wanted, mut walks, mut total) = (want.count, Vec::new(), 0);
    for &s in segments {
        total += s.count(q)?;
        let mut walk = DurationWalk::new(s, q, cursor)?;
        let head = walk.advance(q, want)?;
        walks.push((walk, head));
    }
    let desc = q.order() == Order::Desc;
    let mut out = Vec::new();
    while out.len() < wanted {
        let best = walks
            .iter()
            .enumerate()
            .filter_map(|(i, (_, head))| head.as_ref().map(|(k, id, _)| (i, *k, id)))
            .min_by(|a, b| {
                let keys = if desc { b.1.cmp(&a.1) } else { a.1.cmp(&b.1) };
                keys.then_with(|| a.2.cmp(b.2))
            });
        let Some((i, _, _)) = best else {
            break;
        };
        let (walk, head) = &mut walks[i];
        if let Some((_, _, f)) = head.take() {
            out.push(walk.segment.summary_of(&f)?);
        }
        *head = walk.advance(q, want)?;
    }
    Ok((out, total))
}
