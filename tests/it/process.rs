//! `heraldd` as a process: configuration errors, admin commands, the `--dev` quick start, JSON
//! logs, and graceful shutdown on SIGTERM.

use std::{path::Path, process::Stdio, time::Duration};

use herald_common::{Scope, api::admin::Bootstrapped, client::Client};
use herald_tests::eventually;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    process::{Child, Command},
};

const HERALDD: &str = env!("CARGO_BIN_EXE_heraldd-it");

/// `heraldd` with a clean environment: only what the test sets, data under `dir`.
pub(crate) fn heraldd(dir: &Path) -> Command {
    let mut command = Command::new(HERALDD);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("HERALD_CLI_CONFIG", dir.join("cli.toml"))
        .env("HERALD_DATABASE_URL", format!("sqlite://{}", dir.join("herald.db").display()))
        .env("HERALD_DATA_DIR", dir.join("data"))
        .env("HERALD_LISTEN", "127.0.0.1:0")
        .current_dir(dir)
        .kill_on_drop(true);
    command
}

pub(crate) async fn run(command: &mut Command) -> (i32, String, String) {
    let output = command.output().await.expect("run heraldd");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub(crate) fn terminate(child: &Child) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(status.success());
}

pub(crate) async fn exit_code(mut child: Child) -> i32 {
    tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("heraldd exits within 15 s of SIGTERM")
        .expect("wait")
        .code()
        .unwrap_or(-1)
}

#[tokio::test]
async fn bad_configuration_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) =
        run(heraldd(dir.path()).env("HERALD_LISTEN", "everywhere").env("HERALD_SMS_PROVIDER", "pigeon"))
            .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("HERALD_LISTEN (from the environment) is not a socket address"), "{stderr}");
    assert!(stderr.contains("HERALD_SMS_PROVIDER"), "every problem is reported: {stderr}");

    let file = dir.path().join("herald.toml");
    std::fs::write(&file, "stream_heartbeat_seconds = 0\n").unwrap();
    let (code, _, stderr) = run(heraldd(dir.path()).arg("--config").arg(&file)).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("HERALD_STREAM_HEARTBEAT_SECONDS (from config file"), "{stderr}");

    let (code, _, stderr) = run(heraldd(dir.path()).env("HERALD_DATABASE_URL", "mysql://nope")).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("HERALD_DATABASE_URL"), "{stderr}");
}

#[tokio::test]
async fn print_default_config_and_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, _) = run(heraldd(dir.path()).arg("print-default-config")).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("listen = \"127.0.0.1:8080\""));
    let file = dir.path().join("default.toml");
    std::fs::write(&file, &stdout).unwrap();
    let (code, _, stderr) = run(heraldd(dir.path())
        .arg("--config")
        .arg(&file)
        .arg("migrate")
        .env_remove("HERALD_DATABASE_URL")
        .env("HERALD_DATABASE_URL", format!("sqlite://{}", dir.path().join("m.db").display())))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(dir.path().join("m.db").exists());
}

