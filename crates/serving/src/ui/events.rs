//! `GET /ui/events`: server-sent events (`text/event-stream`) that tell a
//! page when what it shows changed, so it fetches itself then rather than
//! every few seconds. `?job_id=ID` watches one job (its state, times and
//! the length of its log, which grows with every task recorded); without
//! it, the job list (its newest page, every job's state among them, and
//! the number of jobs).
//!
//! **One look for all watchers.** What a stream watches is looked at by
//! one producer task per watched thing (the list, or one job), once a
//! second, whatever the number of streams watching it; the producer
//! publishes the signature through a `tokio::sync::watch` channel and
//! ends when its last watcher goes (or the job ended, or the server
//! stops). A stream sends `change` when the signature it last sent
//! differs (the first event at once, so a page knows the stream is live)
//! and `done` when the watched job has ended and its log is complete; a
//! comment every 15 s keeps proxies from closing an idle stream. The
//! framing is axum's `Sse`, not ours.
//!
//! **Bounds:** each server has its own [`EventHub`]: at most
//! [`MAX_STREAMS`] streams, at most [`MAX_STREAMS_PER_CLIENT`] from one
//! client (`clients::Client`); past the client's share a 429, past the
//! server's a 503, both with `Retry-After`, and the page falls back to
//! fetching itself every few seconds, as it does without scripts'
//! `EventSource`. A stream holds nothing between events but the last
//! signature it sent, and ends when its client goes or the server stops.
//! The route is a page's (`auth`: the sign-in cookie or the token) and,
//! like every page, outside the CORS layer.

use crate::clients::{Client, Refused, Share, Shares};
use crate::params::Params;
use crate::source::JobSource;
use crate::ui::Ui;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use bjh_store::query::{JobFacts, ListQuery};
use http::{Extensions, StatusCode, header};
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Streams one server serves at once.
pub const MAX_STREAMS: usize = 256;

/// Streams one client may hold (a browser holds one a tab).
pub const MAX_STREAMS_PER_CLIENT: usize = 16;

/// How often a producer looks at what it watches.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Jobs of the list's newest page the list's producer watches.
pub const WATCHED_JOBS: usize = 100;

/// What a producer saw: the signature of what it watches, and whether the
/// watched job has ended with its log complete (nothing more will change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    signature: u64,
    ended: bool,
}

/// The list, or one job.
pub type Watched = Option<String>;

/// One server's event streams: their shares and the producers they read.
pub struct EventHub {
    streams: Arc<Shares>,
    stopping: CancellationToken,
    producers: parking_lot::Mutex<HashMap<Watched, watch::Sender<Option<Look>>>>,
    looks: prometheus::IntCounter,
}

impl EventHub {
    /// A hub whose streams end when `stopping` is cancelled; each look a
    /// producer takes is counted in `looks`.
    pub fn new(stopping: CancellationToken, looks: prometheus::IntCounter) -> Arc<Self> {
        Arc::new(Self {
            streams: Shares::new(MAX_STREAMS, MAX_STREAMS_PER_CLIENT),
            stopping,
            producers: parking_lot::Mutex::new(HashMap::new()),
            looks,
        })
    }

    /// A receiver of what `watched` looks like, starting its producer when
    /// none runs.
    pub fn watch(
        self: &Arc<Self>,
        source: &Arc<dyn JobSource>,
        watched: Watched,
    ) -> watch::Receiver<Option<Look>> {
        let mut producers = self.producers.lock();
        if let Some(tx) = producers.get(&watched) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(None);
        producers.insert(watched.clone(), tx.clone());
        tokio::spawn(self.clone().produce(source.clone(), watched, tx));
        rx
    }

    /// Looks at `watched` every [`LOOK_EVERY`] while anyone watches it,
    /// until its job ended or the server stops.
    pub async fn produce(
        self: Arc<Self>,
        source: Arc<dyn JobSource>,
        watched: Watched,
        tx: watch::Sender<Option<Look>>,
    ) {
        let mut ticks = tokio::time::interval(LOOK_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.stopping.cancelled() => break,
            }
            if self.unwatched(&watched, &tx) {
                return;
            }
            let look = match &watched {
                Some(id) => job_look(&*source, id).await,
                None => Look {
                    signature: list_signature(&*source).await,
                    ended: false,
                },
            };
            self.looks.inc();
            tx.send_if_modified(|seen| {
                let new = *seen != Some(look);
                *seen = Some(look);
                new
            });
            if look.ended {
                break;
            }
        }
        let mut producers = self.producers.lock();
        if producers.get(&watched).is_some_and(|t| t.same_channel(&tx)) {
            producers.remove(&watched);
        }
    }

    /// Whether no stream watches `watched` any more: then its producer is
    /// removed (under the lock a new watcher takes, so none is left
    /// waiting on a producer that ended).
    pub fn unwatched(&self, watched: &Watched, tx: &watch::Sender<Option<Look>>) -> bool {
        let mut producers = self.producers.lock();
        if tx.receiver_count() > 0 {
            return false;
        }
        if producers.get(watched).is_some_and(|t| t.same_channel(tx)) {
            producers.remove(watched);
        }
        true
    }

    /// Streams open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.streams.held()
    }
}

