//! `xtcqd --config FILE`: the daemon's options from a TOML file, each key a flag's long name
//! (`records = 65536`, `lease-scan-interval = "100ms"`, `allow-uid = ["alice", "bob"]`,
//! `recreate = true`; `_` may stand for `-`), so the file and `--help` cannot disagree.
//!
//! Precedence: a flag on the command line beats the file (a list given there replaces the
//! file's list), and an environment variable a flag reads (`XTCQ_SOCKET`, `XTCQ_SEGMENT`)
//! beats the file too; the file beats the defaults. It works by turning the file into flags
//! put before the command line's, which clap then reads as any others (later wins).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory};

/// Why the configuration file could not be used (exit status 2, as for a bad flag).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// `--config` was the last argument.
    #[error("--config needs a file path")]
    NoPath,
    /// The file could not be read.
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("config file {} is not valid TOML: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with the line and column).
        message: String,
    },
    /// A key that names no flag.
    #[error("config file {}: unknown option {key:?}; the options are xtcqd's flags: {known}", path.display())]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The keys there are.
        known: String,
    },
    /// Two keys that spell one flag (`_` for `-`): which one meant what cannot be told.
    #[error("config file {}: {first:?} and {second:?} both name --{flag}; keep one of them", path.display())]
    SameFlagTwice {
        /// The file.
        path: PathBuf,
        /// The flag's long name.
        flag: String,
        /// The key that came first.
        first: String,
        /// The other.
        second: String,
    },
    /// A value of the wrong kind for its flag.
    #[error("config file {}: {key}: {why}", path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What was wrong.
        why: String,
    },
}

/// The path given with `--config PATH` / `--config=PATH`, if any.
fn config_path(argv: &[OsString]) -> Result<Option<PathBuf>, ConfigFileError> {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return it.next().map(|p| Some(PathBuf::from(p))).ok_or(ConfigFileError::NoPath);
        }
        if let Some(p) = s.strip_prefix("--config=") {
            return Ok(Some(PathBuf::from(p)));
        }
    }
    Ok(None)
}

/// Whether `--long` is given on the command line.
fn on_command_line(argv: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    argv.iter().skip(1).any(|a| {
        let s = a.to_string_lossy();
        s == flag || s.starts_with(&format!("{flag}="))
    })
}

/// `argv` with the options of its `--config` file (if any) put before its own flags.
pub fn argv(argv: impl IntoIterator<Item = OsString>) -> Result<Vec<OsString>, ConfigFileError> {
    let argv: Vec<OsString> = argv.into_iter().collect();
    let Some(path) = config_path(&argv)? else { return Ok(argv) };
    let text = std::fs::read_to_string(&path)
        .map_err(|source| ConfigFileError::Read { path: path.clone(), source })?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigFileError::Parse {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let mut cmd = crate::Args::command();
    cmd.build();
    let mut flags = Vec::new();
    let mut seen: std::collections::BTreeMap<String, &String> = Default::default();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        if let Some(first) = seen.insert(long.clone(), key) {
            return Err(ConfigFileError::SameFlagTwice {
                path: path.clone(),
                flag: long,
                first: first.clone(),
                second: key.clone(),
            });
        }
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config" && !a.is_hide_set())
            .ok_or_else(|| unknown(&cmd, &path, key))?;
        let env_set = arg.get_env().is_some_and(|v: &OsStr| std::env::var_os(v).is_some());
        if env_set || on_command_line(&argv, &long) {
            continue;
        }
        let bad =
            |why: &str| ConfigFileError::BadValue { path: path.clone(), key: key.clone(), why: why.into() };
        flags.extend(to_flags(&long, value, arg.get_action()).map_err(|w| bad(&w))?);
    }
    let mut out = vec![argv.first().cloned().unwrap_or_else(|| "xtcqd".into())];
    out.extend(flags);
    out.extend(argv.into_iter().skip(1));
    Ok(out)
}

fn unknown(cmd: &clap::Command, path: &Path, key: &str) -> ConfigFileError {
    let known: Vec<&str> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !["config", "help", "version"].contains(l))
        .collect();
    ConfigFileError::UnknownKey { path: path.to_path_buf(), key: key.to_string(), known: known.join(", ") }
}

/// The flags one key stands for.
fn to_flags(long: &str, value: &toml::Value, action: &ArgAction) -> Result<Vec<OsString>, String> {
    let flag = OsString::from(format!("--{long}"));
    let scalar = |v: &toml::Value| -> Result<OsString, String> {
        match v {
            toml::Value::String(s) => Ok(s.into()),
            toml::Value::Integer(i) => Ok(i.to_string().into()),
            toml::Value::Float(f) => Ok(f.to_string().into()),
            _ => Err(format!("expected a string or a number, not {}", v.type_str())),
        }
    };
    match (action, value) {
        (ArgAction::SetTrue, toml::Value::Boolean(true)) => Ok(vec![flag]),
        (ArgAction::SetTrue, toml::Value::Boolean(false)) => Ok(vec![]),
        (ArgAction::SetTrue, v) => Err(format!("expected true or false, not {}", v.type_str())),
        // An empty list is the flag given empty (`--payload-blocks ""`: no classes), as on
        // the command line, not the flag left out (the default classes).
        (ArgAction::Append, toml::Value::Array(items)) if items.is_empty() => {
            Ok(vec![joined(long, "".into())])
        }
        (ArgAction::Append, toml::Value::Array(items)) => {
            items.iter().map(|v| Ok(joined(long, scalar(v)?))).collect()
        }
        (ArgAction::Append, v) => Ok(vec![joined(long, scalar(v)?)]),
        (_, toml::Value::Array(_)) => Err("takes one value, not a list".into()),
        (_, v) => Ok(vec![joined(long, scalar(v)?)]),
    }
}

