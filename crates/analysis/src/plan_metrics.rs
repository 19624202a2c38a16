//! The metrics the scheduler prints in a stage's `?plan_format=metrics`
//! plan (`metrics=[output_rows=2.00 K, spill_count=0, elapsed_compute=3.58ms]`),
//! read back into numbers: the memory and spill of each operator for the
//! diagnosis, and every metric for the `operators` table.

use bjh_format::stages::StagesAnswer;

/// One operator's memory and spill metrics, from a metrics plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorMemory {
    /// Stage.
    pub stage_id: u32,
    /// Operator name (e.g. `SortExec`).
    pub operator: String,
    /// Spills.
    pub spill_count: u64,
    /// Bytes spilled.
    pub spilled_bytes: u64,
    /// Peak memory (bytes).
    pub peak_mem_used: u64,
}

/// The operators' memory metrics in a `?plan_format=metrics` stages
/// response: each plan line's `metrics=[...]`, read for `spill_count`,
/// `spilled_bytes` (`spill_bytes` on the shuffle writer) and
/// `peak_mem_used`. Lines without them are left out.
pub fn operator_memory(stages_json: &[u8]) -> Vec<OperatorMemory> {
    // Per plan line (stage, position), the largest value of each metric.
    let mut out: Vec<((u32, u32), OperatorMemory)> = Vec::new();
    for m in operator_metrics(stages_json) {
        if m.unit == "ns" || memory_field(&mut OperatorMemory::default(), &m.metric).is_none() {
            continue;
        }
        let key = (m.stage_id, m.position);
        if out.last().is_none_or(|(k, _)| *k != key) {
            out.push((
                key,
                OperatorMemory {
                    stage_id: m.stage_id,
                    operator: m.operator.clone(),
                    ..Default::default()
                },
            ));
        }
        let op = &mut out.last_mut().expect("pushed above").1;
        if let Some(field) = memory_field(op, &m.metric) {
            *field = (*field).max(m.value.round() as u64);
        }
    }
    out.into_iter().map(|(_, op)| op).collect()
}

/// The field of `op` that `metric` fills, if it is a memory metric.
fn memory_field<'a>(op: &'a mut OperatorMemory, metric: &str) -> Option<&'a mut u64> {
    match metric {
        "spill_count" => Some(&mut op.spill_count),
        "spilled_bytes" | "spill_bytes" => Some(&mut op.spilled_bytes),
        "peak_mem_used" => Some(&mut op.peak_mem_used),
        _ => None,
    }
}

/// One operator of a stage as the profile shows it: what the stage's
/// metrics plan says of it. The scheduler combines each operator's metrics
/// over the stage's tasks before it prints the plan, so these are the
/// operator's totals for the stage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorProfile {
    /// Rows the operator produced.
    pub output_rows: Option<u64>,
    /// Its `elapsed_compute` (ns): time in the operator itself.
    pub compute_ns: Option<u64>,
    /// Spills.
    pub spill_count: u64,
    /// Bytes spilled (`spilled_bytes`, `spill_bytes` on the shuffle writer).
    pub spilled_bytes: u64,
    /// Peak memory (bytes).
    pub peak_mem_used: Option<u64>,
}

