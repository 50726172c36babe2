//! The state file on disk (format 2): a lock's state, updated in place under its lock file's
//! `flock`, never left half-written, beside a durable reservation of fencing tokens.
//!
//! ```text
//! offset 0 and 4096  two reservation slots, 32 bytes each:
//!                    b"LSR2" | crc32c | seq (u64) | mark (u64) | 8 zero bytes
//! offset 8192        frame slot 0, and frame slot 1 at 8192 + cap:
//!                    b"LSF2" | crc32c | seq (u64) | cap (u64) | len (u32) | 4 zero bytes | len bytes of JSON
//! ```
//! (little-endian; each crc32c covers its record from `seq` on, the frame's payload included).
//!
//! - **Frames** hold the state (the JSON of `protocol/state.rs`). A step writes the new state
//!   into the slot that does not hold the newest one, in one `pwrite`; a reader takes the valid
//!   frame (magic and checksum right) with the highest `seq`. A write cut short (the process
//!   killed in the middle of it, no space left on the device) leaves a frame that fails its
//!   checksum, and the previous state is read: the file is never half-written. Readers without
//!   the lock (a waiter's look, `inspect`) see a whole state the same way. `cap` is a power of two
//!   (at least [`MIN_CAP`]) that both slots have; a state that outgrows it is written at slot 1 of
//!   a doubled `cap`, past everything there was, so the newest frame is never overwritten. A
//!   reader finds slot 1 at `8192 + cap` for every power of two `cap` the file is long enough for.
//! - **The reservation** (`mark`) is the highest fencing token that may have been handed out:
//!   every token handed out is at most the mark of a reservation that was on disk (synced) before
//!   the token was returned. A step that hands out a token above the mark writes a new
//!   reservation [`BLOCK`] ahead of it, with one `fdatasync` for the block, before it writes the
//!   frame that carries the token (another process reads a frame once written). Within one boot the
//!   frames say the exact last token (they are in the page cache for every process); after a
//!   reboot (a power cut may have lost any frame written since the last sync) the last token is
//!   taken as at least the mark (see `txn.rs`). The two slots are written in turn, each write
//!   synced before the next: one is always whole and on disk. A write whose sync failed is
//!   withdrawn ([`withdraw`]): the slot synced before is the newest again, so no token is ever
//!   handed out under a reservation that may not be on disk. They sit in two pages of their own,
//!   which a frame's write never touches.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// A frame's or reservation's magic and format: what tells a format-2 state file.
const FRAME_MAGIC: &[u8; 4] = b"LSF2";
const RESERVE_MAGIC: &[u8; 4] = b"LSR2";
/// Where the reservation slots are (each in a page of its own).
const RESERVE_AT: [u64; 2] = [0, 4096];
/// Where frame slot 0 starts.
const FRAMES_AT: u64 = 8192;
/// A frame's header.
const HEADER: usize = 32;
/// The smallest `cap`.
pub(crate) const MIN_CAP: u64 = 4096;
/// How far ahead of a token handed out a new reservation goes: 2^26 µs (about 67 s of the wall
/// clock that tokens follow), so an uncontended lock syncs about once a minute, and tokens after
/// a power cut jump at most that far.
pub(crate) const BLOCK: u64 = 1 << 26;

/// CRC-32C, table-driven 16 bytes at a time.
const CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// Where the newest frame and reservation of a file are (what the next write needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The newest frame's sequence number, offset and the slots' capacity.
    pub frame_seq: u64,
    pub frame_at: u64,
    pub cap: u64,
    /// The newest frame's checksum and payload length (what its header says: see [`newest`]).
    pub frame_crc: u32,
    pub frame_len: u32,
    /// The newest reservation's sequence number, slot, and mark.
    pub reserve_seq: u64,
    pub reserve_slot: usize,
    pub mark: u64,
}

impl Layout {
    /// Where the newest frame ends (what the file's size is at least).
    pub fn frame_end(&self) -> u64 {
        self.frame_at + HEADER as u64 + u64::from(self.frame_len)
    }
}

/// Whether `bytes` are a format-2 state file rather than a JSON one (format 1, written by earlier
/// versions: the state's JSON alone).
pub(crate) fn is_format_2(bytes: &[u8]) -> bool {
    !matches!(bytes.iter().find(|b| !b.is_ascii_whitespace()), Some(b'{'))
}

