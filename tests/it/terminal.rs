//! A real terminal for the tests: `tmux` with a server of its own, running the `herald` binary
//! with the test's environment. Keys go in with `send-keys`; the screen comes out with
//! `capture-pane`. CI installs tmux (`.ci/run`).

use std::process::Command;

use crate::cli::Cli;

const HERALD: &str = env!("CARGO_BIN_EXE_herald-it");

pub struct Terminal {
    socket: String,
    session: String,
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Terminal {
    /// Runs `herald ARGS` in a new 120×32 terminal, with `env` added to the CLI's environment.
    /// The pane stays after the program ends (it prints `[exit N]`).
    pub async fn start(cli: &Cli, name: &str, args: &[&str], env: &[(&str, &str)]) -> Terminal {
        Self::start_sized(cli, name, args, env, (120, 32)).await
    }

    pub async fn start_sized(
        cli: &Cli,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
        size: (u16, u16),
    ) -> Terminal {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("herald-it-{}-{n}-{name}", std::process::id());
        let mut vars: Vec<String> = Vec::new();
        let command = cli.command();
        for (key, value) in command.as_std().get_envs() {
            if let (key, Some(value)) = (key.to_string_lossy(), value) {
                vars.push(format!("{key}={}", quote(&value.to_string_lossy())));
            }
        }
        for (key, value) in env {
            vars.push(format!("{key}={}", quote(value)));
        }
        let program: Vec<String> = std::iter::once(HERALD).chain(args.iter().copied()).map(quote).collect();
        let line = format!(
            "env -i TERM=xterm-256color {} {}; echo \"[exit $?]\"; sleep 600",
            vars.join(" "),
            program.join(" ")
        );
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x"])
            .arg(size.0.to_string())
            .arg("-y")
            .arg(size.1.to_string())
            .arg(line)
            .status()
            .unwrap_or_else(|e| panic!("tmux is needed for the terminal tests (apt-get install tmux): {e}"));
        assert!(status.success(), "tmux new-session failed");
        Terminal { socket, session: name.to_owned() }
    }

    fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket]);
        command
    }

    /// The screen as text.
    pub async fn capture(&self) -> String {
        self.capture_with(&[]).await
    }

    /// The screen with its escape codes (colours).
    pub async fn capture_escapes(&self) -> String {
        self.capture_with(&["-e"]).await
    }

    async fn capture_with(&self, flags: &[&str]) -> String {
        let output =
            self.tmux().args(["capture-pane", "-p", "-t", &self.session]).args(flags).output().unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types keys (`send-keys` names: `Enter`, `Escape`, `C-c`…).
    pub fn keys(&self, keys: &[&str]) {
        let status = self.tmux().args(["send-keys", "-t", &self.session]).args(keys).status().unwrap();
        assert!(status.success());
    }

    /// Resizes the terminal (the program gets SIGWINCH, as with a real window).
    pub fn resize(&self, width: u16, height: u16) {
        let status = self
            .tmux()
            .args(["resize-window", "-t", &self.session, "-x", &width.to_string(), "-y", &height.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Types text literally.
    pub fn type_text(&self, text: &str) {
        let status = self.tmux().args(["send-keys", "-t", &self.session, "-l", text]).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}
