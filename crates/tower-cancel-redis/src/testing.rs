//! A private `redis-server` for tests (the `test-support` feature): on a free loopback port, no config file
//! (Debian's would make it daemonize), no persistence, stopped by its pid.

use std::{
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Set to skip the tests that need Redis when `redis-server` is not installed (they fail otherwise: CI has it).
pub const SKIP_ENV: &str = "TOWER_CANCEL_SKIP_REDIS";

/// A `redis-server` process of a test's own; killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// A new server, or `None` (with a line saying so) when `redis-server` is missing and [`SKIP_ENV`] is set.
    pub fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            if std::env::var_os(SKIP_ENV).is_some() {
                eprintln!("SKIPPED: redis-server is not installed ({SKIP_ENV} is set)");
                return None;
            }
            panic!(
                "redis-server is not installed: `apt-get install redis-server` (CI installs it), or set \
                 {SKIP_ENV}=1 to skip the tests that need it"
            );
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
