//! Mail servers that deliver to the daemon's bounce listener: [`deliver`] sends one message
//! with Python's smtplib (`peers/smtp_send.py`), and [`Postfix`] is Debian's Postfix run as a
//! private instance (its own configuration, queue and data directories under a temporary
//! folder, listening on a loopback port), which relays mail on to the test's peers and sends
//! its own delivery status notifications back to the return path.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde::Deserialize;
use tempfile::TempDir;
use tokio::{io::AsyncWriteExt, process::Command};

const SEND_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/smtp_send.py");

/// The server's replies to one delivery, as `smtp_send.py` reports them.
#[derive(Debug, Deserialize)]
pub struct Delivery {
    pub ehlo: (u16, String),
    pub mail: (u16, String),
    pub rcpt: Vec<(u16, String)>,
    /// The reply to `DATA`: 354 when the message was sent.
    pub data: (u16, String),
    /// The reply to the message's end, when it was sent.
    pub message: Option<(u16, String)>,
}

/// Delivers `message` to the SMTP server on `127.0.0.1:port` from `mail_from` (empty: `<>`) to
/// `rcpts`, as a mail server would, and returns every reply.
pub async fn deliver(port: u16, mail_from: &str, rcpts: &[&str], message: &[u8]) -> Delivery {
    let python = crate::python();
    let mut child = Command::new(&python)
        .arg(SEND_SCRIPT)
        .args(["127.0.0.1", &port.to_string(), mail_from])
        .args(rcpts)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} {SEND_SCRIPT}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(message).await.expect("write the message to smtp_send.py");
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("smtp_send.py finishes within 60 s")
        .expect("smtp_send.py runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "smtp_send.py printed no report ({e}): {stdout}\nits stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The marker a skipped Postfix test prints (`.ci/run` fails if it sees one).
pub const POSTFIX_SKIP_MARKER: &str = "HERALD-POSTFIX-SKIPPED";

const POSTFIX: &str = "/usr/sbin/postfix";

/// A private Postfix instance on `127.0.0.1:port`: it relays mail for its routes' domains to
/// their loopback ports, and nothing else.
pub struct Postfix {
    pub port: u16,
    /// Domain → loopback port, the transport map.
    routes: Vec<(String, u16)>,
    config: PathBuf,
    /// Holds `config/`, `queue/`, `data/` and `maillog`.
    dir: TempDir,
}

/// Starts of the master daemon tried before giving up: the port is picked free just before each
/// start, but another process may take it first.
const START_TRIES: usize = 5;

impl Postfix {
    /// Whether a private Postfix can run here: `None` if it can, else why not (after printing
    /// [`POSTFIX_SKIP_MARKER`]). With `HERALD_REQUIRE_POSTFIX=1` (as `.ci/run` sets it) it
    /// panics instead.
    pub fn unavailable() -> Option<String> {
        let why = if !Path::new(POSTFIX).is_file() {
            "Postfix is not installed (apt-get install postfix; scripts/test does)"
        } else if !is_root() {
            "a private Postfix instance must be started as root"
        } else {
            return None;
        };
        if std::env::var("HERALD_REQUIRE_POSTFIX").is_ok_and(|v| v == "1") {
            panic!("HERALD_REQUIRE_POSTFIX=1 but {why}");
        }
        eprintln!("{POSTFIX_SKIP_MARKER}: {why}");
        Some(why.to_owned())
    }

    /// Starts an instance that sends mail for each `(domain, port)` of `routes` to
    /// `127.0.0.1:port` (and for no other domain), and waits until it answers SMTP.
    pub async fn start(routes: &[(&str, u16)]) -> Postfix {
        let dir = tempfile::tempdir().expect("temp dir for Postfix");
        // Postfix's daemons run as the `postfix` user: they must be able to reach the queue.
        set_mode(dir.path(), 0o755);
        let config = dir.path().join("config");
        for d in ["config", "queue", "data"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("create a Postfix directory");
        }
        let data = dir.path().join("data");
        let chown = Command::new("chown").arg("postfix").arg(&data).status().await;
        assert!(chown.is_ok_and(|s| s.success()), "chown postfix {}", data.display());
        let routes = routes.iter().map(|(domain, port)| (domain.to_string(), *port)).collect();
        let mut postfix = Postfix { port: 0, routes, config, dir };
        // `start` makes the queue's directories, with their owners, on its way.
        for _ in 0..START_TRIES {
            postfix.port = crate::free_port();
            postfix.write_config();
            // The master daemon runs in the background (stopped by Drop); `start` fails when
            // the port was taken meanwhile.
            if postfix.try_run("start").await && postfix.answers().await {
                return postfix;
            }
            postfix.try_run("stop").await;
        }
        panic!("Postfix did not answer on a free port in {START_TRIES} tries; its log:\n{}", postfix.log());
    }

    /// Sends mail for `domain` to `127.0.0.1:port` from now on: the master daemon is told to
    /// read its configuration again (SIGHUP, what `postfix reload` does after its checks), and
    /// has once it logs so.
    pub async fn route(&mut self, domain: &str, port: u16) {
        self.routes.push((domain.to_owned(), port));
        self.write_config();
        let reloads = |log: &str| log.matches("reload -- version").count();
        let before = reloads(&self.log());
        let pid_file = self.dir.path().join("queue/pid/master.pid");
        let pid =
            std::fs::read_to_string(&pid_file).unwrap_or_else(|e| panic!("read {}: {e}", pid_file.display()));
        let hup = Command::new("kill").args(["-HUP", pid.trim()]).status().await;
        assert!(hup.is_ok_and(|s| s.success()), "kill -HUP {} (Postfix's master)", pid.trim());
        crate::eventually("Postfix to reload its configuration", Duration::from_secs(20), || async {
            (reloads(&self.log()) > before).then_some(())
        })
        .await;
    }

    /// Postfix's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("maillog")).unwrap_or_default()
    }

    /// Whether this instance (not some other server that took its port) greets on its port
    /// within 10 s.
    async fn answers(&self) -> bool {
        use tokio::io::AsyncBufReadExt;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
                let mut greeting = String::new();
                let mut reader = tokio::io::BufReader::new(stream);
                let read =
                    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut greeting)).await;
                return matches!(read, Ok(Ok(_))) && greeting.starts_with("220 mta.postfix.test ");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Writes `main.cf` and `master.cf` for the current port and routes.
    fn write_config(&self) {
        let root = self.dir.path();
        let transport = self
            .routes
            .iter()
            .map(|(domain, port)| format!("{domain}=smtp:[127.0.0.1]:{port}"))
            .collect::<Vec<_>>();
        let main_cf = format!(
            "compatibility_level = 3.6\n\
             queue_directory = {queue}\n\
             data_directory = {data}\n\
             mail_owner = postfix\n\
             setgid_group = postdrop\n\
             myhostname = mta.postfix.test\n\
             mydomain = postfix.test\n\
             myorigin = $myhostname\n\
             mydestination =\n\
             inet_interfaces = 127.0.0.1\n\
             inet_protocols = ipv4\n\
             mynetworks = 127.0.0.0/8\n\
             relay_domains =\n\
             smtputf8_enable = no\n\
             smtp_dns_support_level = disabled\n\
             transport_maps = inline:{{ {transport} }}\n\
             default_transport = error:this test relays only to its own peers\n\
             alias_maps =\n\
             alias_database =\n\
             biff = no\n\
             maillog_file = {log}\n\
             maillog_file_prefixes = {root}\n",
            queue = root.join("queue").display(),
            data = root.join("data").display(),
            transport = transport.join(", "),
            log = root.join("maillog").display(),
            root = root.display(),
        );
        std::fs::write(self.config.join("main.cf"), main_cf).expect("write main.cf");
        // Only the services a relay needs, none chrooted (the queue is not set up for it).
        let master_cf = format!(
            "127.0.0.1:{port} inet n - n - - smtpd\n\
             pickup    unix  n - n 60  1 pickup\n\
             cleanup   unix  n - n -   0 cleanup\n\
             qmgr      unix  n - n 300 1 qmgr\n\
             rewrite   unix  - - n -   - trivial-rewrite\n\
             bounce    unix  - - n -   0 bounce\n\
             defer     unix  - - n -   0 bounce\n\
             trace     unix  - - n -   0 bounce\n\
             verify    unix  - - n -   1 verify\n\
             flush     unix  n - n 1000? 0 flush\n\
             proxymap  unix  - - n -   - proxymap\n\
             smtp      unix  - - n -   - smtp\n\
             relay     unix  - - n -   - smtp\n\
             showq     unix  n - n -   - showq\n\
             error     unix  - - n -   - error\n\
             retry     unix  - - n -   - error\n\
             discard   unix  - - n -   - discard\n\
             anvil     unix  - - n -   1 anvil\n\
             scache    unix  - - n -   1 scache\n\
             postlog   unix-dgram n - n - 1 postlogd\n",
            // Port 1 until a free one is picked, for `check`.
            port = self.port.max(1),
        );
        std::fs::write(self.config.join("master.cf"), master_cf).expect("write master.cf");
    }

    /// Runs `postfix -c <config> <verb>`: whether it succeeded.
    async fn try_run(&self, verb: &str) -> bool {
        Command::new(POSTFIX)
            .arg("-c")
            .arg(&self.config)
            .arg(verb)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap_or_else(|e| panic!("cannot run {POSTFIX}: {e}"))
            .success()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        // `stop` signals the master daemon, which takes its children with it; before the
        // directory goes.
        let _ = std::process::Command::new(POSTFIX)
            .arg("-c")
            .arg(&self.config)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod a Postfix directory");
}
