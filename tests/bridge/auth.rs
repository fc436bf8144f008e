//! The bridge against an authenticated nats-server: the shipped `bridge/nats.conf` (users with
//! permissions, passwords from the server's environment), then the same with TLS and client
//! certificates. Jobs go through with the right credentials; a client without them, or with a
//! wrong password, or without its certificate, is refused (the bridge ends at once, naming the
//! options to give); the workers' user cannot add jobs.

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(45);
/// The server configuration the book's "Many hosts" page shows, as shipped.
const NATS_CONF: &str = include_str!("../../bridge/nats.conf");
const PRODUCER_PW: &str = "producer-pw-1";
const WORKER_PW: &str = "worker-pw-2";

/// The shipped `nats.conf`, listening on `port` with its store in `store`, with an admin
/// user added for the test's own look at the stream, and `extra` after its `listen` line.
fn shipped_config(port: u16, store: &Path, extra: &str) -> String {
    let conf = NATS_CONF.to_string();
    for line in ["listen: 0.0.0.0:4222\n", "store_dir: /var/lib/nats", "users: ["] {
        assert!(conf.contains(line), "bridge/nats.conf has {line:?}:\n{conf}");
    }
    conf.replace("listen: 0.0.0.0:4222\n", &format!("listen: 127.0.0.1:{port}\n{extra}\n"))
        .replace("store_dir: /var/lib/nats", &format!("store_dir: {:?}", store.display().to_string()))
        .replace("users: [", "users: [\n    { user: admin, password: admin-pw }")
}

fn start(test: &str, extra: &str) -> Option<Nats> {
    let env = [("XTCQ_PRODUCER_PASSWORD", PRODUCER_PW), ("XTCQ_WORKER_PASSWORD", WORKER_PW)];
    Nats::start_with_config(test, ("admin", "admin-pw"), &env, |port, store| {
        shipped_config(port, store, extra)
    })
}

/// A password file of mode 0600 in `dir`.
fn password_file(dir: &Path, name: &str, password: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{password}\n")).expect("write password");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    p.to_str().expect("utf8").to_string()
}

/// `xtcq-bridge ARGS` on `host`, which must end by itself: its exit code and log.
fn run_to_exit(host: &Host, nats: &Nats, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let log = host.dir().join(format!("refused-{}.log", std::process::id() ^ args.len() as u32));
    let _ = std::fs::remove_file(&log);
    let mut c = Command::new(exe::bridge_exe());
    c.args(args).args(["--nats", &nats.url(), "--stream", "JOBS"]).arg("--socket").arg(host.socket());
    if args[0] == "out" {
        c.arg("--id-secret").arg(host.id_secret());
    }
    c.env_remove("XTCQ_NATS_PASSWORD").env_remove("XTCQ_NATS_USER");
    c.envs(env.iter().copied());
    let mut p = Proc::spawn(c, log);
    let status = p.wait(LONG);
    (status.code(), p.log_text())
}

fn append(file: &Path) -> String {
    format!("echo \"$XTCQ_PAYLOAD\" >> {}", file.display())
}

#[test]
fn the_shipped_authenticated_server_carries_jobs_and_refuses_strangers() {
    let Some(nats) = start("the_shipped_authenticated_server_carries_jobs_and_refuses_strangers", "") else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "2s"], b"");
    let pa = password_file(a.dir(), "nats.password", PRODUCER_PW);
    let pb = password_file(b.dir(), "nats.password", WORKER_PW);
    let producer = ["--nats-user", "producer", "--nats-password-file", pa.as_str()];
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &producer, &[]);
    let worker =
        ["--consumer", "workers", "--ack-wait", "10s", "--nats-user", "worker", "--nats-password-file", &pb];
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &worker, &[]);
    let (names, text) = payloads(20);
    a.ok(&["push", "q"], &text);
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &append(&runs));
    inb.wait_for(LONG, "every job acked upstream", |i| i.stat("acked") == 20);
    let counts = line_counts(&runs);
    assert!(names.iter().all(|n| counts.get(n) == Some(&1)), "each job ran once: {counts:?}");
    out.stop();
    for (side, log) in [("out", out.proc.log_text()), ("in", inb.proc.log_text())] {
        assert!(!log.contains("Permissions Violation"), "the shipped permissions suffice for {side}: {log}");
    }
    // The password from the environment instead of a file.
    let env = [("XTCQ_NATS_USER", "producer"), ("XTCQ_NATS_PASSWORD", PRODUCER_PW)];
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &env);
    a.ok(&["push", "q"], b"from-env\n");
    inb.wait_for(LONG, "the job acked upstream", |i| i.stat("acked") == 21);
    out.stop();

    // Strangers: no credentials, a wrong password. Each bridge ends at once, taking nothing.
    a.ok(&["push", "q"], b"kept\n");
    let wrong = password_file(a.dir(), "wrong.password", "guess");
    for args in [
        &["out", "q"][..],
        &["out", "q", "--nats-user", "producer", "--nats-password-file", &wrong][..],
        &["in", "q", "--consumer", "workers"][..],
    ] {
        let host = if args[0] == "out" { &a } else { &b };
        let (code, log) = run_to_exit(host, &nats, args, &[]);
        assert_eq!(code, Some(2), "{args:?} refused: {log}");
        assert!(log.contains("authorization violation") && log.contains("--nats-user"), "{args:?}: {log}");
    }
    assert_eq!(a.live("q"), 1, "the refused bridges took no job");
    let (code, log) = run_to_exit(&a, &nats, &["out", "q", "--nats-user", "producer"], &[]);
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("needs a password: set XTCQ_NATS_PASSWORD or give --nats-password-file"), "{log}");

    // Any other client: refused without credentials; the workers' user may not add jobs.
    let (refused, violation) = other_clients(&nats);
    assert!(refused.contains("authorization violation"), "{refused}");
    assert!(violation.contains("Permissions Violation for Publish to \"xtcq.jobs.q\""), "{violation}");
    assert_eq!(nats.messages("JOBS"), 0, "the worker's publish was not stored");
    inb.stop();
    a.check();
    b.check();
}

