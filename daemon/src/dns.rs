//! DNS lookups for sending-domain checks: TXT records through hickory-resolver, against
//! `HERALD_DNS_NAMESERVERS` or the system's resolver (`/etc/resolv.conf`).
//!
//! The resolver keeps no cache: a check runs because someone wants to know what the DNS says
//! now (a user who has just published a record, or the periodic re-check), and a cached
//! "not found" from a minute ago would be exactly the wrong answer.

use std::{net::SocketAddr, time::Duration};

use hickory_resolver::{
    TokioResolver,
    config::{ConnectionConfig, NameServerConfig, ResolverConfig},
    net::{DnsError, NetError, runtime::TokioRuntimeProvider},
    proto::rr::RData,
};

/// The answer to a TXT lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxtLookup {
    /// The name's TXT records, each with its character-strings joined (RFC 7208 §3.3, RFC 6376
    /// §3.6.2.2: a long value is published as several strings of at most 255 bytes).
    Found(Vec<String>),
    /// The name does not exist, or has no TXT record.
    NotFound,
    /// The DNS did not answer usefully (a timeout, SERVFAIL, REFUSED, no server reachable):
    /// nothing is known.
    Failed(String),
}

#[derive(Clone)]
pub struct Resolver {
    inner: TokioResolver,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

impl Resolver {
    /// A resolver asking `nameservers` (UDP, then TCP for long answers), or the system's when
    /// the list is empty. `timeout` bounds each query; a query is tried twice.
    pub fn new(nameservers: &[SocketAddr], timeout: Duration) -> anyhow::Result<Self> {
        let mut builder = if nameservers.is_empty() {
            TokioResolver::builder_tokio()
                .map_err(|e| anyhow::anyhow!("cannot read the system's DNS configuration: {e}"))?
        } else {
            let servers = nameservers
                .iter()
                .map(|addr| {
                    let connection = |mut c: ConnectionConfig| {
                        c.port = addr.port();
                        c
                    };
                    NameServerConfig::new(
                        addr.ip(),
                        true,
                        vec![connection(ConnectionConfig::udp()), connection(ConnectionConfig::tcp())],
                    )
                })
                .collect();
            TokioResolver::builder_with_config(
                ResolverConfig::from_parts(None, Vec::new(), servers),
                TokioRuntimeProvider::default(),
            )
        };
        let options = builder.options_mut();
        options.cache_size = 0;
        options.timeout = timeout;
        options.attempts = 2;
        // Names are always fully qualified: never try them under a search domain.
        options.ndots = 0;
        let inner = builder.build().map_err(|e| anyhow::anyhow!("cannot set up the DNS resolver: {e}"))?;
        Ok(Self { inner })
    }

    /// The TXT records of `name` (a fully qualified name, without the final dot).
    pub async fn txt(&self, name: &str) -> TxtLookup {
        match self.inner.txt_lookup(format!("{name}.")).await {
            Ok(lookup) => {
                let texts: Vec<String> = lookup
                    .answers()
                    .iter()
                    .filter_map(|record| match &record.data {
                        RData::TXT(txt) => Some(
                            txt.txt_data.iter().map(|part| String::from_utf8_lossy(part)).collect::<String>(),
                        ),
                        _ => None,
                    })
                    .collect();
                if texts.is_empty() { TxtLookup::NotFound } else { TxtLookup::Found(texts) }
            }
            Err(e) if e.is_no_records_found() => TxtLookup::NotFound,
            // The server's answer by its usual name (SERVFAIL, REFUSED), as dig shows it.
            Err(NetError::Dns(DnsError::ResponseCode(code))) => {
                let name = format!("{code:?}").to_ascii_uppercase();
                TxtLookup::Failed(format!("the name server answered {name}: {}", code.to_str()))
            }
            Err(e) => TxtLookup::Failed(e.to_string()),
        }
    }
}
