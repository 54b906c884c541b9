//! A target's day of transitions, packed into one blob that every write appends to.
//!
//! A transition as a row of its own cost about 90 bytes in SQLite: the row with its texts, and
//! two indexes over it (by target, by time). A fleet whose targets change state a few times a
//! day spent most of its history on them (about 20 GB a year for 100k targets). Packed, a
//! transition takes about 8 bytes: the states are indexes, the texts (cause, reason, detail)
//! are ids in the `texts` table, where each distinct text is kept once, and only the row of
//! the target's day is indexed.
//!
//! Format: records one after another, each
//! - a tag byte: bits 6 and 7 the record's version (1), bits 3 to 5 the state left and bits 0
//!   to 2 the state entered, as indexes in [`STATES`];
//! - the milliseconds since the day's midnight (UTC), a LEB128 varint;
//! - the cause's text id, then the reason's and the detail's plus one (0 when there is none),
//!   varints.
//!
//! Records are whole bytes and each says when it happened, so a write appends its records to
//! the row inside the database without reading it, and two members writing one target's day
//! (a takeover) both keep theirs. Reading sorts them by time.

use probe::health::HealthState;

use super::codec::{ByteReader, CodecError, STATES, put_varint, state_index};

/// The tag's version bits.
const VERSION: u8 = 1 << 6;

/// One packed transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    /// Milliseconds since the day's midnight.
    pub ms_of_day: u32,
    /// The state left.
    pub from: HealthState,
    /// The state entered.
    pub to: HealthState,
    /// The cause's text id.
    pub cause: u64,
    /// The reason's text id.
    pub reason: Option<u64>,
    /// The detail's text id.
    pub detail: Option<u64>,
}

/// Appends `event` to `out`.
pub fn encode_into(out: &mut Vec<u8>, event: &Packed) {
    // Both indexes are below 8: three bits each.
    let (from, to) = (state_index(event.from) as u8, state_index(event.to) as u8);
    out.push(VERSION | from << 3 | to);
    put_varint(out, u64::from(event.ms_of_day));
    put_varint(out, event.cause);
    put_varint(out, event.reason.map_or(0, |id| id + 1));
    put_varint(out, event.detail.map_or(0, |id| id + 1));
}

/// Unpacks a day's transitions, in time order (those of one millisecond as written).
///
/// # Errors
/// [`CodecError`] for bytes no version wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Packed>, CodecError> {
    let state = |i: u8| STATES.get(usize::from(i)).copied();
    let mut input = ByteReader::new(bytes);
    let mut out = Vec::new();
    while !input.is_done() {
        let tag = input.byte()?;
        if tag & 0xc0 != VERSION {
            return Err(CodecError::Version(tag >> 6));
        }
        let (Some(from), Some(to)) = (state(tag >> 3 & 7), state(tag & 7)) else {
            return Err(CodecError::Malformed);
        };
        let ms_of_day = input.varint_u32()?;
        if i64::from(ms_of_day) >= super::rollup::DAY_MS {
            return Err(CodecError::Malformed);
        }
        let cause = input.varint()?;
        let optional = |v: u64| v.checked_sub(1);
        let reason = optional(input.varint()?);
        let detail = optional(input.varint()?);
        out.push(Packed {
            ms_of_day,
            from,
            to,
            cause,
            reason,
            detail,
        });
    }
    out.sort_by_key(|e| e.ms_of_day);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn packed() -> impl Strategy<Value = Packed> {
        let state = (0..STATES.len()).prop_map(|i| STATES[i]);
        (
            0..86_400_000u32,
            state.clone(),
            state,
            any::<u64>(),
            proptest::option::of(0..u64::MAX),
            proptest::option::of(0..u64::MAX),
        )
            .prop_map(|(ms_of_day, from, to, cause, reason, detail)| Packed {
                ms_of_day,
                from,
                to,
                cause,
                reason,
                detail,
            })
    }

    #[test]
    fn a_transition_takes_about_eight_bytes() {
        let mut out = Vec::new();
        let down = Packed {
            ms_of_day: 13 * 3_600_000 + 17_123,
            from: HealthState::Up,
            to: HealthState::Down,
            cause: 3,
            reason: Some(4),
            detail: Some(200),
        };
        encode_into(&mut out, &down);
        assert_eq!(out.len(), 1 + 4 + 1 + 1 + 2);
        assert_eq!(decode(&out).unwrap(), vec![down]);
    }

    #[test]
    fn appended_writes_read_back_in_time_order() {
        let at = |ms_of_day| Packed {
            ms_of_day,
            from: HealthState::Up,
            to: HealthState::Down,
            cause: 1,
            reason: None,
            detail: None,
        };
        // A takeover: the member that had the target writes its last one after the new one.
        let mut row = Vec::new();
        encode_into(&mut row, &at(500));
        let mut older = Vec::new();
        encode_into(&mut older, &at(100));
        row.extend(older);
        assert_eq!(decode(&row).unwrap(), vec![at(100), at(500)]);
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        assert_eq!(decode(&[]).unwrap(), vec![]);
        assert_eq!(decode(&[0x80]), Err(CodecError::Version(2)));
        // A state index past the five.
        assert_eq!(decode(&[0x47, 0, 1, 0, 0]), Err(CodecError::Malformed));
        // Cut short.
        assert_eq!(decode(&[0x4c, 0x80]), Err(CodecError::Malformed));
        // Past the day's end.
        let mut out = vec![0x4c];
        put_varint(&mut out, 86_400_000);
        out.extend([1, 0, 0]);
        assert_eq!(decode(&out), Err(CodecError::Malformed));
    }

    proptest! {
        #[test]
        fn any_day_round_trips(events in proptest::collection::vec(packed(), 0..20)) {
            let mut out = Vec::new();
            for e in &events {
                encode_into(&mut out, e);
            }
            let mut sorted = events.clone();
            sorted.sort_by_key(|e| e.ms_of_day);
            prop_assert_eq!(decode(&out).unwrap(), sorted);
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
