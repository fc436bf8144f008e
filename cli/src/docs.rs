//! `xtcq completions SHELL` and `xtcq man --dir DIR`: shell completions and man pages made
//! from the same clap definitions as `--help`, so the three cannot disagree.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};

use crate::{exit, out};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for; e.g. `xtcq completions bash > /etc/bash_completion.d/xtcq`,
    /// `xtcq completions zsh > "${fpath[1]}/_xtcq"`,
    /// `xtcq completions fish > ~/.config/fish/completions/xtcq.fish`.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `xtcq`'s command without its hidden internal subcommands (`__xtcqd`, `__demo-role`),
/// which clap_complete would offer beside the real ones.
fn public_command() -> clap::Command {
    let full = crate::Cli::command();
    let mut cmd = clap::Command::new("xtcq").args(full.get_arguments().cloned());
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

pub fn completions(a: CompletionsArgs) -> Result<i32> {
    let mut cmd = public_command();
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "xtcq", &mut script);
    out::print(script)?;
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Where to write the pages: xtcq.1, one xtcq-SUBCOMMAND.1 per subcommand, and xtcqd.1
    /// (e.g. /usr/local/share/man/man1); created if missing.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

pub fn man(a: ManArgs) -> Result<i32> {
    let dir = &a.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let write = |cmd: clap::Command| {
        clap_mangen::generate_to(cmd, dir)
            .with_context(|| format!("cannot write man pages into {}", dir.display()))
    };
    write(crate::Cli::command())?;
    write(xtcqd::Args::command())?;
    eprintln!("xtcq: wrote the man pages of xtcq and xtcqd into {}", dir.display());
    Ok(exit::OK)
}
