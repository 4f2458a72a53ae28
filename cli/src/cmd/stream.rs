//! `herald stream --user USER`: follows an end user's live inbox stream, reconnecting with
//! `Last-Event-ID` (nothing missed, nothing twice) until Ctrl-C.

use herald_common::{
    client::{ConnectionState, FollowOptions, Followed},
    ids::UserId,
    stream::StreamEvent,
};

use crate::{
    context::Context,
    exit::{Exit, Fail, Interrupt},
    output::{Format, Output, short},
    style::{Tone, paint},
};

#[derive(clap::Args)]
pub struct Args {
    /// The user (a token is minted with the API key); default: HERALD_USER_TOKEN.
    #[arg(long)]
    user: Option<UserId>,
    /// Resume after this event id (replays what was created since).
    #[arg(long)]
    last_event_id: Option<String>,
}

impl Args {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let user = ctx.user(self.user.as_ref()).await?;
        let options = FollowOptions { last_event_id: self.last_event_id, ..Default::default() };
        let mut follower = user.follow_inbox(options);
        let out = &ctx.out;
        let mut previous = ConnectionState::Connecting;
        let mut interrupt = Interrupt::listen()?;
        loop {
            let next = tokio::select! {
                next = follower.next() => next,
                _ = interrupt.recv() => return Ok(()),
            };
            match next {
                None => return Ok(()),
                Some(Followed::State(ConnectionState::Failed(reason))) => {
                    return Err(Fail::new(Exit::Auth, format!("the stream was refused: {reason}")));
                }
                Some(Followed::State(state)) => {
                    state_note(out, &state, &previous);
                    previous = state;
                }
                Some(Followed::Event { id, event }) => print_event(out, id.as_deref(), &event)?,
            }
        }
    }
}

/// Tells connection changes on stderr (never into the data on stdout): a lost connection, and
/// being live again after one. Returns whether a line was written.
pub fn state_note(out: &Output, state: &ConnectionState, previous: &ConnectionState) -> bool {
    let worth_telling = match state {
        ConnectionState::Connecting => false,
        ConnectionState::Live => matches!(previous, ConnectionState::Reconnecting { .. }),
        _ => true,
    };
    if !worth_telling {
        return false;
    }
    let tone = match state {
        ConnectionState::Live => Tone::Good,
        ConnectionState::Failed(_) => Tone::Bad,
        _ => Tone::Busy,
    };
    let reason = match state {
        ConnectionState::Reconnecting { reason, .. } => format!(": {reason}"),
        _ => String::new(),
    };
    eprintln!("{}{reason}", paint(&format!("[{}]", state.label()), tone, out.color_err));
    true
}

fn print_event(out: &Output, id: Option<&str>, event: &StreamEvent) -> Result<(), Fail> {
    if out.format != Format::Table {
        let value = serde_json::json!({
            "event": event.name().as_str(),
            "id": id,
            "data": serde_json::from_str::<serde_json::Value>(&event.data_json().unwrap_or_default()).unwrap_or_default(),
        });
        return out.json(&value);
    }
    let line = match event {
        StreamEvent::Ready(ready) => format!(
            "{}  {} unread",
            paint("ready", Tone::Dim, out.color),
            ready.unread_count.unwrap_or_default()
        ),
        StreamEvent::NotificationCreated(item) => format!(
            "{}  #{:<5} {}  {}  {}",
            paint("new    ", Tone::Good, out.color),
            id.unwrap_or("-"),
            item.id,
            short(&item.title, 40),
            short(&item.body, 60)
        ),
        StreamEvent::NotificationUpdated(item) => format!(
            "{}         {}  {}{}",
            paint("updated", Tone::Busy, out.color),
            item.id,
            if item.is_read { "read" } else { "unread" },
            if item.archived { ", archived" } else { "" }
        ),
        StreamEvent::Resync(resync) => {
            format!("{}  {} ({})", paint("resync", Tone::Bad, out.color), resync.detail, resync.reason)
        }
        StreamEvent::Heartbeat(_) => return Ok(()),
        StreamEvent::ActivityCreated(_) | StreamEvent::ActivityUpdated(_) => return Ok(()),
    };
    out.line(&line)
}
