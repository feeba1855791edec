//! One output stream: a bounded in-memory tail, an optional spill file with
//! the complete stream, and a consuming read cursor (docs/running.md). Cuts
//! never split a UTF-8 character.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::sys::lock;

use crate::watch::spill::{SpillDir, SpillFile};

/// One of a program's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputStream {
    /// Its stdout.
    Stdout,
    /// Its stderr.
    Stderr,
}

/// Sees a foreground run's output as it arrives
/// ([`Executor::run_streamed`](crate::Executor::run_streamed)): each chunk
/// as it was read, with the whole-stream offset of its first byte. Chunks
/// are raw bytes, so one may end inside a character that the next one
/// finishes. It is called on the core's thread, so it must return at once
/// (hand the bytes on, never wait for a reader).
pub type OutputTap = Arc<dyn Fn(OutputStream, u64, &[u8]) + Send + Sync>;

/// Lets whoever a streamed run's tap hands the output to hold the command
/// back: while the valve is shut the run's output is not read, so the
/// command blocks once its pipe is full, as it would writing to a slow
/// terminal. The timeout and every stop still apply, and a command that
/// exited or is being stopped is read whatever the valve says. Open until
/// shut.
#[derive(Debug, Default)]
pub struct OutputValve {
    shut: std::sync::atomic::AtomicBool,
    opened: tokio::sync::Notify,
}

impl OutputValve {
    /// Holds the output back from the next read on.
    pub fn shut(&self) {
        self.shut.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets it flow again, for every run it holds.
    pub fn open(&self) {
        self.shut.store(false, std::sync::atomic::Ordering::SeqCst);
        self.opened.notify_waiters();
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once `valve` is open (never without one).
    pub(crate) async fn opened(valve: Option<&OutputValve>) {
        let Some(valve) = valve else {
            return std::future::pending().await;
        };
        let notified = valve.opened.notified();
        tokio::pin!(notified);
        // Registered before the look, so an `open` between the two is not
        // missed (`notify_waiters` wakes only those registered).
        notified.as_mut().enable();
        if !valve.is_shut() {
            return;
        }
        notified.await
    }
}

/// Where a stream's complete copy stands.
enum Spill {
    /// Not needed yet: the stream fits in the tail.
    None,
    Active(SpillFile),
    /// Passed `max_spill_bytes`, or could not be made or written: deleted,
    /// no path, and this reason instead.
    Abandoned(String),
}

pub(crate) struct StreamBuffer {
    cap: usize,
    /// `None`: the stream never spills (only the window is kept).
    max_spill: Option<u64>,
    /// The last ≤ `cap` bytes, starting on a character boundary.
    window: VecDeque<u8>,
    /// Bytes received in all.
    total: u64,
    /// Absolute offset up to which `take_unread` has delivered.
    read_pos: u64,
    spill: Spill,
    spill_dir: Arc<SpillDir>,
    label: &'static str,
    closed: bool,
}

/// What a run result reports for one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedOutput {
    /// The tail of the stream when truncated, else all of it.
    pub text: String,
    /// True when bytes were dropped from the start of the stream.
    pub truncated: bool,
    /// A file holding the complete stream, when truncated and available.
    pub spill_path: Option<String>,
    /// Why there is no spill path although the stream was truncated: past
    /// `max_spill_bytes`, or the file could not be made or written.
    pub spill_error: Option<String>,
}

/// Where a process's output stands, as whole-stream byte offsets (the
/// offsets of [`Process::read_from`](crate::Process::read_from)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputOffsets {
    /// Where the next consuming read
    /// ([`Process::read_output`](crate::Process::read_output)) of stdout
    /// starts: after a hand-over (`on_expiry` background), just after the
    /// run's result.
    pub stdout_read: u64,
    /// As `stdout_read`, for stderr.
    pub stderr_read: u64,
    /// Bytes of stdout that arrived so far.
    pub stdout_end: u64,
    /// Bytes of stderr that arrived so far.
    pub stderr_end: u64,
}

/// One [`Process::read_from`](crate::Process::read_from): a collected
/// stream from a whole-stream offset, without consuming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRead {
    /// The stream from the offset asked for (the whole window when `lossy`),
    /// never ending inside a character while the stream is open.
    pub text: String,
    /// Where the next read starts: the whole-stream offset just after
    /// `text`'s bytes.
    pub next_offset: u64,
    /// The offset asked for had slid out of the in-memory window: `text` is
    /// the whole window, and what came before it is only in the spill file.
    pub lossy: bool,
    /// The file holding the complete stream, once it outgrew its window.
    pub spill_path: Option<String>,
    /// Why a stream that outgrew its window has no spill file (past its
    /// cap, or it could not be written); `None` also for a stream spawned
    /// without one.
    pub spill_error: Option<String>,
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// How far back from the end of `bytes` (1 to 3) the last character's
/// first byte is; `None` when the last three are all continuation bytes.
fn last_start(bytes: &[u8]) -> Option<usize> {
    let n = bytes.len();
    (1..=3.min(n)).find(|&back| !is_continuation(bytes[n - back]))
}

