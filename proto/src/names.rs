//! Users and groups by name, through the system's name service.
//!
//! - One source of truth: every name is resolved with `getpwnam_r` / `getgrnam_r` (and ids
//!   printed with `getpwuid_r` / `getgrgid_r`), so the groups of an LDAP or sssd host resolve
//!   exactly as `id` and `getent` show them; nothing here reads `/etc/passwd` or `/etc/group`.
//! - A value that parses as a number is an id, whether or not a name maps to it (a uid with
//!   no passwd entry is still a uid the kernel reports for a peer).
//! - Printing never fails: an id the name service does not know is printed as the number
//!   alone, and a name-service error is treated the same way.

use nix::unistd::{Gid, Group, Uid, User};

/// A user or group name that does not resolve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    /// No user by that name.
    #[error(
        "no such user {0:?} (not a uid, and the name service has no such user; check `getent passwd {0}`)"
    )]
    NoSuchUser(String),
    /// No group by that name.
    #[error(
        "no such group {0:?} (not a gid, and the name service has no such group; check `getent group {0}`)"
    )]
    NoSuchGroup(String),
    /// The name service itself failed.
    #[error("cannot look up {what} {name:?}: {source}")]
    Lookup {
        /// "user" or "group".
        what: &'static str,
        /// The name asked for.
        name: String,
        /// The error `getpwnam_r` / `getgrnam_r` returned.
        source: nix::Error,
    },
}

/// A user name or number to a uid.
///
/// ```
/// assert_eq!(xtcq_proto::names::resolve_uid("0").unwrap(), 0);
/// assert_eq!(xtcq_proto::names::resolve_uid("root").unwrap(), 0);
/// assert!(xtcq_proto::names::resolve_uid("no-such-user-xyz").is_err());
/// ```
pub fn resolve_uid(user: &str) -> Result<u32, NameError> {
    if let Ok(n) = user.parse::<u32>() {
        return Ok(n);
    }
    match User::from_name(user) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(NameError::NoSuchUser(user.to_string())),
        Err(source) => Err(NameError::Lookup { what: "user", name: user.to_string(), source }),
    }
}

/// A group name or number to a gid.
///
/// ```
/// assert_eq!(xtcq_proto::names::resolve_gid("0").unwrap(), 0);
/// assert_eq!(xtcq_proto::names::resolve_gid("root").unwrap(), 0);
/// assert!(xtcq_proto::names::resolve_gid("no-such-group-xyz").is_err());
/// ```
pub fn resolve_gid(group: &str) -> Result<u32, NameError> {
    if let Ok(n) = group.parse::<u32>() {
        return Ok(n);
    }
    match Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(NameError::NoSuchGroup(group.to_string())),
        Err(source) => Err(NameError::Lookup { what: "group", name: group.to_string(), source }),
    }
}

/// The user name of `uid`, if the name service knows one.
///
/// ```
/// assert_eq!(xtcq_proto::names::user_name(0).as_deref(), Some("root"));
/// ```
pub fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}

/// The group name of `gid`, if the name service knows one.
///
/// ```
/// assert_eq!(xtcq_proto::names::group_name(0).as_deref(), Some("root"));
/// ```
pub fn group_name(gid: u32) -> Option<String> {
    Group::from_gid(Gid::from_raw(gid)).ok().flatten().map(|g| g.name)
}

/// `uid 1002 (alice)`, or `uid 1002` when the name service has no name for it.
///
/// ```
/// assert_eq!(xtcq_proto::names::uid_label(0), "uid 0 (root)");
/// ```
pub fn uid_label(uid: u32) -> String {
    match user_name(uid) {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// `gid 1002 (farm)`, or `gid 1002` when the name service has no name for it.
///
/// ```
/// assert_eq!(xtcq_proto::names::gid_label(0), "gid 0 (root)");
/// ```
pub fn gid_label(gid: u32) -> String {
    match group_name(gid) {
        Some(n) => format!("gid {gid} ({n})"),
        None => format!("gid {gid}"),
    }
}

/// `1002 (alice)` style labels for a list of uids, comma-separated.
pub fn uid_list_label(uids: &[u32]) -> String {
    uids.iter().map(|u| uid_label(*u)).collect::<Vec<_>>().join(", ")
}

/// `1002 (farm)` style labels for a list of gids, comma-separated.
pub fn gid_list_label(gids: &[u32]) -> String {
    gids.iter().map(|g| gid_label(*g)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_ids_even_without_a_name() {
        assert_eq!(resolve_uid("4000000000").unwrap(), 4_000_000_000);
        assert_eq!(resolve_gid("4000000000").unwrap(), 4_000_000_000);
        assert_eq!(uid_label(4_000_000_000), "uid 4000000000");
        assert_eq!(gid_label(4_000_000_000), "gid 4000000000");
    }

    #[test]
    fn unknown_names_say_which_name_and_how_to_check() {
        let e = resolve_uid("no-such-user-xyz").unwrap_err();
        assert_eq!(e, NameError::NoSuchUser("no-such-user-xyz".into()));
        assert!(e.to_string().contains("getent passwd no-such-user-xyz"), "{e}");
        let e = resolve_gid("no-such-group-xyz").unwrap_err();
        assert!(e.to_string().contains("getent group no-such-group-xyz"), "{e}");
    }

    #[test]
    fn lists_are_labelled() {
        assert_eq!(uid_list_label(&[0, 4_000_000_000]), "uid 0 (root), uid 4000000000");
        assert_eq!(gid_list_label(&[]), "");
    }
}