/// The newest whole state in `bytes` (its JSON) and where things are, or what is wrong.
pub(crate) fn decode(bytes: &[u8]) -> Result<(&[u8], Layout), String> {
    let (reserve_seq, reserve_slot, mark) = RESERVE_AT
        .iter()
        .enumerate()
        .filter_map(|(slot, &at)| reservation(bytes, at).map(|(seq, mark)| (seq, slot, mark)))
        .max()
        .ok_or("no whole token reservation")?;
    let mut best: Option<(u64, u64, u64, u32, &[u8])> = None;
    let mut consider = |at: u64, slot1_cap: Option<u64>| {
        if let Some((seq, cap, crc, payload)) = frame(bytes, at) {
            if slot1_cap.is_none_or(|c| c == cap) && best.is_none_or(|(s, ..)| seq > s) {
                best = Some((seq, at, cap, crc, payload));
            }
        }
    };
    consider(FRAMES_AT, None);
    let mut cap = MIN_CAP;
    while FRAMES_AT + cap < bytes.len() as u64 {
        consider(FRAMES_AT + cap, Some(cap));
        cap = match cap.checked_mul(2) {
            Some(c) => c,
            None => break,
        };
    }
    let (frame_seq, frame_at, cap, frame_crc, payload) = best.ok_or("no whole state")?;
    Ok((
        payload,
        Layout {
            frame_seq,
            frame_at,
            cap,
            frame_crc,
            frame_len: payload.len() as u32,
            reserve_seq,
            reserve_slot,
            mark,
        },
    ))
}

/// The reservation at `at`: its seq and mark, if it is whole.
fn reservation(bytes: &[u8], at: u64) -> Option<(u64, u64)> {
    let r = bytes.get(usize::try_from(at).ok()?..)?.get(..32)?;
    if &r[..4] != RESERVE_MAGIC || u32::from_le_bytes(r[4..8].try_into().ok()?) != CRC.checksum(&r[8..]) {
        return None;
    }
    Some((u64_at(r, 8), u64_at(r, 16)))
}

/// The frame at `at`: its seq, cap, checksum and payload, if it is whole.
fn frame(bytes: &[u8], at: u64) -> Option<(u64, u64, u32, &[u8])> {
    let f = bytes.get(usize::try_from(at).ok()?..)?;
    let h = f.get(..HEADER)?;
    if &h[..4] != FRAME_MAGIC {
        return None;
    }
    let (seq, cap) = (u64_at(h, 8), u64_at(h, 16));
    let len = u32::from_le_bytes(h[24..28].try_into().ok()?) as usize;
    if !cap.is_power_of_two() || cap < MIN_CAP || (HEADER + len) as u64 > cap {
        return None;
    }
    let body = f.get(..HEADER + len)?;
    let mut digest = CRC.digest();
    digest.update(&body[8..]);
    let crc = u32::from_le_bytes(h[4..8].try_into().ok()?);
    if crc != digest.finalize() {
        return None;
    }
    Some((seq, cap, crc, &body[HEADER..]))
}

/// Whether the newest frame of `file`, as the headers of its two frame slots (of `layout`'s
/// capacity) say, is `layout`'s: the same slot, seq, checksum and length. Read without the
/// payloads and without checking a checksum, unless `whole`: then the frame's payload is read and
/// its checksum checked too, as [`decode`] checks it. The headers are one read (see
/// [`headers`]), and the frame one more; never the whole file.
///
/// Without `whole`, only a frame this process read whole or wrote itself may be compared this way
/// (see `cache.rs`): a header says nothing of whether its frame is whole. A newer frame written
/// past the slots (the state outgrew them) is not looked at: the file's size tells it.
pub(crate) fn holds(file: &File, layout: &Layout, whole: bool) -> std::io::Result<bool> {
    let mut best: Option<(u64, u64, u32, u32)> = None;
    let slots = [(FRAMES_AT, false), (FRAMES_AT + layout.cap, true)];
    for ((at, slot1), h) in slots.into_iter().zip(headers(file, layout.cap)?) {
        let Some(h) = h else {
            continue;
        };
        if &h[..4] != FRAME_MAGIC {
            continue;
        }
        let (seq, cap) = (u64_at(&h, 8), u64_at(&h, 16));
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let len = u32::from_le_bytes([h[24], h[25], h[26], h[27]]);
        if (!slot1 || cap == layout.cap) && best.is_none_or(|(s, ..)| seq > s) {
            best = Some((seq, at, crc, len));
        }
    }
    if best != Some((layout.frame_seq, layout.frame_at, layout.frame_crc, layout.frame_len)) {
        return Ok(false);
    }
    if !whole {
        return Ok(true);
    }
    let f = read_at_most(file, layout.frame_at, HEADER as u64 + u64::from(layout.frame_len))?;
    Ok(frame(&f, 0)
        .is_some_and(|(seq, cap, crc, _)| (seq, cap, crc) == (layout.frame_seq, layout.cap, layout.frame_crc)))
}

