//! `herald otp send|verify`: one-time passwords, and the developer's test loop in one command
//! (`herald otp send … --verify` asks for the code and checks it).

use std::io::IsTerminal;

use herald_common::{
    ErrorCode,
    api::{
        notifications::Channel,
        otp::{OtpSendIn, OtpSendOut, OtpVerifyOut},
    },
    client::Client,
    ids::OtpId,
};

use crate::{
    context::Context,
    exit::{Exit, Fail},
    output::{Output, cell},
    style::Tone,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Send a code (generated, or `--code` with the otp:custom_code scope).
    Send {
        /// `email` or `sms`.
        #[arg(long)]
        channel: Channel,
        /// Email address or E.164 phone number.
        #[arg(long)]
        to: String,
        /// Digits of a generated code: 4 or 6 (default 6).
        #[arg(long)]
        length: Option<u32>,
        /// Seconds until the code expires: 30 to 600 (default 300).
        #[arg(long)]
        ttl: Option<u32>,
        /// A code of your own (4 to 16 letters, digits, - or _).
        #[arg(long)]
        code: Option<String>,
        /// Then ask for the code on the terminal and verify it.
        #[arg(long)]
        verify: bool,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Verify a code.
    Verify { transaction_id: OtpId, code: String },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.server()?;
        match self {
            Command::Send { channel, to, length, ttl, code, verify, idempotency_key } => {
                let request = OtpSendIn { channel, recipient: to, length, ttl_seconds: ttl, code };
                let sent = client.send_otp(&request, idempotency_key.as_deref()).await?;
                print_sent(&ctx.out, &sent)?;
                if verify {
                    return verify_loop(ctx, &client, &sent).await;
                }
                Ok(())
            }
            Command::Verify { transaction_id, code } => {
                let verified = client.verify_otp(&transaction_id, &code).await?;
                print_verified(&ctx.out, &verified)
            }
        }
    }
}

fn print_sent(out: &Output, sent: &OtpSendOut) -> Result<(), Fail> {
    if out.is_json() {
        return out.json(sent);
    }
    out.fields(&[
        ("status", cell(sent.status.as_str(), Tone::Good)),
        ("transaction", sent.transaction_id.to_string().into()),
        ("recipient", sent.recipient.clone().into()),
        ("channel", sent.channel.as_str().into()),
        ("expires in", format!("{} s", sent.expires_in_seconds).into()),
    ])
}

fn print_verified(out: &Output, verified: &OtpVerifyOut) -> Result<(), Fail> {
    if out.is_json() {
        return out.json(verified);
    }
    out.fields(&[
        ("status", cell(verified.status.as_str(), Tone::Good)),
        ("transaction", verified.transaction_id.to_string().into()),
        ("verified at", out.time(verified.verified_at).into()),
    ])
}

/// Asks for the code until it verifies or the transaction can no longer be verified.
async fn verify_loop(ctx: &Context, client: &Client, sent: &OtpSendOut) -> Result<(), Fail> {
    if !std::io::stdin().is_terminal() {
        return Err(Fail::usage(
            "--verify asks for the code on a terminal; use `herald otp verify ID CODE` in scripts",
        ));
    }
    loop {
        eprint!("Code sent to {} (Ctrl-D to stop): ", sent.recipient);
        let mut line = String::new();
        let read = std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| Fail::failure(format!("cannot read the code: {e}")))?;
        if read == 0 {
            return Err(Fail::new(Exit::Interrupted, "stopped before verifying"));
        }
        let code = line.trim();
        if code.is_empty() {
            continue;
        }
        match client.verify_otp(&sent.transaction_id, code).await {
            Ok(verified) => return print_verified(&ctx.out, &verified),
            Err(e) => {
                let fail = Fail::from(e);
                match fail.problem.as_deref() {
                    Some(p) if p.code == ErrorCode::OtpInvalidCode => {
                        let left =
                            p.attempts_remaining.map(|n| format!(" ({n} attempts left)")).unwrap_or_default();
                        eprintln!("Wrong code{left}.");
                    }
                    _ => return Err(fail),
                }
            }
        }
    }
}
