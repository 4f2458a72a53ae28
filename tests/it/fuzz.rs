//! A bounded property-based fuzz run of the whole OpenAPI document with Schemathesis (a fuzzer
//! nobody here wrote, from PyPI), on both backends: no answer is a 5xx, and every answer (status,
//! content type, body, and each event of the two streams) conforms to the document. Each
//! credential's operations run with that credential, so the runs reach past authentication.

use std::{process::Stdio, time::Duration};

use herald_common::Scope;
use herald_tests::{Backend, TestDaemon, both_backends, peers::DnsServer};

/// Test cases per operation and phase: enough to find the classes of mistakes, bounded for CI.
const EXAMPLES: &str = "40";

async fn run_schemathesis(d: &TestDaemon, token: &str, filter: (&str, &str)) {
    let python = herald_tests::python();
    let bin = std::path::Path::new(&python).with_file_name("schemathesis");
    let seed = std::env::var("HERALD_FUZZ_SEED").unwrap_or_else(|_| "20261123".to_owned());
    let child = tokio::process::Command::new(&bin)
        .current_dir(d.dir.path())
        .args(["run", &format!("{}/content/openapi.json", d.url)])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--phases", "examples,coverage,fuzzing", "--max-examples", EXAMPLES, "--seed", &seed])
        .args(["--workers", "1", "--request-timeout", "3", "--no-color", "--suppress-health-check", "all"])
        .args([filter.0, filter.1])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "schemathesis is missing ({}): run the tests through scripts/test, which installs it: {e}",
                bin.display()
            )
        });
    let output = tokio::time::timeout(Duration::from_secs(600), child.wait_with_output())
        .await
        .expect("the fuzz run ends within 10 minutes")
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis found failures ({} {}):\n{text}", filter.0, filter.1);
    assert!(text.contains("passed"), "schemathesis ran no test cases:\n{text}");
}

async fn fuzz_the_document(backend: Backend) {
    // Heartbeats every second, so a stream read within the request timeout has events to check;
    // domain checks ask a DNS server on loopback (it knows none of the fuzzer's names).
    let dns = DnsServer::start().await;
    let d = TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_STREAM_HEARTBEAT_SECONDS", "1".to_owned()),
            ("HERALD_DNS_NAMESERVERS", dns.nameservers()),
            ("HERALD_DNS_TIMEOUT", "500ms".to_owned()),
        ],
    )
    .await;
    let boot = d.bootstrap().await;
    let operator = d.idp.operator_token(&boot.tenant_id, &Scope::ALL);
    let user = d
        .with_token(&boot.api_key)
        .user_token(&herald_tests::user_id("fuzzed-user"), None)
        .await
        .unwrap()
        .token;
    let user_paths = "^/api/v1/(inbox|in-app|users/me)";
    run_schemathesis(&d, &user, ("--include-path-regex", user_paths)).await;
    run_schemathesis(&d, &operator, ("--include-path-regex", "^/api/v1/activity")).await;
    let api_key_paths = format!("{user_paths}|^/api/v1/activity");
    run_schemathesis(&d, &boot.api_key, ("--exclude-path-regex", &api_key_paths)).await;
    d.stop().await;
}
both_backends!(fuzz_the_document_on_each_backend, fuzz_the_document);
