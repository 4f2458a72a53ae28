//! A DNS server on loopback, over UDP and TCP on one port: hickory-server, in process, answering
//! from a table of TXT records that a test changes while it runs (publish a record, replace it,
//! remove it) and with SERVFAIL for names told to fail. The daemon's resolver talks to it over
//! the real DNS wire protocol, and so does the Python DKIM verifier.
//!
//! Like a real zone, answers carry a one-hour TTL, and negative answers (NXDOMAIN, or a name
//! without TXT records) carry the zone's SOA with a one-hour negative TTL: a resolver that
//! cached would miss a record added or changed after a check. The daemon's must not.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use hickory_server::proto::{
    op::{Metadata, ResponseCode},
    rr::{
        Name, RData, Record, RecordType,
        rdata::{SOA, TXT},
    },
};
use hickory_server::{
    net::runtime::Time,
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo, Server},
    zone_handler::MessageResponseBuilder,
};
use tokio::net::{TcpListener, UdpSocket};

/// The TTL of every answer, and the negative TTL: an hour, as real zones often have.
const TTL: u32 = 3600;

#[derive(Default)]
struct Zone {
    /// Lower-case name without the final dot → its TXT records, each a list of strings.
    txt: HashMap<String, Vec<Vec<String>>>,
    servfail: HashSet<String>,
    /// Lower-case name without the final dot → how many queries asked about it.
    queries: HashMap<String, usize>,
}

#[derive(Clone, Default)]
struct Handler(Arc<Mutex<Zone>>);

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let builder = MessageResponseBuilder::from_message_request(request);
        let Ok(info) = request.request_info() else {
            let response = builder.error_msg(&request.metadata, ResponseCode::FormErr);
            return send(&mut response_handle, response, &request.metadata).await;
        };
        let name = info.query.name().to_string().trim_end_matches('.').to_ascii_lowercase();
        let query_type = info.query.query_type();
        let owner = Name::from(info.query.name().clone());
        let (code, answers) = {
            let mut zone = self.0.lock().expect("zone lock");
            *zone.queries.entry(name.clone()).or_default() += 1;
            if zone.servfail.contains(&name) {
                (ResponseCode::ServFail, Vec::new())
            } else {
                match zone.txt.get(&name) {
                    Some(records) if query_type == RecordType::TXT => (
                        ResponseCode::NoError,
                        records
                            .iter()
                            .map(|strings| {
                                Record::from_rdata(owner.clone(), TTL, RData::TXT(TXT::new(strings.clone())))
                            })
                            .collect(),
                    ),
                    Some(_) => (ResponseCode::NoError, Vec::new()),
                    None => (ResponseCode::NXDomain, Vec::new()),
                }
            }
        };
        if code == ResponseCode::ServFail {
            let response = builder.error_msg(&request.metadata, code);
            return send(&mut response_handle, response, &request.metadata).await;
        }
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        metadata.response_code = code;
        // Negative answers carry the SOA of the zone (the name's last two labels).
        let soa = if answers.is_empty() {
            let apex = owner.trim_to(2);
            let soa = SOA::new(
                Name::from_ascii("ns")
                    .and_then(|ns| ns.append_domain(&apex))
                    .unwrap_or_else(|_| apex.clone()),
                Name::from_ascii("hostmaster")
                    .and_then(|h| h.append_domain(&apex))
                    .unwrap_or_else(|_| apex.clone()),
                1,
                3600,
                600,
                86_400,
                TTL,
            );
            vec![Record::from_rdata(apex, TTL, RData::SOA(soa))]
        } else {
            Vec::new()
        };
        let response = builder.build(metadata, answers.iter(), [], soa.iter(), []);
        send(&mut response_handle, response, &request.metadata).await
    }
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Metadata,
) -> ResponseInfo {
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(_) => {
            let mut metadata = Metadata::response_from_request(request);
            metadata.response_code = ResponseCode::ServFail;
            ResponseInfo::from(hickory_server::proto::op::Header { metadata, counts: Default::default() })
        }
    }
}

pub struct DnsServer {
    pub addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    task: tokio::task::JoinHandle<()>,
}

impl DnsServer {
    /// Starts the server on `127.0.0.1`, UDP and TCP on the same free port.
    pub async fn start() -> DnsServer {
        let handler = Handler::default();
        let zone = handler.0.clone();
        let mut server = Server::new(handler);
        let mut bound = None;
        for _ in 0..20 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind a UDP socket");
            let addr = udp.local_addr().expect("UDP address");
            if let Ok(tcp) = TcpListener::bind(addr).await {
                bound = Some((udp, tcp, addr));
                break;
            }
        }
        let (udp, tcp, addr) = bound.expect("a port free for both UDP and TCP");
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 65_535);
        let task = tokio::spawn(async move {
            let _ = server.block_until_done().await;
        });
        DnsServer { addr, zone, task }
    }

    /// `HERALD_DNS_NAMESERVERS` for a daemon that should ask this server.
    pub fn nameservers(&self) -> String {
        self.addr.to_string()
    }

    /// Publishes TXT records at `name`, replacing any there. Each value longer than 255 bytes is
    /// split into several strings, as a DNS operator would publish it.
    pub fn set_txt(&self, name: &str, values: &[&str]) {
        let records = values
            .iter()
            .map(|value| {
                value.as_bytes().chunks(255).map(|c| String::from_utf8_lossy(c).into_owned()).collect()
            })
            .collect();
        self.zone().txt.insert(key(name), records);
    }

    /// Removes every record at `name` (it becomes NXDOMAIN).
    pub fn remove(&self, name: &str) {
        self.zone().txt.remove(&key(name));
    }

    /// Makes queries for `name` answer SERVFAIL (`true`) or normally again (`false`).
    pub fn servfail(&self, name: &str, fail: bool) {
        let mut zone = self.zone();
        if fail {
            zone.servfail.insert(key(name));
        } else {
            zone.servfail.remove(&key(name));
        }
    }

    /// How many queries the server has answered about `domain` and the names under it.
    pub fn queries_under(&self, domain: &str) -> usize {
        let domain = key(domain);
        let under = format!(".{domain}");
        self.zone()
            .queries
            .iter()
            .filter(|(name, _)| **name == domain || name.ends_with(&under))
            .map(|(_, n)| n)
            .sum()
    }

    fn zone(&self) -> std::sync::MutexGuard<'_, Zone> {
        self.zone.lock().expect("zone lock")
    }
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What Python's dkimpy made of a message's DKIM signature.
#[derive(Debug, serde::Deserialize)]
pub struct DkimVerdict {
    pub verified: bool,
    /// The signature's `d=`, `s=` and `h=` tags.
    pub domain: String,
    pub selector: String,
    pub headers: String,
    /// dkimpy's log lines (why it failed, when it did).
    pub log: Vec<String>,
}

/// Verifies the DKIM signature of the message in `path` with dkimpy (`peers/dkim_verify.py`),
/// which looks the public key up in `dns`.
pub async fn verify_dkim(path: &std::path::Path, dns: &DnsServer) -> DkimVerdict {
    const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/dkim_verify.py");
    let output = tokio::process::Command::new(crate::python())
        .arg(SCRIPT)
        .arg(path)
        .arg(dns.addr.ip().to_string())
        .arg(dns.addr.port().to_string())
        .output()
        .await
        .expect("run the DKIM verifier (scripts/test installs dkimpy and dnspython)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the DKIM verifier failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the DKIM verifier printed no verdict ({e}): {stderr}"))
}
