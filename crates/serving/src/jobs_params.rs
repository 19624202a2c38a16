//! `GET /api/jobs`' parameters, written once: [`JobsParams`] is what the
//! route parses (serde, through [`Params`](crate::params::Params)), what
//! the API description lists (its `IntoParams`), what the MCP tool
//! `list_jobs` takes (its `JsonSchema`, and its `Serialize` for the query
//! string the tool sends), and what the jobs page's filters submit (the
//! page keeps the same names, and a test checks each has a control). The
//! store's [`ListQuery`] is the filter they make, with no wire format.

use crate::error::ApiError;
use crate::params::check;
use bjh_format::JobState;
use bjh_store::query::{ListQuery, MAX_LIMIT, MAX_NAME_TERM, Order, Sort};
use rmcp::schemars;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /api/jobs`' parameters (and the jobs page's, and the MCP tool
/// `list_jobs`' arguments). An empty value is no filter, as a form's empty
/// field means.
#[derive(Debug, Clone, Default, Deserialize, Serialize, IntoParams, schemars::JsonSchema)]
#[into_params(parameter_in = Query)]
#[serde(default)]
pub struct JobsParams {
    /// At most this many jobs (1 to 100000); the answer's `x-next-after`
    /// header is the next page's cursor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Skip this many jobs first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
    /// Start after this job (a job id from a previous page); excludes
    /// `before`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// End before this job (a job id from a previous page); excludes
    /// `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Only jobs in these states: a comma-separated list of queued,
    /// running, completed, failed, cancelled, abandoned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Also list logs of jobs that never finished (a crashed or stopped
    /// scheduler's): true or false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include_unfinished: Option<bool>,
    /// Only jobs whose name contains this term (case-insensitive, at most
    /// 256 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only jobs started within this long before now: 1h, 24h or 7d.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// Only jobs started at or after this time: epoch milliseconds or
    /// RFC 3339 (e.g. 2026-12-03T00:00:00Z).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_after: Option<String>,
    /// Only jobs started at or before this time: epoch milliseconds or
    /// RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_before: Option<String>,
    /// Only jobs ended at or after this time: epoch milliseconds or
    /// RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_after: Option<String>,
    /// Only jobs ended at or before this time: epoch milliseconds or
    /// RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_before: Option<String>,
    /// Only jobs that ran at least this many milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_duration_ms: Option<u64>,
    /// Only runs of one recurring query: its 16 hex digits, as
    /// `/api/queries` gives them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_hash: Option<String>,
    /// Only jobs these schedulers ran: a comma-separated list of scheduler
    /// ids (each entry's `scheduler_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_id: Option<String>,
    /// Sort key: queued_time (the default), start_time, end_time, duration
    /// or name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[param(inline)]
    pub sort: Option<SortKey>,
    /// asc or desc (default: desc for times and durations, newest and
    /// longest first; asc for names).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[param(inline)]
    pub order: Option<Direction>,
}

/// `sort=`: what a list is sorted by.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    /// When the job was queued.
    QueuedTime,
    /// When it started.
    StartTime,
    /// When it ended.
    EndTime,
    /// End minus start.
    Duration,
    /// Its name.
    Name,
}

/// `order=`: smallest or largest first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

/// The presets of `range=`: name, label, span in milliseconds.
pub const RANGES: &[(&str, &str, u64)] = &[
    ("1h", "Last hour", 3_600_000),
    ("24h", "Last 24 hours", 86_400_000),
    ("7d", "Last 7 days", 7 * 86_400_000),
];

/// `Some` of a non-empty value.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// Epoch milliseconds, or an RFC 3339 timestamp.
pub(crate) fn time(name: &str, value: &Option<String>) -> Result<Option<u64>, ApiError> {
    const TAKES: &str =
        "epoch milliseconds (e.g. 1767225600000) or an RFC 3339 time (e.g. 2026-01-01T00:00:00Z)";
    let Some(v) = given(value) else {
        return Ok(None);
    };
    let millis = if v.bytes().all(|b| b.is_ascii_digit()) {
        v.parse().ok()
    } else {
        chrono::DateTime::parse_from_rfc3339(v)
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
    };
    check(name, v, millis.is_some(), TAKES)?;
    Ok(millis)
}

/// A comma-separated list, its empty entries dropped.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