/// Whether `seq` begins a character without being all of it: more bytes
/// may finish it. An impossible start (`F4 90`, `E0 80`, `C0`) does not.
fn unfinished(seq: &[u8]) -> bool {
    matches!(std::str::from_utf8(seq), Err(e) if e.valid_up_to() == 0 && e.error_len().is_none())
}

/// Length of an incomplete UTF-8 sequence at the end of `bytes` (0 to 3):
/// bytes that may still become a character when more arrive.
pub(crate) fn incomplete_suffix(bytes: &[u8]) -> usize {
    match last_start(bytes) {
        Some(back) if unfinished(&bytes[bytes.len() - back..]) => back,
        _ => 0,
    }
}

/// How many bytes at the start of `after` finish a character that began
/// in `before` (the up to 3 bytes before them; `None` when they are not
/// known: the window starts there): a read that starts at `after` skips
/// them rather than decode half a character. Stray continuation bytes that
/// finish nothing are data, decoded as U+FFFD like any invalid byte.
fn split_prefix(before: Option<&[u8]>, after: &[u8]) -> usize {
    let leading = || after.iter().take_while(|&&b| is_continuation(b));
    let Some(before) = before else {
        // Nothing to look back at: any continuation is taken as a split.
        return leading().take(3).count();
    };
    let Some(back) = last_start(before) else { return 0 };
    let mut seq = before[before.len() - back..].to_vec();
    let mut taken = 0;
    // Each byte that carries the character on, up to the one that ends it;
    // one the character cannot have is data.
    for &b in leading() {
        if !unfinished(&seq) {
            break;
        }
        seq.push(b);
        if !unfinished(&seq) && std::str::from_utf8(&seq).is_err() {
            break;
        }
        taken += 1;
    }
    taken
}

impl StreamBuffer {
    pub(crate) fn new(
        cap: u64,
        max_spill: Option<u64>,
        spill_dir: Arc<SpillDir>,
        label: &'static str,
    ) -> Self {
        StreamBuffer {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            max_spill,
            window: VecDeque::new(),
            total: 0,
            read_pos: 0,
            spill: Spill::None,
            spill_dir,
            label,
            closed: false,
        }
    }

    /// Bytes received in all: the whole-stream offset of the next byte.
    pub(crate) fn end(&self) -> u64 {
        self.total
    }

    fn window_start(&self) -> u64 {
        self.total - self.window.len() as u64
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let before = self.total;
        self.total += chunk.len() as u64;
        self.feed_spill(before, chunk);
        // Only the last `cap` bytes of a large chunk can survive anyway.
        let keep = &chunk[chunk.len().saturating_sub(self.cap)..];
        self.window.extend(keep);
        if self.window.len() > self.cap {
            let excess = self.window.len() - self.cap;
            self.window.drain(..excess);
        }
        if self.window_start() > 0 {
            // A cut landed inside a character: drop its continuation bytes.
            let mut dropped = 0;
            while dropped < 3 && self.window.front().is_some_and(|&b| is_continuation(b)) {
                self.window.pop_front();
                dropped += 1;
            }
        }
    }

    fn feed_spill(&mut self, before: u64, chunk: &[u8]) {
        let Some(max_spill) = self.max_spill else {
            return;
        };
        if matches!(self.spill, Spill::None) && self.total > self.cap as u64 {
            // First time over the cap: the window still holds everything so
            // far, so the spill file starts complete.
            debug_assert_eq!(before, self.window.len() as u64);
            self.spill = match self.spill_dir.create(self.label) {
                Ok(mut file) => {
                    let (a, b) = self.window.as_slices();
                    match file.write(a).and_then(|()| file.write(b)) {
                        Ok(()) => Spill::Active(file),
                        Err(e) => {
                            file.discard();
                            Spill::Abandoned(e)
                        }
                    }
                }
                Err(e) => Spill::Abandoned(e),
            };
        }
        if let Spill::Active(file) = &mut self.spill {
            let outcome = if self.total > max_spill {
                Err(format!("the stream passed max_spill_bytes ({max_spill})"))
            } else {
                file.write(chunk)
            };
            if let Err(why) = outcome {
                if let Spill::Active(file) = std::mem::replace(&mut self.spill, Spill::Abandoned(why)) {
                    file.discard();
                }
            }
        }
    }

