//! The exit statuses of `xtcq`, in one place so `--help`, the book and the code agree.

/// Done.
pub const OK: i32 = 0;
/// An error (a bad queue, a full queue, an oversized payload, a protocol error, …).
pub const ERROR: i32 = 1;
/// Bad arguments (clap's own status).
#[allow(dead_code)]
pub const USAGE: i32 = 2;
/// Nothing to do: `steal` found no job (or its `--timeout` passed), `dead` found no
/// dead letter.
pub const EMPTY: i32 = 3;
/// The daemon could not be reached (not running, no permission, connection lost, no answer
/// in time), or it refused this user (not allowed, by the daemon or the queue's
/// permissions; a per-user limit reached).
pub const UNREACHABLE: i32 = 4;
/// `check` found the segment inconsistent; `work` had jobs that failed; `demo` saw a job
/// lost or run twice.
pub const FAILED: i32 = 5;
/// `push --key` was refused: a live job of the queue holds the key (without
/// `--or-existing`).
pub const DUPLICATE: i32 = 6;

/// Printed at the end of `--help`.
pub const HELP: &str = "\
Exit status:
  0  done
  1  error (no such queue, queue full, payload too large, bad reply, out of fds, ...)
  2  bad arguments
  3  nothing to do: steal found no job or timed out; dead found no dead letter; wait's
     --timeout passed before its batch completed
  4  xtcqd not reachable: not running at the socket, permission denied, connection lost,
     no answer in time, or run by a user you do not trust (see XTCQ_TRUST_UID); or it
     refused this user: not allowed (to the daemon or the queue),
     a per-user limit reached (the message names the flag that raises it)
  5  check found the segment inconsistent; work ran jobs that failed; demo saw a job lost
     or run twice; wait's batch completed with jobs dead or cancelled
  6  push --key refused: a job of the queue with that key is queued, delayed or running
     (its id on stderr; --or-existing prints it and exits 0 instead)

Environment:
  XTCQ_SOCKET     the control socket (as --socket)
  XTCQ_TRUST_UID  users (names or uids, comma-separated) trusted to run xtcqd besides
                  yourself and root; any other daemon is refused (exit 4)";

/// The status for an error that ended a command.
pub fn for_error(e: &anyhow::Error) -> i32 {
    match e.downcast_ref::<xtcq_client::Error>() {
        // Out of fds or memory here is this process's trouble, not the daemon's (a connect
        // failing with EMFILE is also "unreachable").
        Some(c) if c.is_out_of_resources() => ERROR,
        Some(c) if c.is_unreachable() || c.is_refused() => UNREACHABLE,
        _ => ERROR,
    }
}

/// What an error that ended a command says: its message, then each cause the message does
/// not already say. Several errors put their cause in their own message and also name it as
/// their source, so printing the whole chain (`{:#}`) said it twice ("No such file or
/// directory (os error 2): No such file or directory (os error 2)").
pub fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.is_empty() {
            text = c;
        } else if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::message;
    use anyhow::Context;

    /// As the thiserror types of the library crates are: the cause in the message, and as
    /// the source too.
    #[derive(Debug)]
    struct Open {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Open {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_the_message_already_says_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let said = io.to_string();
        let e = anyhow::Error::new(Open { path: "a.dump", source: io });
        assert_eq!(message(&e), format!("cannot open a.dump: {said}"));
    }

    #[test]
    fn a_cause_the_message_does_not_say_is_added() {
        let e = Err::<(), _>(std::io::Error::from(std::io::ErrorKind::NotFound))
            .context("cannot export the segment")
            .unwrap_err();
        let said = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
        assert_eq!(message(&e), format!("cannot export the segment: {said}"));
    }
}
