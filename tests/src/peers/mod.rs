//! The protocol peers the daemon's delivery providers talk to in tests, on loopback: an SMTP
//! server (aiosmtpd, in a Python child process, so email meets an independent implementation),
//! HTTP servers shaped like Twilio's Messaging API and the WhatsApp Cloud API, and a DNS server
//! (hickory-server) for sending-domain checks. Each records what it received and can be told to
//! fail, permanently or for the next few requests. Two proxies stand between a client and the
//! daemon: one cuts the network, the other refuses chosen requests as a busy daemon would. Two
//! mail servers deliver reports to the daemon's bounce listener: Python's smtplib and a private
//! Postfix instance.

pub mod dns;
pub mod mta;
pub mod proxy;
pub mod refusing;
pub mod smtp;
pub mod twilio;
pub mod whatsapp;

pub use dns::{DkimVerdict, DnsServer, verify_dkim};
pub use mta::{Delivery, Postfix};
pub use proxy::CutProxy;
pub use refusing::{RefusingProxy, Seen};
pub use smtp::{ReceivedMail, SmtpSink};
pub use twilio::{TwilioMessage, TwilioServer, TwilioSigner};
pub use whatsapp::{WhatsAppMessage, WhatsAppServer};
