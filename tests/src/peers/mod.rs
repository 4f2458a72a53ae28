//! The protocol peers the daemon's delivery providers talk to in tests, on loopback: an SMTP
//! server (aiosmtpd, in a Python child process, so email meets an independent implementation),
//! and HTTP servers shaped like Twilio's Messaging API and the WhatsApp Cloud API. Each records
//! what it received and can be told to fail, permanently or for the next few requests.

pub mod smtp;
pub mod twilio;
pub mod whatsapp;

pub use smtp::{ReceivedMail, SmtpSink};
pub use twilio::{TwilioMessage, TwilioServer};
pub use whatsapp::{WhatsAppMessage, WhatsAppServer};
