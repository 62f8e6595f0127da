//! A private `redis-server` for tests (the `test-support` feature): on a free loopback port, no config file
//! (Debian's would make it daemonize), no persistence, stopped by its pid.
//!
//! A machine without `redis-server` skips the tests that need one, each saying so on the run's output, so that
//! `cargo test --workspace` passes on a fresh machine; [`REQUIRE_ENV`] makes them required instead (CI sets it).

use std::{
    io::{self, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Set (to `1`: anything but empty or `0`) to make a missing `redis-server` fail the tests that need it, rather than skip them:
/// `.ci/run` sets it, and installs Redis.
pub const REQUIRE_ENV: &str = "TOWER_CANCEL_REQUIRE_REDIS";

/// A `redis-server` process of a test's own; killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// A new server, or `None` when `redis-server` cannot be run: the test that asked for it is skipped (it
    /// returns), with a line on the run's output that says so and why. With [`REQUIRE_ENV`] set, it fails instead.
    pub fn start() -> Option<Self> {
        if let Err(missing) = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
        {
            let why = match missing.kind() {
                io::ErrorKind::NotFound => {
                    "redis-server not found on PATH (apt-get install redis-server)".to_owned()
                }
                _ => format!("redis-server could not be run ({missing})"),
            };
            if required() {
                panic!("{why}, and {REQUIRE_ENV} is set: the tests that need Redis are required");
            }
            skipped(&why);
            return None;
        }
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tower-cancel-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut server = Self {
            child: None,
            port,
            dir,
        };
        server.spawn();
        Some(server)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kill it (SIGKILL: an outage, not a shutdown) and wait for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        // Ready once it accepts a connection; a port taken meanwhile shows up as a server that never does.
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().unwrap().port()
}

/// Whether [`REQUIRE_ENV`] is set.
fn required() -> bool {
    std::env::var_os(REQUIRE_ENV).is_some_and(|value| !value.is_empty() && value != "0")
}

/// Say that the running test is skipped, and why. Straight to the process's standard error, not through
/// `eprintln!`: the test harness keeps what a passing test prints to itself, and a skip must be seen.
fn skipped(why: &str) {
    // The harness names each test's thread after the test.
    let thread = std::thread::current();
    let test = thread.name().filter(|name| *name != "main");
    let test = test.map(|name| format!("test {name} ")).unwrap_or_default();
    let _ = writeln!(
        io::stderr(),
        "{test}skipped: {why}; set {REQUIRE_ENV}=1 to make this a failure"
    );
}
