//! Order statistics over small samples, as every analysis computes them.

/// The `q`-quantile (0 to 1) of `sorted` by the nearest-rank method: the
/// smallest value with at least `q` of the sample at or below it. `0` for
/// an empty sample.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `a / b`, with a zero `b` read as 1 (a ratio against nothing is the
/// value itself), rounded to two decimals.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    let r = a as f64 / b.max(1) as f64;
    (r * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        // Worked by hand: ranks ceil(q * 5) of 10, 20, 30, 40, 50.
        let v = [10, 20, 30, 40, 50];
        assert_eq!(
            [0.0, 0.25, 0.5, 0.75, 1.0].map(|q| quantile(&v, q)),
            [10, 20, 30, 40, 50]
        );
        assert_eq!(quantile(&[7], 0.5), 7);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[1, 2, 3, 4], 0.5), 2);
        assert_eq!(quantile(&[1, 2, 3, 4], 0.75), 3);
        assert_eq!(ratio(5, 0), 5.0);
        assert_eq!(ratio(1, 3), 0.33);
    }
}