/// The span of a file that holds both frame headers where the slots are [`MIN_CAP`] apart.
const BOTH_HEADERS: usize = MIN_CAP as usize + HEADER;

thread_local! {
    /// The buffer [`headers`] reads both frame headers into, one per thread, zeroed once: a
    /// buffer on the stack was zeroed at every call (4 KB twice a lock cycle, the largest item of
    /// an uncontended cycle's instructions), one on the heap is allocated too. Only the bytes a
    /// read filled are looked at.
    static HEADERS_READ: std::cell::RefCell<Box<[u8; BOTH_HEADERS]>> =
        std::cell::RefCell::new(Box::new([0; BOTH_HEADERS]));
}

/// The headers of the two frame slots of capacity `cap` (`None` where the file ends first). Where
/// the slots are [`MIN_CAP`] apart (nearly every file), one read of both into a buffer of the
/// thread's ([`HEADERS_READ`]): each system call counts on a hand-over's path, which runs on a
/// cold CPU. Else one read each.
fn headers(file: &File, cap: u64) -> std::io::Result<[Option<[u8; HEADER]>; 2]> {
    if cap != MIN_CAP {
        return Ok([header_at(file, FRAMES_AT)?, header_at(file, FRAMES_AT + cap)?]);
    }
    HEADERS_READ.with(|buffer| {
        let mut both = buffer.borrow_mut();
        let n = read_into(file, FRAMES_AT, &mut both[..])?;
        // Bytes past `n` are an earlier read's: never looked at.
        let read = |off: usize| -> Option<[u8; HEADER]> {
            let end = off + HEADER;
            (n >= end).then(|| both[off..end].try_into().ok()).flatten()
        };
        Ok([read(0), read(MIN_CAP as usize)])
    })
}

/// The [`HEADER`] bytes of `file` at `at`, `None` if the file ends before them.
fn header_at(file: &File, at: u64) -> std::io::Result<Option<[u8; HEADER]>> {
    let mut h = [0u8; HEADER];
    Ok((read_into(file, at, &mut h)? == HEADER).then_some(h))
}

