//! Structured logging into the executor's log for this task (always available).

use super::wit;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl From<Level> for wit::LogLevel {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => wit::LogLevel::Trace,
            Level::Debug => wit::LogLevel::Debug,
            Level::Info => wit::LogLevel::Info,
            Level::Warn => wit::LogLevel::Warn,
            Level::Error => wit::LogLevel::Error,
        }
    }
}

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    wit::log(level.into(), message);
}

/// Logs at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Logs at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}
