//! Guest logging: always allowed, bounded per task, mirrored to `tracing`.

use std::fmt;

/// Per-task budget of message bytes kept; beyond it lines are dropped and counted.
pub const MAX_LOG_BYTES: u64 = 64 * 1024;

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
#[derive(Debug)]
pub struct LogCapability {
    lines: Vec<String>,
    kept: u64,
    dropped: u64,
    limit: u64,
}

impl Default for LogCapability {
    fn default() -> Self {
        Self::with_limit(MAX_LOG_BYTES)
    }
}

impl LogCapability {
    pub fn with_limit(limit: u64) -> Self {
        Self {
            lines: Vec::new(),
            kept: 0,
            dropped: 0,
            limit,
        }
    }

    /// Keeps each line of `msg` while the budget lasts; a final marker line says how much was dropped.
    pub fn log(&mut self, level: LogLevel, msg: &str) {
        for line in msg.strip_suffix('\n').unwrap_or(msg).split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            emit(level, line);
            let len = line.len() as u64;
            if self.dropped == 0 && self.kept + len <= self.limit {
                self.kept += len;
                self.lines.push(format!("{level} {line}"));
            } else {
                if self.dropped == 0 {
                    self.lines.push(String::new());
                }
                self.dropped += len.max(1);
                if let Some(marker) = self.lines.last_mut() {
                    *marker = format!(
                        "WARN [log truncated: {} bytes dropped after the {} byte limit]",
                        self.dropped, self.limit
                    );
                }
            }
        }
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Message bytes kept (the metered figure).
    pub fn bytes(&self) -> u64 {
        self.kept
    }

    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut l = LogCapability::with_limit(10);
        l.log(LogLevel::Info, "12345");
        l.log(LogLevel::Info, "67890");
        l.log(LogLevel::Info, "x");
        l.log(LogLevel::Info, "yy");
        assert_eq!(l.bytes(), 10);
        assert_eq!(l.dropped_bytes(), 3);
        assert_eq!(l.lines().len(), 3);
        assert!(l.lines()[2].contains("3 bytes dropped"), "{:?}", l.lines());
    }
}