/// Reads `buf` from `file` at `at`, up to the file's end; how many bytes were read. A read that
/// stops short is the end of the file (a regular file's read stops short only there): no second
/// system call that would read nothing.
fn read_into(file: &File, at: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match file.read_at(&mut buf[read..], at + read as u64) {
            Ok(0) => break,
            Ok(n) if read + n < buf.len() => return Ok(read + n),
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(read)
}

/// Up to `len` bytes of `file` from `at` (fewer at its end: a frame cut short there fails its
/// checksum, and [`holds`] says no).
fn read_at_most(file: &File, at: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    let read = read_into(file, at, &mut bytes)?;
    bytes.truncate(read);
    Ok(bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The bytes of a frame `seq` of capacity `cap` holding `payload` (its checksum at 4..8).
fn encode_frame(seq: u64, cap: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.extend_from_slice(FRAME_MAGIC);
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&cap.to_le_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    let crc = CRC.checksum(&f[8..]);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    f
}

/// The bytes of a reservation `seq` of `mark`.
fn encode_reservation(seq: u64, mark: u64) -> [u8; 32] {
    let mut r = [0u8; 32];
    r[..4].copy_from_slice(RESERVE_MAGIC);
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    r[16..24].copy_from_slice(&mark.to_le_bytes());
    let crc = CRC.checksum(&r[8..]);
    r[4..8].copy_from_slice(&crc.to_le_bytes());
    r
}

/// The smallest capacity for a frame of `payload_len` bytes, at least `cap`.
fn cap_for(payload_len: usize, cap: u64) -> u64 {
    ((HEADER + payload_len) as u64)
        .next_power_of_two()
        .max(cap)
        .max(MIN_CAP)
}

/// A whole new state file holding `payload`, with reservation `mark`: what a new file (written
/// to a temporary file and renamed into place) starts as.
pub(crate) fn encode_new(payload: &[u8], mark: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; FRAMES_AT as usize];
    bytes[..32].copy_from_slice(&encode_reservation(1, mark));
    bytes.extend_from_slice(&encode_frame(1, cap_for(payload.len(), MIN_CAP), payload));
    bytes
}

/// Writes `payload` as the newest state of `file`, whose newest frame and reservation are at
/// `layout`, and a new reservation `mark` if given (not synced: the caller syncs). Returns the
/// new layout. A write cut short leaves `layout`'s frame and reservation whole.
#[cfg(test)]
pub(crate) fn write(file: &File, layout: &Layout, payload: &[u8], mark: Option<u64>) -> std::io::Result<Layout> {
    let next = prepare(layout, payload, mark);
    write_prepared(file, &next, || Ok(()))?;
    Ok(next.layout)
}

/// A write prepared by [`prepare`]: the layout it leaves, and its frame's bytes.
pub(crate) struct Prepared {
    pub layout: Layout,
    frame: Vec<u8>,
    reserve: bool,
}

/// Writes what [`prepare`] made (as [`write`] does): its reservation first, if it has one, then
/// `synced` (the caller's sync of that reservation), then the frame. The frame can hand out a
/// token above the old reservation, and another process reads it as soon as it is written (a
/// waiter woken by its write): so it is written only once the reservation that covers its token
/// is on disk. A `synced` that fails writes no frame.
pub(crate) fn write_prepared(
    file: &File,
    next: &Prepared,
    synced: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let layout = &next.layout;
    if next.reserve {
        file.write_all_at(
            &encode_reservation(layout.reserve_seq, layout.mark),
            RESERVE_AT[layout.reserve_slot],
        )?;
        synced()?;
    }
    file.write_all_at(&next.frame, layout.frame_at)
}

/// The write of `payload` (and reservation `mark`) over `layout`, made ready: what [`write`]
/// writes, and the layout it returns, known before the write.
pub(crate) fn prepare(layout: &Layout, payload: &[u8], mark: Option<u64>) -> Prepared {
    let cap = cap_for(payload.len(), layout.cap);
    // The slot the newest frame is not in; past everything when the capacity grows.
    let at = if cap != layout.cap || layout.frame_at == FRAMES_AT {
        FRAMES_AT + cap
    } else {
        FRAMES_AT
    };
    let frame_seq = layout.frame_seq + 1;
    let frame = encode_frame(frame_seq, cap, payload);
    let mut next = Layout {
        frame_seq,
        frame_at: at,
        cap,
        frame_crc: u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]),
        frame_len: payload.len() as u32,
        ..*layout
    };
    if let Some(mark) = mark {
        (next.reserve_seq, next.reserve_slot, next.mark) = (layout.reserve_seq + 1, 1 - layout.reserve_slot, mark);
    }
    Prepared {
        layout: next,
        frame,
        reserve: mark.is_some(),
    }
}

