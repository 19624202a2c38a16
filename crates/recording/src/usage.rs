//! What a job's footer says of its use of the cluster, gathered by the
//! writer as the job's task reports arrive: each attempt's span and the
//! executor that ran it ([`Spans`]), made into the slot time
//! (`format::usage`) and its part by executor once the final `/stages`
//! answer says how many slots each task held; and the job's usage tags,
//! the values of the session-config keys `--usage-tags` names.

use bjh_format::record::JobEnd;
use std::collections::BTreeMap;

/// The longest tag value kept (in characters); longer ones are cut.
const MAX_TAG_VALUE: usize = 256;

/// One task attempt as the footer's slot time needs it.
pub(crate) struct Span {
    pub(crate) stage_id: u32,
    pub(crate) task_id: u32,
    /// Index into [`Spans::executors`].
    pub(crate) executor: u32,
    pub(crate) ms: u64,
    pub(crate) failed: bool,
}

/// A job's attempts so far, and the executors that ran them.
#[derive(Default)]
pub(crate) struct Spans {
    pub(crate) list: Vec<Span>,
    pub(crate) executors: Vec<String>,
}

impl Spans {
    pub(crate) fn executor(&mut self, id: &str) -> u32 {
        match self.executors.iter().rposition(|e| e == id) {
            Some(i) => i as u32,
            None => {
                self.executors.push(id.to_string());
                (self.executors.len() - 1) as u32
            }
        }
    }
}

/// Executors a footer's `busy_by_executor` names at most.
const MAX_FOOTER_EXECUTORS: usize = 10_000;

/// Attempts remembered per job for its slot time (24 bytes each).
pub(crate) const MAX_SPANS: usize = 4_000_000;

/// The values of `keys` in the job's (redacted) `/config` answer.
pub(crate) fn usage_tags(keys: &[String], config: &str) -> BTreeMap<String, String> {
    if keys.is_empty() {
        return Default::default();
    }
    let Ok(map) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(config) else {
        return Default::default();
    };
    keys.iter()
        .filter_map(|k| {
            let value = match map.get(k)? {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some((k.clone(), value.chars().take(MAX_TAG_VALUE).collect()))
        })
        .collect()
}

/// The slot time of `spans`, each attempt's slots read from the job's final
/// `/stages` answer (see `format::usage`), and its part by executor.
pub(crate) fn slot_usage(
    spans: &Spans,
    end: &JobEnd,
) -> (bjh_format::usage::SlotUsage, BTreeMap<String, u64>) {
    let stages = bjh_format::stages::StagesAnswer::parse(end.stages.get().as_bytes());
    let slots = bjh_format::stages::task_slots(&stages.stages);
    let mut usage = bjh_format::usage::SlotUsage::default();
    let mut by_executor = vec![0u64; spans.executors.len()];
    for s in &spans.list {
        let held = slots.get(&(s.stage_id, s.task_id)).copied().unwrap_or(1);
        let ms = usage.add_span(s.ms, held, s.failed);
        if let Some(e) = by_executor.get_mut(s.executor as usize) {
            *e = e.saturating_add(ms);
        }
    }
    let by_executor = if spans.executors.len() <= MAX_FOOTER_EXECUTORS {
        spans.executors.iter().cloned().zip(by_executor).collect()
    } else {
        Default::default()
    };
    (usage, by_executor)
}
