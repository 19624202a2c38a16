//! One launcher of moto, the S3-compatible server from PyPI, for the
//! integration tests (`tests/it/bucket.rs`) and the object-store bench
//! (`benches/bucket.rs`, through `#[path]`): a free loopback port, the
//! process killed on drop.

use std::process::{Child, Command, Stdio};

/// A moto server on a loopback port; killed on drop.
pub struct MotoServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl MotoServer {
    /// Whether moto can be started here.
    pub fn installed() -> bool {
        Command::new("python3")
            .args(["-c", "import moto.server"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts it, its request log to `stderr`. The caller waits until it
    /// answers.
    pub fn spawn(stderr: Stdio) -> MotoServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("moto starts (python3 -m pip install 'moto[server]')");
        MotoServer { child, port }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
