//! Herald's integration tests: one binary, the real daemon on loopback.

mod activity;
mod auth;
mod batches;
mod bounces;
mod browser;
mod cli;
mod crash;
mod dispatch;
mod domains;
mod errors;
mod feed_counts;
mod fuzz;
mod openapi;
mod ops;
mod otp;
mod process;
mod receipts;
mod receipts_twilio;
mod receipts_whatsapp;
mod store;
mod stream;
mod supervision;
mod suppressions;
mod terminal;
mod tui;
mod unavailable;