/// The profile of each line of a stage's metrics `plan`: its operators in
/// pre-order (the root first), one per line; a line without metrics has an
/// empty profile.
pub fn operator_profiles(plan: &str) -> Vec<OperatorProfile> {
    let mut out = vec![OperatorProfile::default(); plan.lines().count()];
    for m in plan_metrics(std::iter::once((0, plan))) {
        let p = &mut out[m.position as usize];
        let v = m.value.round() as u64;
        match (m.metric.as_str(), m.unit) {
            ("output_rows", "count") => *p.output_rows.get_or_insert(0) += v,
            ("elapsed_compute", "ns") => *p.compute_ns.get_or_insert(0) += v,
            ("spill_count", "count") => p.spill_count += v,
            ("spilled_bytes" | "spill_bytes", _) => p.spilled_bytes += v,
            ("peak_mem_used", _) => p.peak_mem_used = Some(p.peak_mem_used.unwrap_or(0).max(v)),
            _ => {}
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
    let answer = StagesAnswer::parse(stages_json);
    plan_metrics(answer.stages.iter().map(|s| (s.stage_id, s.plan())))
}

/// Every metric of every operator in each stage's metrics plan, given as
/// (stage id, plan text).
pub fn plan_metrics<'a>(stages: impl Iterator<Item = (u32, &'a str)>) -> Vec<OperatorMetric> {
    let mut out = Vec::new();
    for (stage_id, plan) in stages {
        for (position, line) in plan.lines().enumerate() {
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
                        stage_id,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_per_plan_line_with_the_lines_figures() {
        let plan = "SortShuffleWriterExec: partitioning=Hash([k@0], 16), metrics=[output_rows=2.00 K, \
                    spill_bytes=3.0 MB, spill_count=2, repart_time=140.88µs, peak_mem_used=1.5 MB]\n  \
                    FilterExec: a@0 > 1\n    \
                    DataSourceExec: file_groups={1 group}, metrics=[output_rows=2000, elapsed_compute=3.58ms]\n";
        let got = operator_profiles(plan);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].output_rows, Some(2_000));
        assert_eq!(
            got[0].compute_ns, None,
            "repart_time is not elapsed_compute"
        );
        assert_eq!((got[0].spill_count, got[0].spilled_bytes), (2, 3 << 20));
        assert_eq!(got[0].peak_mem_used, Some(3 << 19));
        assert_eq!(got[1], OperatorProfile::default());
        assert_eq!(got[2].compute_ns, Some(3_580_000));
        assert!(operator_profiles("").is_empty());
    }

    #[test]
    fn every_metric_of_a_real_plan_line_is_read_with_its_unit() {
        // A line as the scheduler printed it in a real run.
        let plan = "SortShuffleWriterExec: partitioning=Hash([k@0], 16), metrics=[output_rows=2.00 K, \
                    input_rows=2.00 K, spill_bytes=0, spill_count=0, repart_time=140.88µs, \
                    spill_time=2ns, write_time=1.20s, peak_mem_used=1.5 MB]\n  \
                    DataSourceExec: file_groups={1 group}, metrics=[output_rows=2000, elapsed_compute=3.58ms]\n";
        let stages = serde_json::json!({"stages": [{"stage_id": "3", "stage_plan": plan}]});
        let got = operator_metrics(stages.to_string().as_bytes());
        let find = |op: &str, m: &str| {
            got.iter()
                .find(|x| x.operator == op && x.metric == m)
                .map(|x| (x.value, x.unit, x.position, x.stage_id))
        };
        assert_eq!(
            find("SortShuffleWriterExec", "output_rows"),
            Some((2000.0, "count", 0, 3))
        );
        assert_eq!(
            find("SortShuffleWriterExec", "spill_bytes"),
            Some((0.0, "count", 0, 3))
        );
        assert_eq!(
            find("SortShuffleWriterExec", "repart_time").map(|x| x.1),
            Some("ns")
        );
        assert!((find("SortShuffleWriterExec", "repart_time").unwrap().0 - 140_880.0).abs() < 1e-6);
        assert_eq!(
            find("SortShuffleWriterExec", "spill_time"),
            Some((2.0, "ns", 0, 3))
        );
        assert_eq!(
            find("SortShuffleWriterExec", "write_time"),
            Some((1.2e9, "ns", 0, 3))
        );
        assert_eq!(
            find("SortShuffleWriterExec", "peak_mem_used"),
            Some((1_572_864.0, "bytes", 0, 3))
        );
        assert_eq!(
            find("DataSourceExec", "elapsed_compute"),
            Some((3_580_000.0, "ns", 1, 3))
        );
        assert_eq!(got.len(), 10);
        assert!(operator_metrics(b"{").is_empty());
    }
}
