//! A segment's bytes: its fixed-width rows, its blocks' statistics, and
//! the writing and the header's reading of the format the parent module
//! describes.

use super::names::{NameBlock, encode_names};
use super::{BLOCK, MAGIC, MAX_RECORD, REGIONS, ROW, STATES, Segment};
use crate::query::JobFacts;
use crate::snapshot::{Cursor, IndexError, checksum, encode_record};
use crate::summary::JobSummary;
use bjh_format::JobState;
use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

/// One job's fixed-width row.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fixed {
    pub(super) key: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) hash: u64,
    pub(super) rec: u64,
    pub(super) rec_len: u32,
    pub(super) sched: u32,
    pub(super) state: JobState,
}

impl Fixed {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.key, self.start, self.end, self.hash, self.rec] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let word = self.rec_len | (self.state.index() as u32) << 24;
        out.extend_from_slice(&word.to_le_bytes());
        out.extend_from_slice(&self.sched.to_le_bytes());
    }

    pub(super) fn decode(b: &[u8]) -> Result<Self, IndexError> {
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8"));
        let w = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
        Ok(Self {
            key: u(0),
            start: u(1),
            end: u(2),
            hash: u(3),
            rec: u(4),
            rec_len: w(40) & 0x00ff_ffff,
            sched: w(44),
            state: JobState::at_index((w(40) >> 24) as usize)
                .ok_or(IndexError::Damaged("a row of an unknown state"))?,
        })
    }

    pub(super) fn duration_key(&self) -> u64 {
        if self.start > 0 && self.end > 0 {
            self.end.saturating_sub(self.start)
        } else {
            u64::MAX
        }
    }
}

/// A block's statistics: what a filter needs to skip it or count it whole.
#[derive(Debug, Clone, Default)]
pub(super) struct Stats {
    /// Minimum and maximum of the position key, start, end, duration key.
    pub(super) ranges: [[u64; 2]; 4],
    pub(super) states: [u32; STATES],
    pub(super) sum: u64,
}

pub(super) const STATS_BYTES: usize = 8 * 8 + 4 * STATES + 8;

/// The segment's bytes.
pub(super) fn encode(jobs: &[&JobSummary]) -> Result<Vec<u8>, IndexError> {
    if jobs.len() as u64 >= u64::from(u32::MAX) {
        return Err(IndexError::Damaged("too many jobs for one segment"));
    }
    let mut order: Vec<&JobSummary> = jobs.to_vec();
    order.sort_unstable_by(|a, b| {
        (Reverse(a.position_key()), a.job_id()).cmp(&(Reverse(b.position_key()), b.job_id()))
    });
    let body = Body::of(&order)?;
    body.bytes(&order)
}

/// The rows, records and block statistics of jobs in the default order,
/// with the schedulers they name and the queries they ran.
struct Body<'a> {
    rows: Vec<u8>,
    records: Vec<u8>,
    blocks: Vec<Stats>,
    schedulers: Vec<&'a str>,
    /// Each scheduler's count of each state.
    by_sched: Vec<[u32; STATES]>,
    hashes: std::collections::BTreeSet<u64>,
}

