//! The daemon's log subscriber: human-readable text (the default), or one JSON object per
//! line (`--log-format json`) for log shippers that parse fields instead of scraping text.
//!
//! Both write to stderr and take `RUST_LOG` filters (default `info`). Text has ANSI colours
//! only on a terminal and no timestamps under the journal (which adds its own); JSON always
//! carries its timestamp, level and the event's fields at the top level (`message`,
//! `socket`, `pid`, …), so `jq .message` works.

use std::io::IsTerminal;

/// How the daemon's log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the subscriber for `format`. For binaries that run the daemon; a library never
/// calls it.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log line that cannot be written (stderr full or closed) is dropped: reporting that
    // failure goes through `eprintln!`, which panics when stderr fails, and the daemon must
    // keep serving whatever its log's destination does.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => {
            fmt.json().flatten_event(true).with_current_span(false).with_span_list(false).init();
        }
        LogFormat::Text => {
            let fmt = fmt.with_ansi(std::io::stderr().is_terminal());
            if std::env::var_os("JOURNAL_STREAM").is_some() {
                fmt.without_time().init();
            } else {
                fmt.init();
            }
        }
    }
}