/// `--long=value`, one argument: a value that starts with `-` (`records = -5`, a path
/// `-dumps/x`) is then the key's value, not taken for a flag of its own.
fn joined(long: &str, value: OsString) -> OsString {
    let mut a = OsString::from(format!("--{long}="));
    a.push(value);
    a
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::ConfigFileError;

    fn args(file: &str, cli: &[&str]) -> Result<Vec<String>, ConfigFileError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("xtcqd.toml");
        std::fs::write(&p, file).unwrap();
        let mut argv: Vec<OsString> = vec!["xtcqd".into(), "--config".into(), p.clone().into()];
        argv.extend(cli.iter().map(OsString::from));
        let out = super::argv(argv)?;
        Ok(out
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .filter(|a| !a.ends_with("xtcqd.toml"))
            .collect())
    }

    #[test]
    fn keys_become_flags_before_the_command_lines() {
        let a = args(
            "records = 1024\nlease_scan_interval = \"20ms\"\nrecreate = true\nno-allow-self = false\nallow-uid = [\"0\", \"1\"]\n",
            &["--records", "2048"],
        )
        .unwrap();
        // The command line's --records is left to win; the rest come from the file.
        assert!(!a.contains(&"1024".to_string()), "{a:?}");
        assert!(a.contains(&"--lease-scan-interval=20ms".to_string()), "{a:?}");
        assert!(
            a.contains(&"--recreate".to_string()) && !a.contains(&"--no-allow-self".to_string()),
            "{a:?}"
        );
        assert_eq!(a.iter().filter(|x| x.starts_with("--allow-uid=")).count(), 2, "{a:?}");
    }

    #[test]
    fn a_repeated_flag_overrides_itself_and_lists_still_add_up() {
        use clap::Parser;
        let a = crate::Args::parse_from([
            "xtcqd",
            "--records",
            "1",
            "--records",
            "2",
            "--allow-uid",
            "1",
            "--allow-uid",
            "2",
        ]);
        assert_eq!(a.records, Some(2));
        assert_eq!(a.allow_uid, ["1", "2"]);
    }

    #[test]
    fn two_spellings_of_one_flag_are_refused() {
        let e = args("payload_blocks = \"128=1\"\npayload-blocks = \"256=2\"\n", &[]).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("\"payload-blocks\" and \"payload_blocks\" both name --payload-blocks"), "{m}");
        assert!(args("records = 1\nrecords_x = 2\n", &[]).is_err_and(|e| e.to_string().contains("unknown")));
    }

    #[test]
    fn payload_blocks_add_up_from_flags_and_from_a_list_in_the_file() {
        use clap::Parser;
        let a = crate::Args::parse_from(["xtcqd", "--payload-blocks", "128=1", "--payload-blocks", "4KiB=2"]);
        assert_eq!(a.payload_blocks, ["128=1", "4KiB=2"]);
        // `args` leaves out the file's path, so leave out `--config` too.
        let parsed = |file: &str, cli: &[&str]| {
            let argv = args(file, cli).unwrap().into_iter().filter(|a| a != "--config");
            crate::Args::parse_from(argv.collect::<Vec<_>>()).payload_blocks
        };
        assert_eq!(parsed("payload-blocks = [\"128=1\", \"256=2\"]\n", &[]), ["128=1", "256=2"]);
        // An empty list in the file means what an empty flag means: no classes.
        assert_eq!(parsed("payload-blocks = []\n", &[]), [""]);
        // The command line's flag replaces the file's list rather than adding to it.
        assert_eq!(parsed("payload-blocks = [\"128=1\"]\n", &["--payload-blocks", "256=2"]), ["256=2"]);
    }

    #[test]
    fn the_metrics_listener_comes_from_the_file_too() {
        use clap::Parser;
        let a = args("metrics = \"127.0.0.1:9187\"\n", &[]).unwrap();
        assert!(a.contains(&"--metrics=127.0.0.1:9187".to_string()), "{a:?}");
        let parsed = crate::Args::parse_from(["xtcqd", "--metrics", "127.0.0.1:9187"]);
        let c = crate::startup::config::Config::from_args(&parsed).unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9187".parse().unwrap()));
        assert!(crate::Args::try_parse_from(["xtcqd", "--metrics", "nowhere"]).is_err());
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let e = args("recordz = 1\n", &[]).unwrap_err().to_string();
        assert!(e.contains("unknown option \"recordz\"") && e.contains("records"), "{e}");
        let e = args("recreate = \"yes\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("recreate: expected true or false"), "{e}");
        let e = args("records = [1, 2]\n", &[]).unwrap_err().to_string();
        assert!(e.contains("takes one value"), "{e}");
        let e = args("records = \n", &[]).unwrap_err().to_string();
        assert!(e.contains("not valid TOML"), "{e}");
    }
}