#[tokio::test]
async fn admin_commands_print_exactly_one_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let json = |stdout: &str| -> serde_json::Value {
        let lines: Vec<_> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "one line of output: {stdout}");
        serde_json::from_str(lines[0]).expect("one JSON object")
    };
    let (code, out, err) =
        run(heraldd(dir.path()).args(["admin", "tenant", "create", "--name", "Acme", "--json"])).await;
    assert_eq!(code, 0, "{err}");
    let tenant = json(&out);
    assert_eq!(tenant["name"], "Acme");
    let tenant_id = tenant["tenant_id"].as_str().unwrap().to_owned();

    let (code, out, _) = run(heraldd(dir.path())
        .args(["admin", "app", "create", "--tenant", &tenant_id, "--name", "Web", "--json"]))
    .await;
    assert_eq!(code, 0);
    let app = json(&out);
    assert!(app["signing_secret"].as_str().unwrap().starts_with("hss_"));
    let app_id = app["application_id"].as_str().unwrap().to_owned();

    let (code, out, _) =
        run(heraldd(dir.path()).args(["admin", "app", "secret", "--application", &app_id, "--json"])).await;
    assert_eq!(
        (code, &json(&out)["signing_secret"]),
        (0, &app["signing_secret"]),
        "the secret can be shown again"
    );
    let (code, out, _) = run(heraldd(dir.path()).args([
        "admin",
        "app",
        "secret",
        "--application",
        &app_id,
        "--rotate",
        "--json",
    ]))
    .await;
    let rotated = json(&out);
    assert_eq!((code, rotated["rotated"].as_bool()), (0, Some(true)));
    assert_ne!(rotated["signing_secret"], app["signing_secret"], "rotation gives a new secret");

    let (code, out, _) =
        run(heraldd(dir.path()).args(["admin", "key", "create", "--application", &app_id, "--json"])).await;
    assert_eq!(code, 0);
    let key = json(&out);
    let scopes: Vec<Scope> = serde_json::from_value(key["scopes"].clone()).unwrap();
    assert!(
        !scopes.contains(&Scope::OtpCustomCode) && !scopes.contains(&Scope::ActivityRetry),
        "explicit scopes are not default"
    );
    assert!(key["api_key"].as_str().unwrap().starts_with("hk_"));

    let (code, out, _) = run(heraldd(dir.path()).args([
        "admin",
        "key",
        "create",
        "--application",
        &app_id,
        "--scope",
        "activity:retry",
        "--json",
    ]))
    .await;
    assert_eq!(code, 0);
    assert_eq!(json(&out)["scopes"], serde_json::json!(["activity:retry"]));

    let key_id = key["key_id"].as_str().unwrap();
    let (code, out, _) = run(heraldd(dir.path()).args(["admin", "key", "revoke", key_id, "--json"])).await;
    assert_eq!((code, json(&out)["revoked"].as_bool()), (0, Some(true)));
    let (code, _, err) = run(heraldd(dir.path()).args(["admin", "key", "revoke", key_id])).await;
    assert_ne!(code, 0, "revoking twice fails");
    assert!(err.contains("no active key"), "{err}");

    let (code, out, _) = run(heraldd(dir.path()).args(["admin", "bootstrap", "--json"])).await;
    assert_eq!(code, 0);
    let boot: Bootstrapped = serde_json::from_value(json(&out)).unwrap();
    assert_ne!(boot.tenant_id.as_str(), tenant_id, "bootstrap makes a new tenant each time");

    let (code, _, err) =
        run(heraldd(dir.path()).args(["admin", "app", "create", "--tenant", "tnt_nope", "--name", "x"]))
            .await;
    assert_ne!(code, 0);
    assert!(err.contains("tnt_"), "{err}");
}

/// What [`start_serving`] returns: the child, its address and its later log lines.
pub(crate) type Serving = (Child, String, tokio::sync::mpsc::UnboundedReceiver<String>);

/// `heraldd serve` in `dir`, set up by `configure` (the same for every process of one test).
pub(crate) async fn serve_configured(dir: &Path, configure: &dyn Fn(&mut Command)) -> Serving {
    let mut command = heraldd(dir);
    configure(&mut command);
    start_serving(&mut command).await
}

/// `heraldd admin bootstrap` in `dir`, then `heraldd serve`, both set up by `configure`: the
/// credentials and the serving daemon (which crash tests kill and start again).
pub(crate) async fn bootstrap_and_serve(
    dir: &Path,
    configure: &dyn Fn(&mut Command),
) -> (Bootstrapped, Serving) {
    let mut bootstrap = heraldd(dir);
    configure(&mut bootstrap);
    let (_, out, _) = run(bootstrap.args(["admin", "bootstrap", "--json"])).await;
    let boot: Bootstrapped = serde_json::from_str(out.trim()).expect("bootstrap prints JSON");
    (boot, serve_configured(dir, configure).await)
}

/// Starts `heraldd` (serve) and returns it with its address, read from its JSON log.
pub(crate) async fn start_serving(
    command: &mut Command,
) -> (Child, String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut child = command
        .env("HERALD_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn heraldd");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let event: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON log line: {line}"));
            if event["message"] == "heraldd listening" {
                return event["addr"].as_str().unwrap().to_owned();
            }
        }
        panic!("heraldd exited before listening");
    })
    .await
    .expect("heraldd listens within 20 s");
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    (child, addr, rx)
}

