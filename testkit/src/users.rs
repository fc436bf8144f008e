//! Users and groups made for one test, for the trust boundary between users.

use std::process::Command;

/// A user and a group created for one test (as root), removed when dropped.
pub struct SystemUser {
    /// The user's name.
    pub user: String,
    /// Its primary group's name.
    pub group: String,
}

impl SystemUser {
    /// `user` with primary group `group` (created too, unless it exists).
    pub fn create(user: &str, group: &str) -> SystemUser {
        let have_group =
            Command::new("getent").args(["group", group]).output().expect("getent").status.success();
        if !have_group {
            let s = Command::new("groupadd").arg(group).status().expect("groupadd");
            assert!(s.success(), "groupadd {group}");
        }
        let s = Command::new("useradd").args(["-M", "-N", "-g", group, "-s", "/bin/false", user]).status();
        assert!(s.expect("useradd").success(), "useradd {user}");
        SystemUser { user: user.into(), group: group.into() }
    }

    /// `id FLAG USER` as a number (`-u`, `-g`).
    pub fn id(&self, flag: &str) -> u32 {
        let o = Command::new("id").args([flag, &self.user]).output().expect("id");
        String::from_utf8_lossy(&o.stdout).trim().parse().expect("id prints a number")
    }
}

impl Drop for SystemUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).status();
        let _ = Command::new("groupdel").arg(&self.group).status();
    }
}

/// Whether this test runs as root (the cross-user tests need to make users).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