/// What a stream watches: one job, or (without) the list.
#[derive(serde::Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Watch {
    /// The job watched; without, the list.
    job_id: Option<String>,
}

/// `GET /ui/events`.
pub async fn events(
    State(ui): State<Ui>,
    extensions: Extensions,
    Params { value: watch, .. }: Params<Watch>,
) -> Response {
    let hub = ui.hub.clone();
    let share = match hub.streams.take(Client::of_request(&extensions)) {
        Ok(share) => share,
        Err(Refused::Client) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "30")],
                "this client holds its share of event streams: the page refreshes itself instead",
            )
                .into_response();
        }
        Err(Refused::Server) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "30")],
                "too many event streams: the page refreshes itself instead",
            )
                .into_response();
        }
    };
    let following = Following {
        rx: hub.watch(&ui.source, watch.job_id),
        last: None,
        done: false,
        stopping: hub.stopping.clone(),
        _share: share,
    };
    let stream = futures::stream::unfold(following, |mut f| async move {
        let event = f.next().await?;
        Some((Ok::<Event, std::convert::Infallible>(event), f))
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
pub struct Following {
    rx: watch::Receiver<Option<Look>>,
    /// The signature last sent.
    last: Option<u64>,
    /// `done` was sent: the stream ends.
    done: bool,
    stopping: CancellationToken,
    _share: Share,
}

impl Following {
    /// The next event: a change, or the end of the watched job; `None`
    /// ends the stream (done, the producer gone, the server stopping).
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if self.done {
                return None;
            }
            let seen = *self.rx.borrow_and_update();
            if let Some(look) = seen {
                let first = self.last.is_none();
                if self.last != Some(look.signature) {
                    self.last = Some(look.signature);
                    if !look.ended || first {
                        return Some(
                            Event::default()
                                .event("change")
                                .data(look.signature.to_string()),
                        );
                    }
                }
                if look.ended {
                    self.done = true;
                    return Some(Event::default().event("done").data("ended"));
                }
            }
            tokio::select! {
                changed = self.rx.changed() => changed.ok()?,
                () = self.stopping.cancelled() => return None,
            }
        }
    }
}

/// What the job list shows, as one number.
pub async fn list_signature(source: &dyn JobSource) -> u64 {
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
/// with its log complete.
pub async fn job_look(source: &dyn JobSource, job_id: &str) -> Look {
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
    Look {
        signature: h.finish(),
        ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::DiskSource;
    use bjh_metrics::HistoryMetrics;
    use bjh_store::LogStore;

    fn hub_over_empty_dir() -> (Arc<EventHub>, Arc<dyn JobSource>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LogStore::new(
            dir.path(),
            Arc::new(HistoryMetrics::unregistered()),
        ));
        store.rescan();
        let looks = prometheus::IntCounter::new("looks", "looks").unwrap();
        let hub = EventHub::new(CancellationToken::new(), looks);
        (hub, Arc::new(DiskSource::new(store)), dir)
    }

    #[tokio::test(start_paused = true)]
    async fn many_streams_share_one_look_and_all_end_when_the_server_stops() {
        let (hub, source, _dir) = hub_over_empty_dir();
        let mut streams = Vec::new();
        for i in 0..10u8 {
            let share = hub
                .streams
                .take(Client::of(std::net::IpAddr::from([10, 0, 0, i])))
                .unwrap();
            streams.push(Following {
                rx: hub.watch(&source, None),
                last: None,
                done: false,
                stopping: hub.stopping.clone(),
                _share: share,
            });
        }
        for s in &mut streams {
            assert!(s.next().await.is_some(), "the first event at once");
        }
        // Ten seconds of ten streams: one producer's looks, not a hundred.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let looks = hub.looks.get();
        assert!((10..=12).contains(&looks), "{looks} looks");
        assert_eq!(hub.producers.lock().len(), 1);
        hub.stopping.cancel();
        for s in &mut streams {
            assert!(
                s.next().await.is_none(),
                "a stream ends when the server stops"
            );
        }
        drop(streams);
        assert_eq!(hub.open(), 0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(hub.producers.lock().is_empty(), "the producer ended too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_producer_ends_with_its_last_watcher() {
        let (hub, source, _dir) = hub_over_empty_dir();
        let rx = hub.watch(&source, Some("nobody".into()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(hub.producers.lock().len(), 1);
        drop(rx);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(hub.producers.lock().is_empty());
    }
}
