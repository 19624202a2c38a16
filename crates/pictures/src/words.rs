//! How numbers and lengths of time are written, one way for the pages and
//! the pictures (the timeline's ticks and bars say what the job page says).

/// `850 ms`, `1.24 s`, `2 min 05 s`, `1 h 02 min`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.2} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms / 1_000 % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A length of time known to the nanosecond: under a millisecond in µs
/// (`420 µs`, never `0 ms`), under a microsecond in ns; from a millisecond
/// on, as `duration` writes it.
pub fn duration_ns(nanos: u64) -> String {
    match nanos {
        0..1_000 => format!("{nanos} ns"),
        1_000..1_000_000 => format!("{} µs", nanos / 1_000),
        _ => duration(nanos / 1_000_000),
    }
}

/// `950`, `20.0 K`, `1.50 M`.
pub fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} M", n as f64 / 1e6),
        _ => format!("{:.2} G", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(1_240), "1.24 s");
        assert_eq!(duration(125_000), "2 min 05 s");
        assert_eq!(duration(3_720_000), "1 h 02 min");
        assert_eq!(duration_ns(420_000), "420 µs");
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(2_400_000), duration(2));
        assert_eq!(count(950), "950");
        assert_eq!(count(20_000), "20.0 K");
        assert_eq!(count(1_500_000), "1.50 M");
    }
}
