//! The metrics the scheduler prints in a stage's `?plan_format=metrics`
//! plan (`metrics=[output_rows=2.00 K, spill_count=0, elapsed_compute=3.58ms]`),
//! read back into numbers: the memory and spill of each operator for the
//! diagnosis, and every metric for the `operators` table.

use crate::analysis::diagnosis::OperatorMemory;

/// The operators' memory metrics in a `?plan_format=metrics` stages
/// response: each plan line's `metrics=[...]`, read for `spill_count`,
/// `spilled_bytes` (`spill_bytes` on the shuffle writer) and
/// `peak_mem_used`. Lines without them are left out.
pub fn operator_memory(stages_json: &[u8]) -> Vec<OperatorMemory> {
    #[derive(serde::Deserialize)]
    struct Stages {
        #[serde(default)]
        stages: Vec<Stage>,
    }
    #[derive(serde::Deserialize)]
    struct Stage {
        #[serde(deserialize_with = "crate::analysis::records::stage_id")]
        stage_id: u32,
        #[serde(default)]
        stage_plan: Option<String>,
    }
    let Ok(parsed) = serde_json::from_slice::<Stages>(stages_json) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stage in parsed.stages {
        let stage_id = stage.stage_id;
        for line in stage.stage_plan.as_deref().unwrap_or("").lines() {
            let Some(at) = line.find("metrics=[") else {
                continue;
            };
            let body = &line[at + "metrics=[".len()..];
            let body = body.rsplit_once(']').map_or(body, |(b, _)| b);
            let mut op = OperatorMemory {
                stage_id,
                operator: line
                    .trim()
                    .split([':', ','])
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
                ..Default::default()
            };
            let mut any = false;
            for pair in body.split(", ") {
                let Some((key, value)) = pair.split_once('=') else {
                    continue;
                };
                let slot = match key.trim() {
                    "spill_count" => &mut op.spill_count,
                    "spilled_bytes" | "spill_bytes" => &mut op.spilled_bytes,
                    "peak_mem_used" => &mut op.peak_mem_used,
                    _ => continue,
                };
                if let Some(v) = parse_amount(value) {
                    *slot = (*slot).max(v);
                    any = true;
                }
            }
            if any {
                out.push(op);
            }
        }
    }
    out
}

/// One metric of one operator of a stage's metrics plan.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorMetric {
    /// The stage.
    pub stage_id: u32,
    /// The operator's position in the stage plan (0 is the plan's root).
    pub position: u32,
    /// The operator's name (`SortExec`).
    pub operator: String,
    /// The metric's name (`output_rows`, `spill_bytes`, `elapsed_compute`).
    pub metric: String,
    /// Its value: a count, bytes, or for a time nanoseconds.
    pub value: f64,
    /// `count`, `bytes` or `ns`.
    pub unit: &'static str,
}

/// Every metric of every operator in the stored `?plan_format=metrics`
/// stages answer; metrics whose value does not parse are left out.
pub fn operator_metrics(stages_json: &[u8]) -> Vec<OperatorMetric> {
    #[derive(serde::Deserialize)]
    struct Stages {
        #[serde(default)]
        stages: Vec<Stage>,
    }
    #[derive(serde::Deserialize)]
    struct Stage {
        #[serde(deserialize_with = "crate::analysis::records::stage_id")]
        stage_id: u32,
        #[serde(default)]
        stage_plan: Option<String>,
    }
    let Ok(parsed) = serde_json::from_slice::<Stages>(stages_json) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stage in parsed.stages {
        for (position, line) in stage
            .stage_plan
            .as_deref()
            .unwrap_or("")
            .lines()
            .enumerate()
        {
            let Some(at) = line.find("metrics=[") else {
                continue;
            };
            let body = &line[at + "metrics=[".len()..];
            let body = body.rsplit_once(']').map_or(body, |(b, _)| b);
            let operator = line.trim().split([':', ',']).next().unwrap_or("").trim();
            for pair in body.split(", ") {
                let Some((key, value)) = pair.split_once('=') else {
                    continue;
                };
                let parsed = parse_duration_ns(value).map(|v| (v, "ns")).or_else(|| {
                    let unit = if value.trim_end().ends_with('B') {
                        "bytes"
                    } else {
                        "count"
                    };
                    parse_amount(value).map(|v| (v as f64, unit))
                });
                if let Some((value, unit)) = parsed {
                    out.push(OperatorMetric {
                        stage_id: stage.stage_id,
                        position: position as u32,
                        operator: operator.to_string(),
                        metric: key.trim().to_string(),
                        value,
                        unit,
                    });
                }
            }
        }
    }
    out
}

/// A time as DataFusion prints it (`2ns`, `140.88µs`, `3.58ms`, `1.20s`),
/// in nanoseconds.
fn parse_duration_ns(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, scale) = [
        ("ns", 1.0),
        ("µs", 1e3),
        ("us", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))?;
    let number: f64 = number.trim().parse().ok()?;
    Some(number * scale)
}

/// A metric value as DataFusion prints it: `123`, `1.5 K` (counts), or
/// `2.0 MB` (bytes, binary multiples).
fn parse_amount(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" => 1e3,
        "M" => 1e6,
        "KB" | "KiB" => 1024.0,
        "MB" | "MiB" => 1024.0 * 1024.0,
        "GB" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TB" | "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * scale).round() as u64)
}
