//! Quorum across vantage points: the verdict of a target that several members probe.

use crate::health::state::HealthState;

/// The verdict of `votes` (one per member probing the target, its own state machine's state)
/// when `quorum` of them must agree: DOWN when at least `quorum` say DOWN, UP when at least
/// `quorum` serve (DEGRADED when fewer than `quorum` of those say UP), PROBING otherwise.
///
/// DOWN is weighed first: with `quorum` at most half the members both could hold, and a target
/// that enough vantage points cannot reach does not serve everyone. A member cut off from a
/// target therefore cannot take it DOWN alone, and one that cannot see a failure cannot keep it
/// UP alone. Votes in MAINTENANCE or PROBING count for nothing.
pub fn decide(votes: impl IntoIterator<Item = HealthState>, quorum: usize) -> HealthState {
    let quorum = quorum.max(1);
    let (mut down, mut up, mut degraded) = (0, 0, 0);
    for vote in votes {
        match vote {
            HealthState::Down => down += 1,
            HealthState::Up => up += 1,
            HealthState::Degraded => degraded += 1,
            HealthState::Probing | HealthState::Maintenance => {}
        }
    }
    if down >= quorum {
        HealthState::Down
    } else if up >= quorum {
        HealthState::Up
    } else if up + degraded >= quorum {
        HealthState::Degraded
    } else {
        HealthState::Probing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HealthState::*;

    #[test]
    fn one_vantage_point_cannot_decide_a_quorum_of_two() {
        assert_eq!(decide([Down, Up, Up], 2), Up);
        assert_eq!(decide([Down, Down, Up], 2), Down);
        assert_eq!(decide([Down, Probing, Probing], 2), Probing);
        assert_eq!(decide([Up, Probing, Maintenance], 2), Probing);
    }

    #[test]
    fn serving_votes_give_up_or_degraded() {
        assert_eq!(decide([Up, Degraded, Down], 2), Degraded);
        assert_eq!(decide([Up, Up, Degraded], 2), Up);
        assert_eq!(decide([Degraded], 1), Degraded);
    }

    #[test]
    fn a_quorum_of_one_is_the_first_verdict_weighed_down_first() {
        assert_eq!(decide([Down, Up], 1), Down);
        assert_eq!(decide([Up], 0), Up);
        assert_eq!(decide([], 1), Probing);
    }
}