#[tokio::test]
async fn sigterm_lets_in_flight_requests_finish_and_exits_zero() {
    herald_tests::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let (_, out, _) = run(heraldd(dir.path()).args(["admin", "bootstrap", "--json"])).await;
    let boot: Bootstrapped = serde_json::from_str(out.trim()).unwrap();
    let (child, addr, mut logs) =
        start_serving(heraldd(dir.path()).env("HERALD_LOG", "info,tower_http=debug")).await;

    // A request whose body is still arriving when the signal comes.
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/v1/users/alice/token HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nX-Request-Id: in-flight-1\r\nContent-Length: 2\r\n\r\n{{",
        boot.api_key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The signal once the daemon is handling the request (tower-http logs its start at debug)...
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(line) = logs.recv().await {
            let started = line.contains("started processing request") && line.contains("in-flight-1");
            seen.push(line);
            if started {
                return;
            }
        }
        panic!("heraldd's log ended");
    })
    .await
    .unwrap_or_else(|_| panic!("the request's start is logged: {seen:#?}"));
    terminate(&child);
    // ...and the rest of the body once it has stopped accepting connections (graceful shutdown
    // closes the listener first).
    eventually("heraldd to stop accepting connections", Duration::from_secs(15), || async {
        tokio::net::TcpStream::connect(&addr).await.is_err().then_some(())
    })
    .await;
    stream.write_all(b"}").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "the in-flight request completes: {response}");
    assert!(response.contains("\"token\""));
    assert_eq!(exit_code(child).await, 0, "a graceful stop exits 0");

    // The request's log line carries its request id (JSON logs, span fields included).
    while let Ok(line) = logs.try_recv() {
        seen.push(line);
    }
    assert!(seen.iter().all(|line| !line.contains(&boot.api_key)), "an API key never reaches the log");
    assert!(seen.iter().any(|line| line.contains("in-flight-1")), "a log line names the request id");
}

#[tokio::test]
async fn the_dev_quick_start_prints_working_credentials() {
    herald_tests::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    // The bounce listener on a port the system picks rather than --dev's 127.0.0.1:2525, which
    // another test run on the machine may hold.
    let bounce_listen = "127.0.0.1:0";
    let mut command = heraldd(dir.path());
    command
        .env_remove("HERALD_DATABASE_URL")
        .env_remove("HERALD_DATA_DIR")
        .env("HERALD_BOUNCE_LISTEN", bounce_listen)
        .arg("--dev");
    let (child, addr, _) = start_serving(&mut command).await;
    let mut child = child;
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    while let Some(line) = stdout.next_line().await.unwrap() {
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("Try:") {
            break;
        }
    }
    let field = |name: &str| -> String {
        printed
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
            .unwrap_or_else(|| panic!("`{name}` is printed:\n{printed}"))
    };
    let client = Client::new(format!("http://{addr}"));
    let api_key = field("API key");
    assert_eq!(client.with_token(&api_key).whoami().await.unwrap().scopes.len(), Scope::ALL.len());
    let operator = client
        .with_token(field("operator token"))
        .whoami()
        .await
        .expect("the operator token verifies via the dev JWKS");
    assert_eq!(operator.kind, herald_common::api::whoami::CredentialKind::Operator);
    let user = client.with_token(field("user token")).current_user().await.unwrap();
    assert_eq!(user.user_id, "dev-user");
    assert!(dir.path().join("herald-data/herald.db").exists(), "embedded SQLite under herald-data/");

    let profile =
        herald_common::profile::load(&dir.path().join("cli.toml"), None).unwrap().expect("a default profile");
    assert_eq!(profile.api_key.as_deref(), Some(api_key.as_str()));
    assert_eq!(profile.url.as_deref(), Some(format!("http://{addr}").as_str()));
    terminate(&child);
    assert_eq!(exit_code(child).await, 0);

    // A second start reuses the development tenant.
    let mut command = heraldd(dir.path());
    command
        .env_remove("HERALD_DATABASE_URL")
        .env_remove("HERALD_DATA_DIR")
        .env("HERALD_BOUNCE_LISTEN", bounce_listen)
        .arg("--dev");
    let (child, _, _) = start_serving(&mut command).await;
    let saved: Bootstrapped =
        serde_json::from_slice(&std::fs::read(dir.path().join("herald-data/dev-credentials.json")).unwrap())
            .unwrap();
    assert_eq!(saved.api_key, api_key);
    terminate(&child);
    assert_eq!(exit_code(child).await, 0);
}

/// Text logs written to a file or a pipe carry no colour escape codes (`heraldd > file`).
#[tokio::test]
async fn text_logs_to_a_pipe_are_plain() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = heraldd(dir.path())
        .env("HERALD_LOG_FORMAT", "text")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn heraldd");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("heraldd listening") {
                return;
            }
        }
        panic!("heraldd exited before listening:\n{seen}");
    })
    .await
    .expect("heraldd listens within 20 s");
    assert!(seen.contains(" INFO "), "text logs: {seen}");
    assert!(!seen.contains('\u{1b}'), "no escape codes when stderr is not a terminal: {seen:?}");
    terminate(&child);
    assert_eq!(exit_code(child).await, 0);
}
