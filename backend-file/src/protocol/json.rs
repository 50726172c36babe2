//! A state's JSON, written by hand: byte for byte what `serde_json::to_writer` writes for it (the
//! tests hold the two together), in a third of the instructions. Every step writes its lock's
//! state, and serde's field-by-field path was the largest single item of a `file://` cycle
//! (docs/overhead.md, twenty-eighth pass). Reading stays serde's.

use super::state::{Entry, State};

/// Appends the JSON of `state` to `out`.
pub(crate) fn write_state(out: &mut Vec<u8>, state: &State) {
    number(out, b"{\"format\":", u64::from(state.format));
    text(out, b",\"segment\":", &state.segment);
    text(out, b",\"boot\":", &state.boot);
    number(out, b",\"last_token\":", state.last_token);
    out.extend_from_slice(b",\"entries\":[");
    for (i, entry) in state.entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_entry(out, entry);
    }
    out.extend_from_slice(b"]}");
}

/// Appends the JSON of `entry` (its fields in their order in [`Entry`], `value` and `grant` left
/// out when empty, as their `serde` attributes say).
fn write_entry(out: &mut Vec<u8>, entry: &Entry) {
    text(out, b"{\"id\":", &entry.id);
    text(out, b",\"owner\":", &entry.owner);
    number(out, b",\"pid\":", u64::from(entry.pid));
    text(out, b",\"host\":", &entry.host);
    text(out, b",\"role\":", &entry.role);
    if !entry.value.is_empty() {
        text(out, b",\"value\":", &entry.value);
    }
    number(out, b",\"since_ns\":", entry.since_ns);
    number(out, b",\"ttl_ns\":", entry.ttl_ns);
    if let Some(grant) = entry.grant {
        number(out, b",\"grant\":{\"token\":", grant.token);
        out.push(b'}');
    }
    out.push(b'}');
}

/// `key` (the JSON before the value: a separator, the field's name and its colon), then `n`.
fn number(out: &mut Vec<u8>, key: &[u8], n: u64) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `key` (as for [`number`]), then `s` as a JSON string: copied as it is when nothing in it needs
/// an escape (the common case: ids, host names, roles), else escaped by serde_json itself.
fn text(out: &mut Vec<u8>, key: &[u8], s: &str) {
    out.extend_from_slice(key);
    if plain(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a `Vec` never fails.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Whether no byte of `s` needs an escape in a JSON string (none is a control character, `"` or
/// `\`): eight bytes at a time.
fn plain(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `x` is zero (exactly: the first zero byte always sets its high bit).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let (words, rest) = s.as_chunks::<8>();
    let words_plain = words.iter().all(|w| {
        let x = u64::from_ne_bytes(*w);
        // A byte below 0x20 is below 0x20 in value, whatever its neighbours (`x - 0x20..` borrows
        // only from bytes that are below it).
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS != 0;
        !(control || has_zero(x ^ (ONES * u64::from(b'"'))) || has_zero(x ^ (ONES * u64::from(b'\\'))))
    });
    words_plain && rest.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::state::{Grant, Text};

    fn entry(id: &str, host: &str, value: &str, grant: Option<u64>) -> Entry {
        Entry {
            id: id.into(),
            owner: "1626fc8a056eccf0ed85beec7147480a".into(),
            pid: u32::MAX,
            host: host.into(),
            role: "permit:3".into(),
            value: Text::from(value),
            since_ns: 19_105_354_722_259,
            ttl_ns: u64::MAX,
            grant: grant.map(|token| Grant { token }),
            expires_ns: 42,
        }
    }

    /// `plain` agrees with the byte-by-byte rule on every byte at every place of a word.
    #[test]
    fn plain_finds_every_byte_that_needs_an_escape() {
        let by_byte = |s: &[u8]| s.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\');
        for b in 0..=255u8 {
            for at in 0..17 {
                let mut s = vec![b'a'; 17];
                s[at] = b;
                assert_eq!(plain(&s), by_byte(&s), "byte {b:#x} at {at}");
                // Beside bytes that borrow in the arithmetic (0x00, 0x80, 0xff).
                for other in [0x00, 0x80, 0xff, 0x21] {
                    s[(at + 1) % 17] = other;
                    assert_eq!(plain(&s), by_byte(&s), "byte {b:#x} at {at}, {other:#x} after it");
                }
            }
        }
    }

    /// The hand-written JSON is serde_json's, byte for byte: empty and full queues, fields left
    /// out and written, and every kind of character a string may hold (quotes, backslashes,
    /// control characters, DEL, non-ASCII).
    #[test]
    fn the_json_is_serde_json_s_byte_for_byte() {
        let odd = "a\"b\\c\u{0}\u{1f}\u{8}\t\n\u{c}\r\u{7f}é漢🔒 /";
        let mut states = vec![State::new(
            "lockbench%2Funcontended",
            "35b18c73-5787-42ae-b8a5-8c4453188c86",
        )];
        let mut full = State::new(odd, "");
        full.last_token = 1_796_231_409_725_983;
        full.entries = vec![
            entry("26ea50d9c172b97e", "vm", "", Some(0)),
            entry(odd, odd, odd, None),
            entry("", "", "candidate \"x\"", Some(u64::MAX)),
        ];
        states.push(full);
        for (i, c) in (0u8..0x80).enumerate() {
            let mut s = State::new(&char::from(c).to_string(), "b");
            s.entries = vec![entry(&format!("x{}y", char::from(c)), "h", "", Some(i as u64))];
            states.push(s);
        }
        for state in &states {
            let mut ours = Vec::new();
            write_state(&mut ours, state);
            let theirs = serde_json::to_vec(state).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{state:?}"
            );
            assert_eq!(ours, theirs);
            let back: State = serde_json::from_slice(&ours).unwrap();
            assert_eq!(back.entries.len(), state.entries.len());
        }
    }
}