impl<'a> Body<'a> {
    fn of(order: &[&'a JobSummary]) -> Result<Self, IndexError> {
        let mut schedulers: Vec<&'a str> = Vec::new();
        let mut sched_index: HashMap<&'a str, u32> = HashMap::new();
        let mut records = Vec::new();
        let mut rows = Vec::with_capacity(order.len() * ROW);
        let mut blocks = Vec::new();
        let mut hashes = std::collections::BTreeSet::new();
        let mut by_sched: Vec<[u32; STATES]> = Vec::new();
        for chunk in order.chunks(BLOCK) {
            let mut stats = Stats {
                ranges: [[u64::MAX, 0]; 4],
                ..Stats::default()
            };
            let start = rows.len();
            for &s in chunk {
                let sched = s.scheduler_id().map_or(u32::MAX, |id| {
                    *sched_index.entry(id).or_insert_with(|| {
                        schedulers.push(id);
                        by_sched.push([0; STATES]);
                        schedulers.len() as u32 - 1
                    })
                });
                if let Some(counts) = by_sched.get_mut(sched as usize) {
                    counts[s.state().index()] += 1;
                }
                let rec = records.len() as u64;
                encode_record(&mut records, s, None);
                let f = Fixed {
                    key: s.position_key(),
                    start: s.start_time(),
                    end: s.end_time(),
                    hash: s.query_hash(),
                    rec,
                    rec_len: u32::try_from(records.len() as u64 - rec)
                        .ok()
                        .filter(|&l| l <= MAX_RECORD)
                        .ok_or(IndexError::Damaged("a record too long"))?,
                    sched,
                    state: s.state(),
                };
                f.encode(&mut rows);
                hashes.insert(f.hash);
                for (range, v) in
                    stats
                        .ranges
                        .iter_mut()
                        .zip([f.key, f.start, f.end, f.duration_key()])
                {
                    range[0] = range[0].min(v);
                    range[1] = range[1].max(v);
                }
                stats.states[f.state.index()] += 1;
            }
            stats.sum = checksum(&rows[start..]);
            blocks.push(stats);
        }
        Ok(Self {
            rows,
            records,
            blocks,
            schedulers,
            by_sched,
            hashes,
        })
    }

    /// The whole segment: header, its checksum, the regions.
    fn bytes(self, order: &[&JobSummary]) -> Result<Vec<u8>, IndexError> {
        let Body {
            rows,
            records,
            blocks,
            schedulers,
            by_sched,
            hashes,
        } = self;
        let (names, name_blocks) = encode_names(order)?;
        let n = order.len();
        let [by_duration, by_query, by_id] = orders(order);
        let known = crate::labels::all();
        let labels: Vec<(u64, &str)> = hashes
            .iter()
            .filter_map(|&h| known.get(h).map(|l| (h, l)))
            .collect();
        let header_len = 8
            + 8
            + 8 * REGIONS
            + 8
            + blocks.len() * STATS_BYTES
            + 4
            + schedulers
                .iter()
                .map(|s| 4 + s.len() + 4 * STATES)
                .sum::<usize>()
            + 4
            + labels.iter().map(|(_, l)| 12 + l.len()).sum::<usize>()
            + 8
            + name_blocks
                .iter()
                .map(|b| 20 + b.first.len())
                .sum::<usize>();
        let regions = [&rows, &by_duration, &by_query, &by_id, &records, &names];
        let mut at = [0u64; REGIONS];
        at[0] = (16 + header_len + 8) as u64;
        for (i, region) in regions.iter().enumerate() {
            at[i + 1] = at[i] + region.len() as u64;
        }
        let mut header = Vec::with_capacity(header_len);
        header.extend_from_slice(&(BLOCK as u64).to_le_bytes());
        header.extend_from_slice(&(n as u64).to_le_bytes());
        for a in at {
            header.extend_from_slice(&a.to_le_bytes());
        }
        header.extend_from_slice(&(blocks.len() as u64).to_le_bytes());
        for s in &blocks {
            for [lo, hi] in s.ranges {
                header.extend_from_slice(&lo.to_le_bytes());
                header.extend_from_slice(&hi.to_le_bytes());
            }
            for c in s.states {
                header.extend_from_slice(&c.to_le_bytes());
            }
            header.extend_from_slice(&s.sum.to_le_bytes());
        }
        let put_str = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        header.extend_from_slice(&(schedulers.len() as u32).to_le_bytes());
        for (s, counts) in schedulers.iter().zip(&by_sched) {
            put_str(&mut header, s);
            for c in counts {
                header.extend_from_slice(&c.to_le_bytes());
            }
        }
        header.extend_from_slice(&(labels.len() as u32).to_le_bytes());
        for (h, l) in &labels {
            header.extend_from_slice(&h.to_le_bytes());
            put_str(&mut header, l);
        }
        header.extend_from_slice(&(name_blocks.len() as u64).to_le_bytes());
        for b in &name_blocks {
            header.extend_from_slice(&b.at.to_le_bytes());
            header.extend_from_slice(&b.sum.to_le_bytes());
            put_str(&mut header, &b.first);
        }
        debug_assert_eq!(header.len(), header_len);
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&checksum(&header).to_le_bytes());
        for region in regions {
            out.extend_from_slice(region);
        }
        Ok(out)
    }
}

