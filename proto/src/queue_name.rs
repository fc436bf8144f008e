//! Which queue names exist, and how a name read from the segment is printed.
//!
//! A name is 1 to [`MAX_QUEUE_NAME`] bytes of ASCII letters, digits, `_`, `-` and `.` (as
//! SQS queue names and NATS subject tokens are): no terminal escapes, no look-alikes
//! (zero-width characters, right-to-left overrides), no `/`, so a name is safe in a log
//! line, a file name and a shell word. The daemon refuses any other name at creation; the
//! client checks first for an early, clear error.
//!
//! Names already in a segment (written by an older daemon, or scribbled by an attached
//! process) may be anything: [`escaped`] is how every reader prints them.

use std::borrow::Cow;

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME: usize = 64;

/// Why a queue name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueNameError {
    /// The empty name.
    #[error("a queue name may not be empty; use 1 to {MAX_QUEUE_NAME} letters, digits, '_', '-' or '.'")]
    Empty,
    /// Too long.
    #[error(
        "queue name \"{}\" is {len} bytes; the most is {MAX_QUEUE_NAME} (letters, digits, '_', '-' or '.')",
        escaped(name)
    )]
    TooLong {
        /// The name.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A character outside the portable set.
    #[error(
        "queue name \"{}\" has {} at byte {at}; a name may only use letters, digits, '_', '-' and '.'",
        escaped(name),
        char_label(*ch)
    )]
    BadChar {
        /// The name.
        name: String,
        /// The first character refused.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
}

fn char_label(c: char) -> String {
    if c.is_ascii_graphic() {
        format!("'{c}'")
    } else {
        format!("U+{:04X}", c as u32)
    }
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Checks that `name` is a valid queue name.
///
/// ```
/// use xtcq_proto::queue_name::check;
/// assert!(check("jobs.high-prio_2").is_ok());
/// assert!(check("../../etc").is_err());
/// assert!(check("a\u{202e}b").is_err());
/// ```
pub fn check(name: &str) -> Result<(), QueueNameError> {
    if name.is_empty() {
        return Err(QueueNameError::Empty);
    }
    if let Some((at, ch)) = name.char_indices().find(|(_, c)| !allowed(*c)) {
        return Err(QueueNameError::BadChar { name: name.into(), ch, at });
    }
    if name.len() > MAX_QUEUE_NAME {
        return Err(QueueNameError::TooLong { name: name.into(), len: name.len() });
    }
    Ok(())
}

/// `name` with everything but printable ASCII (and the backslash itself) written as
/// `\x1b` / `\u{202e}` escapes, for printing a name that came from the segment.
///
/// ```
/// assert_eq!(xtcq_proto::queue_name::escaped("jobs"), "jobs");
/// assert_eq!(xtcq_proto::queue_name::escaped("a\u{1b}[2Jb"), "a\\x1b[2Jb");
/// ```
pub fn escaped(name: &str) -> Cow<'_, str> {
    if name.chars().all(|c| c.is_ascii_graphic() && c != '\\' || c == ' ') {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' => out.push(' '),
            c if c.is_ascii_graphic() => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_portable_set_of_1_to_64_bytes() {
        for ok in ["a", "jobs", "A-b_c.9", &"x".repeat(64)] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert_eq!(check(""), Err(QueueNameError::Empty));
        assert!(matches!(check(&"x".repeat(65)), Err(QueueNameError::TooLong { len: 65, .. })));
        for (bad, at) in
            [("../../etc", 2), ("a b", 1), ("zero\u{200b}width", 4), ("rtl\u{202e}", 3), ("\u{1b}[2J", 0)]
        {
            match check(bad) {
                Err(QueueNameError::BadChar { at: a, .. }) => assert_eq!(a, at, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let e = check("esc\u{1b}[31m").unwrap_err().to_string();
        assert!(!e.contains('\u{1b}') && e.contains("U+001B") && e.contains("letters, digits"), "{e}");
    }

    #[test]
    fn escaping_leaves_nothing_a_terminal_acts_on() {
        assert_eq!(escaped("plain name.1"), "plain name.1");
        assert_eq!(escaped("a\\b"), "a\\\\b");
        assert_eq!(escaped("\u{1b}]0;pwned\u{7}"), "\\x1b]0;pwned\\x07");
        assert_eq!(escaped("l\u{202e}r\u{200b}"), "l\\u{202e}r\\u{200b}");
        assert!(escaped("\r\n\t\u{7f}").chars().all(|c| c.is_ascii_graphic()));
    }
}
