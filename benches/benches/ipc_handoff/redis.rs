//! Redis for the bench: a private `redis-server` and a minimal RESP2 client.

use super::*;

/// A minimal RESP2 client: commands out, and the few reply shapes this bench expects in.
/// Hand-rolled so that a Redis message costs what the protocol costs (one `write` and one
/// `read` per command on each side), with no client library's own work in the figures.
pub(crate) mod resp {
    use std::io::{self, Read, Write};
    use std::ops::Range;
    use std::os::unix::net::UnixStream;
    use std::path::Path;

    pub struct Conn {
        stream: UnixStream,
        out: Vec<u8>,
        buf: Vec<u8>,
        start: usize,
        end: usize,
    }

    pub(crate) fn bad(what: &str, got: &[u8]) -> io::Error {
        let got = String::from_utf8_lossy(&got[..got.len().min(120)]);
        io::Error::new(io::ErrorKind::InvalidData, format!("redis: expected {what}, got {got:?}"))
    }

    impl Conn {
        pub fn connect(path: &Path) -> io::Result<Conn> {
            let stream = UnixStream::connect(path)?;
            Ok(Conn { stream, out: Vec::with_capacity(4096), buf: vec![0; 16 * 1024], start: 0, end: 0 })
        }

        /// Appends one command to what `flush` sends.
        pub fn queue(&mut self, args: &[&[u8]]) {
            write!(self.out, "*{}\r\n", args.len()).expect("writing to a Vec");
            for a in args {
                write!(self.out, "${}\r\n", a.len()).expect("writing to a Vec");
                self.out.extend_from_slice(a);
                self.out.extend_from_slice(b"\r\n");
            }
        }

        pub fn flush(&mut self) -> io::Result<()> {
            self.stream.write_all(&self.out)?;
            self.out.clear();
            Ok(())
        }

        /// Reads more from the server (one `read`), keeping what is not consumed yet.
        fn fill(&mut self) -> io::Result<()> {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let n = loop {
                match self.stream.read(&mut self.buf[self.end..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r?,
                }
            };
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "redis closed the connection"));
            }
            self.end += n;
            Ok(())
        }

        /// The next reply's first line: its type byte and the rest (a range of `buf`, valid
        /// until the next `fill`). An error reply (`-ERR ...`) is an `Err`.
        fn header(&mut self) -> io::Result<(u8, Range<usize>)> {
            let r = loop {
                if let Some(i) = self.buf[self.start..self.end].windows(2).position(|w| w == b"\r\n") {
                    let r = self.start..self.start + i;
                    self.start += i + 2;
                    break r;
                }
                self.fill()?;
            };
            match self.buf[r.clone()] {
                [] => Err(bad("a reply", b"an empty line")),
                [b'-', ref msg @ ..] => Err(io::Error::other(format!(
                    "redis replied with an error: {}",
                    String::from_utf8_lossy(msg)
                ))),
                [t, ..] => Ok((t, r.start + 1..r.end)),
            }
        }

        /// The number after a header of type `want` (`:` integer, `$` bulk length, `*` array
        /// length).
        fn number(&self, (t, r): (u8, Range<usize>), want: u8, what: &str) -> io::Result<i64> {
            let line = &self.buf[r.start - 1..r.end];
            let n = std::str::from_utf8(&line[1..]).ok().and_then(|x| x.parse().ok());
            match n {
                Some(n) if t == want => Ok(n),
                _ => Err(bad(what, line)),
            }
        }

        /// A simple-string reply equal to `want` (`PONG`, `OK`).
        pub fn read_status(&mut self, want: &str) -> io::Result<()> {
            let (t, r) = self.header()?;
            if t == b'+' && self.buf[r.clone()] == *want.as_bytes() {
                Ok(())
            } else {
                Err(bad(&format!("+{want}"), &self.buf[r.start - 1..r.end]))
            }
        }

        /// An integer reply (`LPUSH`: the list's new length).
        pub fn read_int(&mut self) -> io::Result<i64> {
            let h = self.header()?;
            self.number(h, b':', "an integer reply")
        }

        /// A bulk-string reply into `out`; `Ok(false)` for nil (`RPOP` of an empty list).
        pub fn read_bulk(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
            let h = self.header()?;
            let Ok(n) = usize::try_from(self.number(h, b'$', "a bulk string")?) else {
                return Ok(false); // $-1
            };
            while self.end - self.start < n + 2 {
                self.fill()?;
            }
            let body = self.start..self.start + n;
            if self.buf[body.end..body.end + 2] != *b"\r\n" {
                return Err(bad("CRLF after a bulk string", &self.buf[body.end..body.end + 2]));
            }
            out.clear();
            out.extend_from_slice(&self.buf[body]);
            self.start += n + 2;
            Ok(true)
        }

        /// `BRPOP`'s reply: the array (key, value); the value ends up in `out`.
        pub fn read_brpop(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
            let h = self.header()?;
            let n = self.number(h, b'*', "BRPOP's array (key, value)")?;
            if n != 2 {
                return Err(bad("BRPOP's array of 2 (key, value)", format!("an array of {n}").as_bytes()));
            }
            for what in ["BRPOP's key", "BRPOP's value"] {
                if !self.read_bulk(out)? {
                    return Err(bad(what, b"nil"));
                }
            }
            Ok(())
        }
    }
}

/// A private `redis-server` on a Unix socket in a temporary directory. Dropping it (at the
/// end, or while a panic unwinds) kills the server, so none outlives the bench.
pub(crate) struct RedisServer {
    child: Child,
    pub(crate) socket: PathBuf,
    pub(crate) version: String,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one and waits for it to answer PING; `Err` says why there is none.
    pub(crate) fn start() -> Result<RedisServer, String> {
        let exe = match std::env::var_os("XTCQ_BENCH_REDIS_SERVER") {
            Some(p) => PathBuf::from(p),
            None => std::env::var_os("PATH")
                .and_then(|path| {
                    std::env::split_paths(&path).map(|d| d.join("redis-server")).find(|p| p.is_file())
                })
                .ok_or(
                    "no redis-server on PATH (apt-get install redis-server, or set XTCQ_BENCH_REDIS_SERVER)",
                )?,
        };
        let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
        let socket = dir.path().join("redis.sock");
        let log = dir.path().join("redis.log");
        let logf = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let logf2 = logf.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(&exe)
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(logf)
            .stderr(logf2)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let mut server = RedisServer { child, socket, version: String::new(), _dir: dir };
        let log_text = || {
            let t = std::fs::read_to_string(&log).unwrap_or_default();
            if t.trim().is_empty() {
                "(empty)".to_string()
            } else {
                t
            }
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = server.child.try_wait() {
                return Err(format!(
                    "{} exited ({st}) before answering PING; its log:\n{}",
                    exe.display(),
                    log_text()
                ));
            }
            match server.hello() {
                Ok(v) => {
                    server.version = v;
                    return Ok(server);
                }
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "{} did not answer PING in 10 s ({e}); its log:\n{}",
                        exe.display(),
                        log_text()
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// PING, then the server's version from INFO.
    pub(crate) fn hello(&self) -> std::io::Result<String> {
        let mut c = resp::Conn::connect(&self.socket)?;
        c.queue(&[b"PING"]);
        c.queue(&[b"INFO", b"server"]);
        c.flush()?;
        c.read_status("PONG")?;
        let mut info = Vec::new();
        c.read_bulk(&mut info)?;
        let info = String::from_utf8_lossy(&info);
        Ok(info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("?").trim().to_string())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