/// The permutations of `order`'s rows: by duration (then id), by query
/// hash (then row), by id.
fn orders(order: &[&JobSummary]) -> [Vec<u8>; 3] {
    let n = order.len();
    let perm = |cmp: &dyn Fn(&usize, &usize) -> Ordering| {
        let mut p: Vec<usize> = (0..n).collect();
        p.sort_unstable_by(|a, b| cmp(a, b));
        p.iter()
            .flat_map(|&r| (r as u32).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let dur_key = |s: &JobSummary| s.duration().unwrap_or(u64::MAX);
    let by_duration = perm(&|&a, &b| {
        (dur_key(order[a]), order[a].job_id()).cmp(&(dur_key(order[b]), order[b].job_id()))
    });
    let by_query = perm(&|&a, &b| (order[a].query_hash(), a).cmp(&(order[b].query_hash(), b)));
    let by_id = perm(&|&a, &b| order[a].job_id().cmp(order[b].job_id()));
    [by_duration, by_query, by_id]
}

/// The segment of a checked header.
pub(super) fn decode_header(file: File, body: &[u8]) -> Result<Segment, IndexError> {
    let mut c = Cursor::new(body);
    if c.u64()? != BLOCK as u64 {
        // A test build's blocks are smaller: its segments are not ours.
        return Err(IndexError::Foreign);
    }
    let rows = usize::try_from(c.u64()?)
        .ok()
        .filter(|&r| r < u32::MAX as usize)
        .ok_or(IndexError::Damaged("too many rows"))?;
    let mut at = [0u64; REGIONS];
    for a in &mut at {
        *a = c.u64()?;
    }
    let count = c.u64()?;
    if count != rows.div_ceil(BLOCK) as u64 {
        return Err(IndexError::Damaged(
            "the block count disagrees with the rows",
        ));
    }
    let mut blocks = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let mut s = Stats::default();
        for range in &mut s.ranges {
            *range = [c.u64()?, c.u64()?];
        }
        for st in &mut s.states {
            *st = c.u32()?;
        }
        s.sum = c.u64()?;
        blocks.push(s);
    }
    let mut schedulers = Vec::new();
    let mut by_sched = Vec::new();
    for _ in 0..c.u32()? {
        schedulers.push(Arc::from(c.str()?));
        let mut counts = [0u32; STATES];
        for n in &mut counts {
            *n = c.u32()?;
        }
        by_sched.push(counts);
    }
    for _ in 0..c.u32()? {
        let hash = c.u64()?;
        crate::labels::remember(hash, Some(c.str()?));
    }
    let names = c.u64()?;
    if names != rows.div_ceil(BLOCK) as u64 {
        return Err(IndexError::Damaged(
            "the name block count disagrees with the rows",
        ));
    }
    let mut name_blocks = Vec::with_capacity(names as usize);
    for _ in 0..names {
        let (at, sum) = (c.u64()?, c.u64()?);
        name_blocks.push(NameBlock {
            at,
            sum,
            first: c.str()?.into(),
        });
    }
    if !c.done() {
        return Err(IndexError::Damaged("bytes after the header"));
    }
    Ok(Segment {
        file,
        size: 0,
        rows,
        at,
        blocks,
        schedulers,
        by_sched,
        name_blocks,
    })
}
