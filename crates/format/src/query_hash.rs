//! The query hash: one number per query, equal for two runs of the same
//! query, so history can group a recurring query's runs.
//!
//! It hashes the job's **logical** plan as the scheduler printed it, each
//! line trimmed of surrounding whitespace. The logical plan is what the user
//! asked, resolved against the tables' schemas; the physical plan also
//! carries what changes between runs of the same query: the files listed
//! under a table, partition counts, and the adaptive planner's stage ids
//! and progress. Literals are kept, so `WHERE day = '2026-11-30'` and
//! `WHERE day = '2026-12-01'` are two queries (group a nightly job's runs
//! by its name). The hash is FNV-1a (64 bits), a fixed function, so it is
//! the same in every process and release; it is shown as 16 hex digits.

/// The hash of a logical plan's text; `None` for an empty plan (a job that
/// never got as far as planning has no query hash).
pub fn query_hash(logical_plan: &str) -> Option<u64> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut any = false;
    for line in logical_plan
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        for &b in line.as_bytes().iter().chain(b"\n") {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        any = true;
    }
    // 0 means "unknown" wherever a hash is stored.
    any.then_some(hash.max(1))
}

/// The hash as shown in the API: 16 lowercase hex digits.
pub fn hash_text(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Parses [`hash_text`]'s form (any case).
pub fn parse_hash(text: &str) -> Option<u64> {
    if text.len() != 16 {
        return None;
    }
    u64::from_str_radix(text, 16).ok().filter(|&h| h != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_plans_hash_equal_and_others_differ() {
        let a = "Projection: t.k\n  Filter: t.k > Int64(10)\n    TableScan: t";
        let reindented = "Projection: t.k  \n    Filter: t.k > Int64(10)\n  TableScan: t\n";
        let other = "Projection: t.k\n  Filter: t.k > Int64(11)\n    TableScan: t";
        assert_eq!(query_hash(a), query_hash(reindented));
        assert_ne!(query_hash(a), query_hash(other));
        assert_eq!(query_hash("  \n"), None);
        // FNV-1a 64 of "a\n", computed apart (Python: h = offset basis;
        // for each byte, h ^= b; h = h * prime mod 2^64).
        assert_eq!(query_hash("a"), Some(0x089b_dc07_b544_e7b2));
    }

    #[test]
    fn text_round_trips() {
        let h = query_hash("TableScan: t").unwrap();
        assert_eq!(parse_hash(&hash_text(h)), Some(h));
        assert_eq!(parse_hash(&hash_text(h).to_uppercase()), Some(h));
        assert_eq!(parse_hash("xyz"), None);
        assert_eq!(parse_hash("0000000000000000"), None);
    }
}