/// A client without credentials (its connect error), and the worker user publishing a job
/// (the server's answer).
fn other_clients(nats: &Nats) -> (String, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let refused = match async_nats::connect(nats.url()).await {
            Ok(_) => "connected".to_string(),
            Err(e) => e.to_string(),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let c = async_nats::ConnectOptions::with_user_and_password("worker".into(), WORKER_PW.into())
            .event_callback(move |e| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(e.to_string());
                }
            })
            .connect(nats.url())
            .await
            .expect("the worker user connects");
        c.publish("xtcq.jobs.q", "forged".into()).await.expect("publish sent");
        c.flush().await.expect("flush");
        let violation = tokio::time::timeout(LONG, async {
            loop {
                match rx.recv().await {
                    Some(e) if e.contains("Permissions Violation") => return e,
                    Some(_) => {}
                    None => return "events ended".to_string(),
                }
            }
        })
        .await
        .unwrap_or_else(|_| "no answer".to_string());
        (refused, violation)
    })
}

/// `openssl ARGS` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &str) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("openssl {args}"))
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(o.status.success(), "openssl {args}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn certificates(dir: &Path) -> Option<PathBuf> {
    if Command::new("openssl").arg("version").output().is_err() {
        xtcq_testkit::skipped("the TLS test: openssl not installed (apt-get install openssl)");
        return None;
    }
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    openssl(dir, &format!("req -x509 {key} -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=xtcq-test-ca"));
    for (name, ext) in [("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")]
    {
        openssl(dir, &format!("req {key} -keyout {name}-key.pem -out {name}.csr -subj /CN={name}"));
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext");
        openssl(
            dir,
            &format!(
                "x509 -req -in {name}.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out {name}.pem \
                 -days 2 -extfile {name}.ext"
            ),
        );
    }
    Some(dir.to_path_buf())
}

#[test]
fn tls_with_client_certificates_carries_jobs_and_refuses_a_bridge_without_its_certificate() {
    let certs = tempfile::tempdir().expect("tempdir");
    let Some(d) = certificates(certs.path()) else { return };
    let f = |n: &str| d.join(n).to_str().expect("utf8").to_string();
    let tls = format!(
        "tls {{ cert_file: {:?}, key_file: {:?}, ca_file: {:?}, verify: true }}",
        f("server.pem"),
        f("server-key.pem"),
        f("ca.pem")
    );
    let Some(nats) = start("tls_with_client_certificates_carries_jobs", &tls) else { return };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "2s"], b"");
    let (ca, cert, key) = (f("ca.pem"), f("client.pem"), f("client-key.pem"));
    let tls_args =
        ["--nats-tls-ca", ca.as_str(), "--nats-tls-cert", cert.as_str(), "--nats-tls-key", key.as_str()];
    let pa = password_file(a.dir(), "nats.password", PRODUCER_PW);
    let pb = password_file(b.dir(), "nats.password", WORKER_PW);
    let mut out_args = vec!["--nats-user", "producer", "--nats-password-file", &pa];
    out_args.extend(tls_args);
    let mut in_args = vec!["--consumer", "workers", "--nats-user", "worker", "--nats-password-file", &pb];
    in_args.extend(tls_args);
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &out_args, &[]);
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args, &[]);
    let (names, text) = payloads(10);
    a.ok(&["push", "q"], &text);
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &append(&runs));
    inb.wait_for(LONG, "every job acked upstream over TLS", |i| i.stat("acked") == 10);
    let counts = line_counts(&runs);
    assert!(names.iter().all(|n| counts.get(n) == Some(&1)), "each job ran once: {counts:?}");
    // The right password, the server's CA, but no client certificate: refused at once.
    let args = ["out", "q", "--nats-user", "producer", "--nats-password-file", &pa, "--nats-tls-ca", &ca];
    let (code, log) = run_to_exit(&a, &nats, &args, &[]);
    assert_eq!(code, Some(2), "refused: {log}");
    assert!(log.contains("--nats-tls-cert"), "names the option: {log}");
    out.stop();
    inb.stop();
}
