//! Guest logging: always allowed, bounded per task, mirrored to `tracing`.

mod link;
pub use link::FUEL;

use std::fmt;
use std::sync::Arc;

use ari_model::CapabilityName;

use super::{CapUsage, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;

/// Sees each kept log line (`LEVEL message`) as the guest writes it, for live views of a
/// running task. Called on the guest's thread: it must not block (hand the line off and drop it
/// when the reader is behind).
pub type LogTap = Arc<dyn Fn(&str) + Send + Sync>;

/// Per-task budget of log bytes kept, counted as stored (`LEVEL message`), so neither huge
/// lines nor millions of tiny ones can grow host memory past it.
pub const MAX_LOG_BYTES: u64 = 64 * 1024;

/// Longest message line kept; longer lines are cut and marked (same bound as WASI stdout).
pub const MAX_LINE_BYTES: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trace => "TRACE",
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Warn => "WARN",
            Self::Error => "ERROR",
        })
    }
}

/// The log lines of one task, as `LEVEL message`.
pub struct LogCapability {
    lines: Vec<String>,
    /// Bytes of `lines` (what the budget counts).
    stored: u64,
    /// Message bytes kept (the metered figure).
    kept: u64,
    dropped: u64,
    limit: u64,
    tap: Option<LogTap>,
}

impl fmt::Debug for LogTapSlot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(LogTap)"
        } else {
            "None"
        })
    }
}

/// Debug output for the optional tap (closures have none).
struct LogTapSlot<'a>(&'a Option<LogTap>);

impl Default for LogCapability {
    fn default() -> Self {
        Self::with_limit(MAX_LOG_BYTES)
    }
}

/// `line` cut to at most `max` bytes on a char boundary, and how many bytes were cut.
fn cut(line: &str, max: usize) -> (&str, usize) {
    if line.len() <= max {
        return (line, 0);
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    (&line[..end], line.len() - end)
}

impl LogCapability {
    pub fn with_limit(limit: u64) -> Self {
        Self {
            lines: Vec::new(),
            stored: 0,
            kept: 0,
            dropped: 0,
            limit,
            tap: None,
        }
    }

    /// Hands every kept line to `tap` as well.
    pub fn set_tap(&mut self, tap: LogTap) {
        self.tap = Some(tap);
    }

    /// Keeps each line of `msg` while the budget lasts; once a line does not fit, it and
    /// everything after it is dropped and only counted (see [`LogCapability::lines`]).
    /// Only kept lines reach `tracing`, so the executor's own log is bounded the same way.
    pub fn log(&mut self, level: LogLevel, msg: &str) {
        for line in msg.strip_suffix('\n').unwrap_or(msg).split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if self.dropped == 0 {
                let (text, cut_bytes) = cut(line, MAX_LINE_BYTES);
                let mut stored = format!("{level} {text}");
                if cut_bytes > 0 {
                    stored.push_str(&format!(" [line cut: {cut_bytes} bytes dropped]"));
                }
                if self.stored + stored.len() as u64 <= self.limit {
                    emit(level, &stored[level.to_string().len() + 1..]);
                    if let Some(tap) = &self.tap {
                        tap(&stored);
                    }
                    self.stored += stored.len() as u64;
                    self.kept += text.len() as u64;
                    self.lines.push(stored);
                    continue;
                }
                tracing::warn!(
                    target: "ari::guest",
                    "[log truncated: the task's log reached its {} byte limit]",
                    self.limit
                );
            }
            self.dropped += (line.len() as u64).max(1);
        }
    }

    /// The kept lines, plus a final marker saying how many bytes were dropped, if any.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.lines.clone();
        if self.dropped > 0 {
            lines.push(format!(
                "WARN [log truncated: {} bytes dropped after the {} byte limit]",
                self.dropped, self.limit
            ));
        }
        lines
    }

    /// Message bytes kept (the metered figure).
    pub fn bytes(&self) -> u64 {
        self.kept
    }

    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
    }
}

impl fmt::Debug for LogCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogCapability")
            .field("lines", &self.lines.len())
            .field("stored", &self.stored)
            .field("dropped", &self.dropped)
            .field("limit", &self.limit)
            .field("tap", &LogTapSlot(&self.tap))
            .finish()
    }
}

fn emit(level: LogLevel, line: &str) {
    match level {
        LogLevel::Trace => tracing::trace!(target: "ari::guest", "{line}"),
        LogLevel::Debug => tracing::debug!(target: "ari::guest", "{line}"),
        LogLevel::Info => tracing::info!(target: "ari::guest", "{line}"),
        LogLevel::Warn => tracing::warn!(target: "ari::guest", "{line}"),
        LogLevel::Error => tracing::error!(target: "ari::guest", "{line}"),
    }
}

impl Capability for LogCapability {
    const GRANT: Option<CapabilityName> = None;
    const HOST: HostFunctions = link::HOST;

    fn for_task(_grants: &Grants, task: &mut TaskSetup) -> Self {
        let mut log = Self::default();
        if let Some(tap) = task.log_tap.take() {
            log.set_tap(tap);
        }
        log
    }

    fn add_usage(&self, usage: &mut CapUsage) {
        usage.log_bytes = self.bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tap_sees_each_kept_line_and_nothing_past_the_budget() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut log = LogCapability::with_limit(24);
        let sink = seen.clone();
        log.set_tap(std::sync::Arc::new(move |line: &str| {
            sink.lock().expect("not poisoned").push(line.to_owned())
        }));
        log.log(LogLevel::Info, "one\ntwo\nthree is too long to fit");
        assert_eq!(
            *seen.lock().expect("not poisoned"),
            ["INFO one", "INFO two"]
        );
    }

    #[test]
    fn log_splits_lines_and_prefixes_level() {
        let mut l = LogCapability::default();
        l.log(LogLevel::Info, "hello\nworld\n");
        l.log(LogLevel::Error, "boom");
        assert_eq!(l.lines(), ["INFO hello", "INFO world", "ERROR boom"]);
        assert_eq!(l.bytes(), 14);
    }

    #[test]
    fn log_is_bounded_with_one_marker() {
        // "INFO 12345" is 10 stored bytes: two fit in 20, then everything is dropped.
        let mut l = LogCapability::with_limit(20);
        l.log(LogLevel::Info, "12345");
        l.log(LogLevel::Info, "67890");
        l.log(LogLevel::Info, "x");
        l.log(LogLevel::Info, "yy\n\n");
        assert_eq!(l.bytes(), 10);
        assert_eq!(l.dropped_bytes(), 4);
        assert_eq!(l.lines().len(), 3);
        assert!(l.lines()[2].contains("4 bytes dropped"), "{:?}", l.lines());
    }

    #[test]
    fn log_cuts_huge_lines_on_a_char_boundary() {
        let mut l = LogCapability::default();
        let huge = format!("{}é", "a".repeat(MAX_LINE_BYTES - 1));
        l.log(LogLevel::Info, &huge);
        assert_eq!(l.bytes(), (MAX_LINE_BYTES - 1) as u64);
        assert!(
            l.lines()[0].ends_with("[line cut: 2 bytes dropped]"),
            "{:?}",
            l.lines()
        );
    }

    #[test]
    fn log_of_many_tiny_lines_stays_within_the_budget() {
        let mut l = LogCapability::default();
        l.log(LogLevel::Debug, &"x\n".repeat(1_000_000));
        let stored: usize = l.lines().iter().map(String::len).sum();
        assert!(stored as u64 <= MAX_LOG_BYTES + 100, "{stored}");
        assert!(l.dropped_bytes() > 900_000);
    }
}