impl JobsParams {
    /// The store's filter these parameters make; `now` (epoch millis)
    /// anchors `range`. A value out of range is a 400 naming it.
    pub fn query(&self, now: u64) -> Result<ListQuery, ApiError> {
        if let Some(n) = self.limit {
            let takes = "an integer from 1 to 100000";
            check("limit", n, (1..=MAX_LIMIT).contains(&n), takes)?;
        }
        let states = match given(&self.status) {
            Some(words) => Some(states(words)?),
            None => None,
        };
        let name = match given(&self.name) {
            Some(term) if term.chars().count() > MAX_NAME_TERM => {
                // The term is not echoed back: it may be huge.
                return Err(ApiError::BadRequest(format!(
                    "invalid value for parameter `name`: expected at most {MAX_NAME_TERM} \
                     characters, got {}",
                    term.chars().count()
                )));
            }
            term => term.map(str::to_lowercase),
        };
        let query_hash = match given(&self.query_hash) {
            Some(hex) => {
                let hash = bjh_format::query_hash::parse_hash(hex);
                check("query_hash", hex, hash.is_some(), "16 hex digits")?;
                hash
            }
            None => None,
        };
        let scheduler_ids = match given(&self.scheduler_id) {
            Some(ids) => Some(
                list(ids)
                    .map(|id| {
                        let short = id.chars().count() <= MAX_NAME_TERM;
                        let takes = "scheduler ids of at most 256 characters";
                        check("scheduler_id", id, short, takes).map(|()| id.to_string())
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let mut started_after = time("started_after", &self.started_after)?;
        if let Some(r) = given(&self.range) {
            let span = RANGES.iter().find(|p| p.0 == r).map(|p| p.2);
            check("range", r, span.is_some(), "1h, 24h or 7d")?;
            let since = now.saturating_sub(span.unwrap_or(0));
            started_after = Some(started_after.map_or(since, |a| a.max(since)));
        }
        let (after, before) = (given(&self.after), given(&self.before));
        if after.is_some() && before.is_some() {
            return Err(ApiError::BadRequest(
                "parameters `after` and `before` exclude each other: a page starts after one \
                 job or ends before one"
                    .into(),
            ));
        }
        Ok(ListQuery {
            limit: self.limit,
            offset: self.offset.unwrap_or(0),
            after: after.map(str::to_string),
            before: before.map(str::to_string),
            states,
            include_unfinished: self.include_unfinished.unwrap_or(false),
            name,
            started_after,
            started_before: time("started_before", &self.started_before)?,
            ended_after: time("ended_after", &self.ended_after)?,
            ended_before: time("ended_before", &self.ended_before)?,
            min_duration_ms: self.min_duration_ms,
            query_hash,
            scheduler_ids,
            sort: match self.sort.unwrap_or(SortKey::QueuedTime) {
                SortKey::QueuedTime => Sort::QueuedTime,
                SortKey::StartTime => Sort::StartTime,
                SortKey::EndTime => Sort::EndTime,
                SortKey::Duration => Sort::Duration,
                SortKey::Name => Sort::Name,
            },
            order: self.order.map(|o| match o {
                Direction::Asc => Order::Asc,
                Direction::Desc => Order::Desc,
            }),
        })
    }
}

/// `status=`: the states named, once each.
fn states(words: &str) -> Result<Vec<JobState>, ApiError> {
    const TAKES: &str =
        "a comma-separated list of queued, running, completed, failed, cancelled, abandoned";
    let mut states = Vec::new();
    for word in list(words) {
        let state = JobState::ALL
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, s)| *s);
        check("status", words, state.is_some(), TAKES)?;
        if let Some(s) = state
            && !states.contains(&s)
        {
            states.push(s);
        }
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    fn query(raw: &str) -> Result<ListQuery, String> {
        Params::<JobsParams>::parse(raw)
            .and_then(|p| p.value.query(10 * 86_400_000))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_parameter_makes_its_filter() {
        let q = query(
            "limit=7&offset=2&status=Failed,cancelled,failed&name=NiGht&started_after=1970-01-01T00:00:00.300Z\
             &ended_before=900&min_duration_ms=5&query_hash=00000000000000ff&scheduler_id=a,,b\
             &sort=duration&order=asc&include_unfinished=true&after=j1",
        )
        .unwrap();
        assert_eq!((q.limit, q.offset), (Some(7), 2));
        assert_eq!(q.states, Some(vec![JobState::Failed, JobState::Cancelled]));
        assert_eq!(q.name.as_deref(), Some("night"));
        assert_eq!((q.started_after, q.ended_before), (Some(300), Some(900)));
        assert_eq!((q.min_duration_ms, q.query_hash), (Some(5), Some(255)));
        assert_eq!(q.scheduler_ids, Some(vec!["a".into(), "b".into()]));
        assert_eq!((q.sort, q.order), (Sort::Duration, Some(Order::Asc)));
        assert!(q.include_unfinished);
        assert_eq!(q.after.as_deref(), Some("j1"));
        // A form's empty fields filter nothing; no parameter is the default.
        let empty = query("status=&name=&range=&started_after=&limit=").unwrap();
        assert_eq!(format!("{empty:?}"), format!("{:?}", ListQuery::default()));
    }

    #[test]
    fn a_range_is_a_start_bound_from_now_and_the_later_bound_wins() {
        let now = 10 * 86_400_000;
        let q = query("range=24h").unwrap();
        assert_eq!(q.started_after, Some(now - 86_400_000));
        let q = query(&format!("range=7d&started_after={}", now - 1000)).unwrap();
        assert_eq!(q.started_after, Some(now - 1000));
    }

    #[test]
    fn bad_parameters_name_themselves() {
        for (raw, param) in [
            ("limit=0", "limit"),
            ("limit=x", "limit"),
            ("limit=100001", "limit"),
            ("offset=-1", "offset"),
            ("status=done", "status"),
            ("sort=size", "sort"),
            ("order=up", "order"),
            ("started_after=yesterday", "started_after"),
            ("ended_before=2026-13-01T00:00:00Z", "ended_before"),
            ("min_duration_ms=1.5", "min_duration_ms"),
            ("include_unfinished=maybe", "include_unfinished"),
            ("query_hash=xyz", "query_hash"),
            ("range=2w", "range"),
            ("status=failed&status=running", "status"),
            ("after=a&before=b", "after"),
        ] {
            let err = query(raw).unwrap_err();
            assert!(err.contains(&format!("`{param}`")), "{raw}: {err}");
        }
    }

    #[test]
    fn a_long_name_term_is_refused_without_echoing_it() {
        let long = "a".repeat(MAX_NAME_TERM + 1);
        let err = query(&format!("name={long}")).unwrap_err();
        assert!(err.contains("at most 256 characters"), "{err}");
        assert!(!err.contains(&long), "the term is not echoed back");
        assert!(query(&format!("name={}", &long[1..])).is_ok());
    }
}
