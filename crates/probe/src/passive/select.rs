//! Weighted selection: one member drawn in proportion to its routing weight.
//!
//! [`pick`] chooses from a uniform random number the caller passes in, so that tests (and any
//! embedder with its own randomness) stay deterministic; [`pick_with`] draws that number from a
//! [`rand::Rng`].

use rand::RngExt;

use crate::target::TargetId;

/// Picks one member in proportion to its weight.
///
/// `random` is a uniform random number in `[0, 1)`; passing it in keeps the choice
/// deterministic under test. Values outside the range are clamped into it, and NaN counts as 0,
/// so no input panics.
///
/// Members whose weight is zero, negative or not finite are skipped: an ejected member has weight
/// 0 (see [`OutlierDetector::weights`](crate::passive::outlier::OutlierDetector::weights)).
/// Returns `None` when no member has a positive weight.
pub fn pick(members: &[(TargetId, f64)], random: f64) -> Option<&TargetId> {
    let i = pick_index(members.iter().map(|&(_, w)| w), random)?;
    Some(&members[i].0)
}

/// [`pick`] with the random number drawn from `rng`.
pub fn pick_with<'a, R>(members: &'a [(TargetId, f64)], rng: &mut R) -> Option<&'a TargetId>
where
    R: rand::Rng + ?Sized,
{
    pick(members, rng.random::<f64>())
}

/// The index of the weight [`pick`] would choose among `weights`.
///
/// The cost is two passes over the weights; for the pool sizes of a service's upstreams (tens to
/// hundreds) that is cheaper than keeping a cumulative table up to date as weights ramp.
pub fn pick_index<I>(weights: I, random: f64) -> Option<usize>
where
    I: Iterator<Item = f64> + Clone,
{
    let usable = |w: f64| w.is_finite() && w > 0.0;
    let total: f64 = weights.clone().filter(|&w| usable(w)).sum();
    if !(total > 0.0 && total.is_finite()) {
        return None;
    }
    let random = if random.is_nan() {
        0.0
    } else {
        random.clamp(0.0, 1.0)
    };
    let point = random * total;
    let mut cumulative = 0.0;
    let mut last = None;
    for (i, w) in weights.enumerate() {
        if !usable(w) {
            continue;
        }
        cumulative += w;
        if point < cumulative {
            return Some(i);
        }
        last = Some(i);
    }
    // Only reached when rounding left `point` at (or a hair above) the running sum, e.g. for
    // `random` clamped to 1: the last usable member owns the top of the range.
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    #[test]
    fn pick_follows_cumulative_weights() {
        let members = [(id("a"), 1.0), (id("b"), 0.0), (id("c"), 3.0)];
        let picked = |r: f64| pick(&members, r).map(TargetId::as_str);
        assert_eq!(picked(0.0), Some("a"));
        assert_eq!(picked(0.2499), Some("a"));
        assert_eq!(picked(0.25), Some("c"), "b has weight 0 and is skipped");
        assert_eq!(picked(0.9999), Some("c"));
        // Out-of-range inputs are clamped, not trusted.
        assert_eq!(picked(-3.0), Some("a"));
        assert_eq!(picked(f64::NAN), Some("a"));
        assert_eq!(picked(1.0), Some("c"));
        assert_eq!(picked(7.0), Some("c"));
    }

    #[test]
    fn pick_distribution_matches_weights() {
        // An evenly spaced grid of "random" numbers: each member's count is exactly its share.
        let members = [
            (id("a"), 1.0),
            (id("ejected"), 0.0),
            (id("warming"), 0.25),
            (id("b"), 1.0),
            (id("bad"), f64::NAN),
            (id("neg"), -1.0),
            (id("c"), 1.75),
        ];
        let n = 4000;
        let mut counts = std::collections::BTreeMap::<&str, u32>::new();
        for i in 0..n {
            let r = (f64::from(i) + 0.5) / f64::from(n);
            let picked = pick(&members, r).unwrap();
            *counts.entry(picked.as_str()).or_default() += 1;
        }
        let expected = [("a", 1000), ("b", 1000), ("c", 1750), ("warming", 250)];
        assert_eq!(counts.into_iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn pick_without_usable_weight_is_none() {
        assert_eq!(pick(&[], 0.5), None);
        let members = [(id("a"), 0.0), (id("b"), f64::INFINITY)];
        assert_eq!(pick(&members, 0.5), None);
    }

    #[test]
    fn pick_with_an_rng_stays_in_proportion() {
        let members = [(id("a"), 1.0), (id("b"), 3.0)];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let b = (0..10_000)
            .filter(|_| pick_with(&members, &mut rng).unwrap().as_str() == "b")
            .count();
        assert!((7_300..7_700).contains(&b), "b picked {b} times of 10000");
    }
}