    /// True once closed and every byte received was delivered by reads (or
    /// slid out of the window unread).
    pub(crate) fn fully_read(&self) -> bool {
        self.closed && self.read_pos >= self.total
    }

    /// Where the next consuming read starts, and the end of what arrived,
    /// as whole-stream offsets.
    pub(crate) fn offsets(&self) -> (u64, u64) {
        (self.read_pos, self.total)
    }

    /// Frees the window's memory (a settled, fully read stream needs none).
    pub(crate) fn release(&mut self) {
        self.window = VecDeque::new();
        self.read_pos = self.total;
    }

    /// Gives back window capacity beyond what it holds.
    pub(crate) fn shrink(&mut self) {
        self.window.shrink_to_fit();
    }

    /// Deletes the spill file (the process is being forgotten).
    pub(crate) fn discard_spill(&mut self) {
        if let Spill::Active(file) = std::mem::replace(
            &mut self.spill,
            Spill::Abandoned("the process was forgotten".into()),
        ) {
            file.discard();
        }
    }

    pub(crate) fn close(&mut self) {
        self.closed = true;
        if let Spill::Active(file) = &mut self.spill {
            file.finish();
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.window_start() > 0
    }

    /// The stream's spill path and spill error, from one look: a file
    /// whose path no longer names it ([`SpillFile::removed`]) has no path,
    /// and the reason instead.
    pub(crate) fn spill(&self) -> (Option<String>, Option<String>) {
        match &self.spill {
            Spill::None => (None, None),
            Spill::Active(file) => match file.removed() {
                None => (Some(file.path().to_owned()), None),
                Some(why) => (None, Some(why)),
            },
            Spill::Abandoned(why) => (None, Some(why.clone())),
        }
    }

    pub(crate) fn collected(&self) -> CollectedOutput {
        let (spill_path, spill_error) = self.spill();
        let (a, b) = self.window.as_slices();
        let mut bytes = Vec::with_capacity(self.window.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        CollectedOutput {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: self.truncated(),
            spill_path,
            spill_error,
        }
    }

    /// What a foreground run's result shows when it is handed over to the
    /// registry at its timeout: the window, ending on a character boundary.
    /// Consuming reads then start right after it (no byte lost, none
    /// repeated), and the window grows to `cap`, a background process's.
    pub(crate) fn hand_over(&mut self, cap: u64) -> CollectedOutput {
        let (a, b) = self.window.as_slices();
        let mut bytes = Vec::with_capacity(self.window.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        if !self.closed {
            let hold = incomplete_suffix(&bytes);
            bytes.truncate(bytes.len() - hold);
        }
        self.read_pos = self.window_start() + bytes.len() as u64;
        self.cap = self.cap.max(usize::try_from(cap).unwrap_or(usize::MAX));
        let (spill_path, spill_error) = self.spill();
        CollectedOutput {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: self.truncated(),
            spill_path,
            spill_error,
        }
    }

    /// A non-consuming read from the whole-stream offset `from`: the bytes
    /// from there to the end of what arrived (the whole window when `from`
    /// slid out of it: `lossy`), and the offset the next read starts from.
    /// While the stream is open, a trailing incomplete character is left
    /// for the next read (its offset is before it), so no read splits one.
    pub(crate) fn read_from(&self, from: u64) -> OffsetRead {
        let start = self.window_start();
        let lossy = from < start;
        let skip = usize::try_from(from.clamp(start, self.total) - start).unwrap_or(usize::MAX);
        let (a, b) = self.window.as_slices();
        let mut bytes: Vec<u8> = if skip < a.len() {
            a[skip..].iter().chain(b).copied().collect()
        } else {
            b[(skip - a.len()).min(b.len())..].to_vec()
        };
        // Not at the stream's start: perhaps inside a character that began
        // in the window's bytes before (or before the window).
        let split = match (from.clamp(start, self.total), skip) {
            (0, _) => 0,
            (_, 0) => split_prefix(None, &bytes),
            (_, skip) => {
                let before: Vec<u8> = self.window.range(skip.saturating_sub(3)..skip).copied().collect();
                split_prefix(Some(&before), &bytes)
            }
        };
        bytes.drain(..split);
        if !self.closed {
            let hold = incomplete_suffix(&bytes);
            bytes.truncate(bytes.len() - hold);
        }
        let next_offset = from.clamp(start, self.total) + (split + bytes.len()) as u64;
        let (spill_path, spill_error) = self.spill();
        OffsetRead {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset,
            lossy,
            spill_path,
            spill_error,
        }
    }

    /// Everything not yet delivered that is still in the window, and whether
    /// unread bytes slid out first. While the stream is open, a trailing
    /// incomplete character is held back for the next read.
    pub(crate) fn take_unread(&mut self) -> (String, bool) {
        let start = self.window_start();
        let lossy = self.read_pos < start;
        let from = self.read_pos.max(start);
        let skip = (from - start) as usize;
        let (a, b) = self.window.as_slices();
        let mut bytes: Vec<u8> = if skip < a.len() {
            a[skip..].iter().chain(b).copied().collect()
        } else {
            b[skip - a.len()..].to_vec()
        };
        // The window slid to inside a character.
        let split = if lossy { split_prefix(None, &bytes) } else { 0 };
        bytes.drain(..split);
        if !self.closed {
            let hold = incomplete_suffix(&bytes);
            bytes.truncate(bytes.len() - hold);
        }
        self.read_pos = from + (split + bytes.len()) as u64;
        (String::from_utf8_lossy(&bytes).into_owned(), lossy)
    }
}

/// A run's two collected streams, and who else sees them.
pub(crate) struct Streams {
    pub stdout: StreamBuffer,
    pub stderr: StreamBuffer,
    /// Shown each chunk as it is kept (a streamed run), until taken away.
    pub tap: Option<OutputTap>,
    /// Holds the reads back while the tap's reader catches up.
    pub valve: Option<Arc<OutputValve>>,
}

/// Keeps a chunk read from `which`, then shows it to the tap, outside the
/// lock (a reader of the process is never held up by it).
pub(crate) fn feed(streams: &Mutex<Streams>, which: OutputStream, chunk: &[u8]) {
    if chunk.is_empty() {
        // The end of the stream: nothing to keep or show.
        return;
    }
    let tapped = {
        let mut s = lock(streams);
        let buffer = match which {
            OutputStream::Stdout => &mut s.stdout,
            OutputStream::Stderr => &mut s.stderr,
        };
        let offset = buffer.end();
        buffer.push(chunk);
        s.tap.clone().map(|tap| (tap, offset))
    };
    if let Some((tap, offset)) = tapped {
        tap(which, offset, chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_only_the_rest_of_a_character_begun_before() {
        let e = "é".as_bytes(); // C3 A9
        let euro = "€".as_bytes(); // E2 82 AC
        assert_eq!(split_prefix(Some(&e[..1]), &e[1..]), 1);
        assert_eq!(split_prefix(Some(&euro[..1]), &euro[1..]), 2);
        assert_eq!(split_prefix(Some(&euro[..2]), &euro[2..]), 1);
        // Stray continuation bytes after a whole character, or after ASCII
        // (Latin-1 °, ±): data, not the rest of anything.
        assert_eq!(split_prefix(Some(b"5"), &[0xB0, b'C']), 0);
        assert_eq!(split_prefix(Some(e), &[0xB1, 0xB1]), 0);
        assert_eq!(split_prefix(Some(&[0xB1]), &[0xB1, b'1']), 0);
        // After the start of a character that cannot be: data too.
        assert_eq!(split_prefix(Some(&[0xF4]), &[0x90, 0x80, 0x80]), 0);
        assert_eq!(split_prefix(Some(&[0xE0]), &[0x80, 0x80]), 0);
        assert_eq!(split_prefix(Some(&[0xC0]), &[0x80]), 0);
        // A character left unfinished: what came of it is skipped.
        assert_eq!(split_prefix(Some(&euro[..1]), &[0x82, b'x']), 1);
        // At a window's start nothing is known: a continuation is a split.
        assert_eq!(split_prefix(None, &e[1..]), 1);
        assert_eq!(split_prefix(None, b"abc"), 0);
    }

    #[test]
    fn incomplete_suffix_finds_only_unfinished_characters() {
        assert_eq!(incomplete_suffix(b"abc"), 0);
        assert_eq!(incomplete_suffix("é".as_bytes()), 0);
        assert_eq!(incomplete_suffix(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_suffix(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_suffix(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_suffix("😀".as_bytes()), 0);
        assert_eq!(incomplete_suffix(&[0xFF]), 0);
        // The start of a character that cannot be: nothing to wait for.
        assert_eq!(incomplete_suffix(&[b'a', 0xF4, 0x90, 0x80]), 0);
        assert_eq!(incomplete_suffix(&[b'a', 0xE0, 0x80]), 0);
        assert_eq!(incomplete_suffix(&[b'a', 0xC0]), 0);
        assert_eq!(incomplete_suffix(&[b'a', 0xF4, 0x8F]), 2);
    }
}
