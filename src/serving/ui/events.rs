//! `GET /ui/events`: server-sent events (`text/event-stream`) that tell a
//! page when what it shows changed, so it fetches itself then rather than
//! every few seconds. `?job_id=ID` watches one job (its state, times and
//! the length of its log, which grows with every task recorded); without
//! it, the job list (its newest page, every job's state among them, and
//! the number of jobs).
//!
//! Each stream looks once a second and sends `change` only when the
//! signature of what it watches differs from the last one sent (the
//! first event is sent at once, so a page knows the stream is live), and
//! `done` when the watched job has ended and its log is complete; a
//! comment every 15 s keeps proxies from closing an idle stream. The
//! framing is axum's `Sse`, not ours.
//!
//! **Bounds:** at most [`MAX_STREAMS`] streams at once (more are answered
//! 503 with `Retry-After`, and the page falls back to fetching itself every
//! few seconds, as it does without scripts' `EventSource`); a stream holds
//! nothing between looks but its signature, and ends when its client goes.
//! The route is a page's (`auth`: the sign-in cookie or the token) and,
//! like every page, outside the CORS layer: another site's page cannot
//! read it.

use crate::serving::source::JobSource;
use crate::serving::ui::Ui;
use crate::store::query::{JobFacts, ListQuery};
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Streams served at once.
pub const MAX_STREAMS: usize = 64;

/// How often a stream looks at what it watches.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Jobs of the list's newest page a list stream watches.
const WATCHED_JOBS: usize = 100;

static STREAMS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(MAX_STREAMS)));

#[derive(serde::Deserialize, Default)]
pub(crate) struct Watch {
    job_id: Option<String>,
}

/// `GET /ui/events`.
pub(crate) async fn events(State(ui): State<Ui>, Query(watch): Query<Watch>) -> Response {
    let Ok(permit) = STREAMS.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "30")],
            "too many event streams: the page refreshes itself instead",
        )
            .into_response();
    };
    let mut ticks = tokio::time::interval(LOOK_EVERY);
    // A client slow to read gets the next look a second later, not a burst.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let looking = Looking {
        source: ui.source.clone(),
        job_id: watch.job_id,
        last: None,
        done: false,
        ticks,
        _permit: permit,
    };
    let stream = futures::stream::unfold(looking, |mut l| async move {
        if l.done {
            return None;
        }
        let event = l.next().await;
        Some((Ok::<Event, std::convert::Infallible>(event), l))
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}

/// One stream's state.
struct Looking {
    source: Arc<dyn JobSource>,
    job_id: Option<String>,
    /// The signature last sent.
    last: Option<u64>,
    /// `done` was sent: the stream ends.
    done: bool,
    /// When to look (the first tick at once, then every [`LOOK_EVERY`]).
    ticks: tokio::time::Interval,
    _permit: OwnedSemaphorePermit,
}

impl Looking {
    /// Waits for the next event: a change, or the end of the watched job.
    async fn next(&mut self) -> Event {
        loop {
            self.ticks.tick().await;
            let (signature, ended) = match &self.job_id {
                Some(id) => job_signature(&*self.source, id).await,
                None => (list_signature(&*self.source).await, false),
            };
            if self.last != Some(signature) {
                let first = self.last.is_none();
                self.last = Some(signature);
                if ended && !first {
                    // The change that ended it, then the end.
                    self.done = true;
                    return Event::default().event("done").data("ended");
                }
                return Event::default().event("change").data(signature.to_string());
            }
            if ended {
                self.done = true;
                return Event::default().event("done").data("ended");
            }
        }
    }
}

/// What the job list shows, as one number.
async fn list_signature(source: &dyn JobSource) -> u64 {
    let mut h = DefaultHasher::new();
    let query = ListQuery {
        limit: Some(WATCHED_JOBS),
        include_unfinished: true,
        ..ListQuery::default()
    };
    match source.list(&query, None).await {
        Ok(page) => {
            page.total.hash(&mut h);
            for row in &page.rows {
                row.entry.hash(&mut h);
            }
        }
        Err(e) => e.to_string().hash(&mut h),
    }
    match source.counts(true).await {
        Ok(counts) => counts.hash(&mut h),
        Err(e) => e.to_string().hash(&mut h),
    }
    h.finish()
}

/// What a job's page shows, as one number, and whether the job has ended
/// with its log complete (nothing more will change).
async fn job_signature(source: &dyn JobSource, job_id: &str) -> (u64, bool) {
    let mut h = DefaultHasher::new();
    let facts = source.facts(job_id).await.ok().flatten();
    let state = facts.as_ref().map(|f| f.state());
    if let Some(f) = &facts {
        (f.state(), f.start_time(), f.end_time(), f.job_name()).hash(&mut h);
    }
    let log = source.log_of(job_id);
    if let Some((header, log)) = &log {
        (header.state, header.end_time, log.current_len()).hash(&mut h);
    }
    let ended = state.is_some_and(|s| !s.is_unfinished())
        && log
            .as_ref()
            .is_some_and(|(header, _)| !header.state.is_unfinished());
    (h.finish(), ended)
}
