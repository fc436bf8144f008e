//! How the bridge proves who it is to the NATS server, and checks the server: a user and
//! password or a token, TLS with the server's CA and a client certificate.
//!
//! Secrets never come from the command line (`ps` shows it to every local user): the password
//! and the token come from the environment (`XTCQ_NATS_PASSWORD`, `XTCQ_NATS_TOKEN`, e.g. a
//! systemd `EnvironmentFile` of mode 0600) or from a file named by a flag.
//! NKeys and `.creds` files (JWT) are not built in: they need async-nats's `nkeys` feature,
//! which this build leaves out; a user and password or TLS client certificates cover the same
//! ground here.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::BridgeError;

/// The credential and TLS options, shared by both directions.
#[derive(Debug, Args)]
pub struct NatsAuth {
    /// The NATS user; its password comes from $XTCQ_NATS_PASSWORD or --nats-password-file
    /// (never from the command line, which other local users can read).
    #[arg(long, env = "XTCQ_NATS_USER")]
    pub nats_user: Option<String>,
    /// A file whose first line is the NATS user's password (instead of $XTCQ_NATS_PASSWORD).
    #[arg(long, env = "XTCQ_NATS_PASSWORD_FILE", requires = "nats_user")]
    pub nats_password_file: Option<PathBuf>,
    /// A file whose first line is a NATS token (instead of $XTCQ_NATS_TOKEN).
    #[arg(long, env = "XTCQ_NATS_TOKEN_FILE", conflicts_with = "nats_user")]
    pub nats_token_file: Option<PathBuf>,
    /// The CA certificate(s), PEM, that the server's TLS certificate must chain to (TLS is
    /// then required).
    #[arg(long, env = "XTCQ_NATS_TLS_CA")]
    pub nats_tls_ca: Option<PathBuf>,
    /// This bridge's TLS client certificate, PEM, for a server that verifies clients (with
    /// --nats-tls-key).
    #[arg(long, env = "XTCQ_NATS_TLS_CERT", requires = "nats_tls_key")]
    pub nats_tls_cert: Option<PathBuf>,
    /// The private key, PEM, of --nats-tls-cert.
    #[arg(long, env = "XTCQ_NATS_TLS_KEY", requires = "nats_tls_cert")]
    pub nats_tls_key: Option<PathBuf>,
    /// Refuse a server that does not speak TLS (also implied by --nats-tls-ca and a tls:// URL).
    #[arg(long)]
    pub nats_tls: bool,
}

/// The first line of `path`, for option `flag`.
fn secret_file(flag: &'static str, path: &Path) -> Result<String, BridgeError> {
    let bad = |message: String| BridgeError::Credentials { flag, message };
    let text =
        std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.is_empty() {
        return Err(bad(format!("{} is empty; its first line must hold the secret", path.display())));
    }
    Ok(line)
}

/// `$name`, when set and not empty.
fn env_secret(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn readable(flag: &'static str, path: &Path) -> Result<(), BridgeError> {
    std::fs::File::open(path).map(|_| ()).map_err(|e| BridgeError::Credentials {
        flag,
        message: format!("cannot read {}: {e}", path.display()),
    })
}

impl NatsAuth {
    /// `opts` with these credentials and TLS settings; a missing or unreadable one is an error
    /// naming its option, before any connection.
    pub fn apply(
        &self,
        mut opts: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, BridgeError> {
        if let Some(user) = &self.nats_user {
            let password = match &self.nats_password_file {
                Some(p) => secret_file("--nats-password-file", p)?,
                None => env_secret("XTCQ_NATS_PASSWORD").ok_or(BridgeError::Credentials {
                    flag: "--nats-user",
                    message: format!(
                        "user {user:?} needs a password: set XTCQ_NATS_PASSWORD or give --nats-password-file"
                    ),
                })?,
            };
            opts = opts.user_and_password(user.clone(), password);
        } else if env_secret("XTCQ_NATS_PASSWORD").is_some() {
            return Err(BridgeError::Credentials {
                flag: "XTCQ_NATS_PASSWORD",
                message: "is set without a user: give --nats-user (or $XTCQ_NATS_USER)".into(),
            });
        }
        let token = match &self.nats_token_file {
            Some(p) => Some(secret_file("--nats-token-file", p)?),
            None => env_secret("XTCQ_NATS_TOKEN"),
        };
        if let Some(t) = token {
            if self.nats_user.is_some() {
                return Err(BridgeError::Credentials {
                    flag: "XTCQ_NATS_TOKEN",
                    message: "and --nats-user are both given; the server takes one of them".into(),
                });
            }
            opts = opts.token(t);
        }
        if let Some(ca) = &self.nats_tls_ca {
            readable("--nats-tls-ca", ca)?;
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&self.nats_tls_cert, &self.nats_tls_key) {
            readable("--nats-tls-cert", cert)?;
            readable("--nats-tls-key", key)?;
            opts = opts.add_client_certificate(cert.clone(), key.clone());
        }
        if self.nats_tls {
            opts = opts.require_tls(true);
        }
        Ok(opts)
    }
}