/// Withdraws the reservation that `layout` (what [`write`] returned) says is the newest, whose
/// sync failed: it may never reach the disk, so no token may be handed out under it. The other
/// slot, synced before, is the newest again; the next grant above it reserves (and syncs) anew.
pub(crate) fn withdraw(file: &File, layout: &Layout) -> std::io::Result<()> {
    file.write_all_at(&[0u8; 32], RESERVE_AT[layout.reserve_slot])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of `file`.
    fn read(file: &File) -> Vec<u8> {
        let mut bytes = vec![0; file.metadata().unwrap().len() as usize];
        file.read_exact_at(&mut bytes, 0).unwrap();
        bytes
    }

    fn temp_file(bytes: &[u8]) -> File {
        let path = std::env::temp_dir().join(format!("locksmith-record-{:016x}", rand::random::<u64>()));
        std::fs::write(&path, bytes).unwrap();
        let f = File::options().read(true).write(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    #[test]
    fn a_state_reads_back_through_writes_and_growth() {
        let f = temp_file(&encode_new(b"{\"a\":1}", 7));
        let (payload, mut layout) = decode(&read(&f)).map(|(p, l)| (p.to_vec(), l)).unwrap();
        assert_eq!((payload.as_slice(), layout.mark), (&b"{\"a\":1}"[..], 7));
        for (i, len) in [10, 5000, 20, 70_000, 3, 3].into_iter().enumerate() {
            let payload = vec![b'x' + (i as u8); len];
            let mark = (i % 2 == 0).then_some(100 + i as u64);
            let before = layout;
            layout = write(&f, &layout, &payload, mark).unwrap();
            let bytes = read(&f);
            let (got, read_layout) = decode(&bytes).unwrap();
            assert_eq!((got, read_layout), (payload.as_slice(), layout), "write {i}");
            assert!(
                holds(&f, &layout, true).unwrap() && holds(&f, &layout, false).unwrap(),
                "write {i}"
            );
            // (A frame written past the slots, the state having outgrown them, is told by the
            // file's size, not by the headers: see `cache.rs`.)
            if layout.cap == before.cap {
                assert!(!holds(&f, &before, false).unwrap(), "write {i}: the frame before");
            }
        }
        assert_eq!(layout.mark, 104);
        assert!(is_format_2(&read(&f)) && !is_format_2(b" {\"format\":1}"));
    }

    /// A write cut short (a process killed in the middle of it, no space left) leaves the state
    /// before it, and the reservation before it, whole: the file is never half-written.
    #[test]
    fn a_write_cut_short_leaves_the_previous_state() {
        let f = temp_file(&encode_new(b"first", 50));
        let (_, layout) = decode(&read(&f)).map(|(p, l)| (p.to_vec(), l)).unwrap();
        let good = read(&f);
        let before = write(&f, &layout, b"second", Some(60)).unwrap();
        let complete = read(&f);
        // Every prefix of the next write (frame then reservation) that reached the file.
        let after = write(&f, &before, &[b'y'; 9000], Some(70)).unwrap();
        let full = read(&f);
        for cut in 0..full.len() {
            let mut torn = complete.clone();
            torn.resize(full.len().max(complete.len()), 0);
            // Only the bytes the write changed, up to `cut`, reached the file.
            for (i, b) in full.iter().enumerate().take(cut) {
                torn[i] = *b;
            }
            let (payload, layout) = decode(&torn).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert!(
                (payload == b"second" && layout.frame_seq == before.frame_seq)
                    || (payload == [b'y'; 9000] && layout.frame_seq == after.frame_seq),
                "cut at {cut}"
            );
            assert!(layout.mark >= 60, "cut at {cut}: the reservation went back");
        }
        assert!(decode(&good).is_ok());
        assert!(decode(b"").is_err() && decode(&[0; 20000]).is_err());
    }

    /// A reservation whose sync failed is withdrawn: the one before it is the newest again.
    /// The headers' buffer is the thread's, reused: a short file read after a long one shows
    /// none of the long one's bytes (its second slot is past its end).
    #[test]
    fn headers_read_after_a_longer_file_show_none_of_it() {
        let long = temp_file(&encode_new(b"long", 1));
        let (_, layout) = decode(&read(&long)).unwrap();
        let layout = write(&long, &layout, b"in the second slot", None).unwrap();
        let [first, second] = headers(&long, MIN_CAP).unwrap();
        assert!(first.is_some() && second.is_some(), "both slots of the long file");
        assert!(holds(&long, &layout, true).unwrap());

        let short = temp_file(&encode_new(b"short", 2));
        let (_, layout) = decode(&read(&short)).unwrap();
        let [first, second] = headers(&short, MIN_CAP).unwrap();
        assert_eq!(second, None, "the short file ends before its second slot");
        assert_eq!(first.map(|h| u64_at(&h, 8)), Some(layout.frame_seq));
        assert!(holds(&short, &layout, true).unwrap());
    }

    #[test]
    fn a_withdrawn_reservation_gives_way_to_the_one_before() {
        let f = temp_file(&encode_new(b"s", 50));
        let (_, layout) = decode(&read(&f)).map(|(p, l)| (p.to_vec(), l)).unwrap();
        let failed = write(&f, &layout, b"t", Some(90)).unwrap();
        withdraw(&f, &failed).unwrap();
        let (payload, now) = decode(&read(&f)).map(|(p, l)| (p.to_vec(), l)).unwrap();
        assert_eq!((payload.as_slice(), now.mark), (&b"t"[..], 50));
        let next = write(&f, &now, b"u", Some(120)).unwrap();
        assert_eq!(decode(&read(&f)).unwrap().1, next);
        assert_eq!(next.mark, 120);
    }
}
