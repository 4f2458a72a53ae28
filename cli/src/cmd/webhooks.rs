//! `herald webhooks list|add|get|update|rm|rotate-secret|test|deliveries|recover`: the tenant's
//! event webhook endpoints. `add` and `rotate-secret` print the signing secret, which is never
//! shown again; `deliveries` shows each message with its attempts; `recover` sends again what
//! failed since a time.

use herald_common::{
    Timestamp,
    api::webhooks::{
        EndpointStatus, EventType, MessageStatus, RecoverIn, WebhookDelivery, WebhookDeliveryQuery,
        WebhookEndpoint, WebhookEndpointIn, WebhookEndpointPatch,
    },
    ids::{ApplicationId, WebhookEndpointId},
};

use super::when;
use crate::{
    context::Context,
    exit::Fail,
    output::{Cell, Output, Table, cell, short},
    style::Tone,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Every endpoint of the tenant.
    List,
    /// Register an endpoint: prints its signing secret, shown only this once.
    Add {
        /// Where events are POSTed (https, or http; never a private address unless allowed).
        #[arg(id = "endpoint_url", value_name = "URL")]
        url: String,
        /// Only these event types (repeat the flag); without it, every type.
        #[arg(long = "event", value_name = "TYPE")]
        events: Vec<EventType>,
        #[arg(long)]
        description: Option<String>,
        /// Only this application's events; without it, every application of the tenant.
        #[arg(long, value_name = "APP_ID")]
        application: Option<ApplicationId>,
    },
    /// One endpoint.
    Get { endpoint_id: WebhookEndpointId },
    /// Change an endpoint: only what is given changes.
    Update {
        endpoint_id: WebhookEndpointId,
        /// Where events are POSTed from now on (`--url` is the daemon's address).
        #[arg(long = "endpoint-url", id = "endpoint_url", value_name = "URL")]
        url: Option<String>,
        #[arg(long, conflicts_with = "no_description")]
        description: Option<String>,
        /// Remove the description.
        #[arg(long)]
        no_description: bool,
        /// Receive only these event types (repeat the flag).
        #[arg(long = "event", value_name = "TYPE", conflicts_with = "all_events")]
        events: Vec<EventType>,
        /// Receive every event type.
        #[arg(long)]
        all_events: bool,
        /// Enable the endpoint again (clears why it was disabled).
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Stop sending to the endpoint.
        #[arg(long)]
        disable: bool,
    },
    /// Remove an endpoint: nothing more is sent to it.
    Rm { endpoint_id: WebhookEndpointId },
    /// A new signing secret; the old one keeps signing beside it for the overlap (24 h).
    RotateSecret { endpoint_id: WebhookEndpointId },
    /// Send the endpoint a `webhook.test` event.
    Test { endpoint_id: WebhookEndpointId },
    /// The endpoint's messages, newest first, with every attempt.
    Deliveries {
        endpoint_id: WebhookEndpointId,
        /// pending, succeeded or failed.
        #[arg(long)]
        status: Option<MessageStatus>,
        #[command(flatten)]
        pages: super::PageArgs,
    },
    /// Send again every message to the endpoint that failed since WHEN, with its original id.
    Recover {
        endpoint_id: WebhookEndpointId,
        /// RFC 3339, or an age such as 2h or 7d.
        #[arg(long, value_parser = when)]
        since: Timestamp,
    },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.operator()?;
        let out = &ctx.out;
        match self {
            Command::List => {
                let list = client.webhooks().await?;
                if out.is_json() {
                    return out.json(&list);
                }
                let mut table = Table::new(&["ID", "STATUS", "EVENTS", "URL"]);
                for e in &list.endpoints {
                    table.row(vec![
                        e.endpoint_id.to_string().into(),
                        status(e),
                        events(e).into(),
                        about(e).into(),
                    ]);
                }
                out.table(&table)
            }
            Command::Add { url, events, description, application } => {
                let input = WebhookEndpointIn {
                    url,
                    description,
                    event_types: (!events.is_empty()).then_some(events),
                    application_id: application,
                };
                let created = client.add_webhook(&input).await?;
                if out.is_json() {
                    return out.json(&created);
                }
                let mut shown = fields(out, &created.endpoint);
                shown.push(("secret", cell(created.secret, Tone::Bold)));
                out.fields(&shown)?;
                out.note("the secret is shown only now: keep it where your receiver can read it");
                Ok(())
            }
            Command::Get { endpoint_id } => {
                let endpoint = client.webhook(&endpoint_id).await?;
                if out.is_json() {
                    return out.json(&endpoint);
                }
                show(out, &endpoint)
            }
            Command::Update {
                endpoint_id,
                url,
                description,
                no_description,
                events,
                all_events,
                enable,
                disable,
            } => {
                let patch = WebhookEndpointPatch {
                    url,
                    description: if no_description { Some(None) } else { description.map(Some) },
                    event_types: if all_events {
                        Some(None)
                    } else {
                        (!events.is_empty()).then_some(Some(events))
                    },
                    status: match (enable, disable) {
                        (true, _) => Some(EndpointStatus::Enabled),
                        (_, true) => Some(EndpointStatus::Disabled),
                        _ => None,
                    },
                };
                let endpoint = client.update_webhook(&endpoint_id, &patch).await?;
                if out.is_json() {
                    return out.json(&endpoint);
                }
                show(out, &endpoint)
            }
            Command::Rm { endpoint_id } => {
                client.remove_webhook(&endpoint_id).await?;
                if !out.is_json() {
                    out.line(&format!("removed {endpoint_id}"))?;
                    out.note(
                        "nothing more is sent to it; the daemon deletes its deliveries in the background",
                    );
                }
                Ok(())
            }
            Command::RotateSecret { endpoint_id } => {
                let secret = client.rotate_webhook_secret(&endpoint_id).await?;
                if out.is_json() {
                    return out.json(&secret);
                }
                out.fields(&[("secret", cell(secret.secret, Tone::Bold))])?;
                out.note("shown only now; for the overlap every delivery is signed with the new and the old secret");
                Ok(())
            }
            Command::Test { endpoint_id } => {
                let sent = client.test_webhook(&endpoint_id).await?;
                if out.is_json() {
                    return out.json(&sent);
                }
                out.line(&format!(
                    "webhook.test queued as {}: herald webhooks deliveries {endpoint_id} shows how it went",
                    sent.message_id
                ))
            }
            Command::Deliveries { endpoint_id, status, pages } => {
                let super::PageArgs { page, limit, all } = pages;
                let client = &client;
                let endpoint_id = &endpoint_id;
                let fetch = |page| {
                    let query = WebhookDeliveryQuery { status, page: Some(page), limit: Some(limit) };
                    async move { client.webhook_deliveries(endpoint_id, &query).await }
                };
                super::pages(out, &DELIVERY_HEADERS, "messages", (page, all), fetch, delivery_row).await
            }
            Command::Recover { endpoint_id, since } => {
                let recovered = client.recover_webhook(&endpoint_id, &RecoverIn { since }).await?;
                if out.is_json() {
                    return out.json(&recovered);
                }
                out.line(&format!(
                    "{} failed messages since {} queued again, each with its original webhook-id",
                    recovered.queued,
                    out.time(since)
                ))
            }
        }
    }
}

fn status(e: &WebhookEndpoint) -> Cell {
    match e.status {
        // Failing, its later events held until it answers: not "enabled" as a healthy one is.
        EndpointStatus::Enabled if e.paused => cell("paused", Tone::Busy),
        EndpointStatus::Enabled => cell("enabled", Tone::Good),
        EndpointStatus::Disabled => cell("disabled", Tone::Bad),
    }
}

fn events(e: &WebhookEndpoint) -> String {
    match &e.event_types {
        None => "all".to_owned(),
        Some(types) => types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(","),
    }
}

/// The URL, with why the endpoint is disabled or its description.
fn about(e: &WebhookEndpoint) -> String {
    match (&e.disabled_reason, &e.description) {
        (Some(reason), _) => format!("{} ({reason})", e.url),
        (None, Some(description)) => format!("{} ({description})", e.url),
        (None, None) => e.url.clone(),
    }
}

fn show(out: &Output, e: &WebhookEndpoint) -> Result<(), Fail> {
    out.fields(&fields(out, e))
}

/// An endpoint as `name value` lines.
fn fields(out: &Output, e: &WebhookEndpoint) -> Vec<(&'static str, Cell)> {
    let mut fields = vec![
        ("id", Cell::from(e.endpoint_id.to_string())),
        ("url", e.url.clone().into()),
        ("status", status(e)),
    ];
    if let Some(reason) = &e.disabled_reason {
        fields.push(("disabled", cell(reason.clone(), Tone::Bad)));
    }
    if let Some(since) = e.failing_since.filter(|_| e.status == EndpointStatus::Enabled) {
        let failing = if e.paused {
            format!("{} (paused: a probe a second, its later events held until it answers)", out.time(since))
        } else {
            out.time(since)
        };
        fields.push(("failing since", cell(failing, Tone::Bad)));
    }
    if let Some(description) = &e.description {
        fields.push(("description", description.clone().into()));
    }
    fields.push(("events", events(e).into()));
    fields.push((
        "application",
        e.application_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "every application".into())
            .into(),
    ));
    fields.push(("created", out.time(e.created_at).into()));
    fields
}

const DELIVERY_HEADERS: [&str; 7] =
    ["MESSAGE", "CREATED", "EVENT", "STATUS", "ATTEMPTS", "LAST ANSWER", "NEXT"];

fn delivery_row(out: &Output, d: &WebhookDelivery) -> Vec<Cell> {
    let tone = match d.status {
        MessageStatus::Succeeded => Tone::Good,
        MessageStatus::Pending => Tone::Busy,
        MessageStatus::Failed => Tone::Bad,
    };
    let last = d.attempts.last().map(|a| {
        // The error says the status when there was one ("HTTP 500 Internal Server Error").
        let answer = match (a.http_status, &a.error) {
            (Some(code), Some(error)) if !error.contains(&code.to_string()) => format!("{code} {error}"),
            (_, Some(error)) => error.clone(),
            (Some(code), None) => code.to_string(),
            (None, None) => "-".to_owned(),
        };
        format!("{} · {} ms", short(&answer, 50), a.duration_ms)
    });
    vec![
        d.message_id.to_string().into(),
        out.time(d.created_at).into(),
        d.event_type.as_str().into(),
        cell(d.status.as_str(), tone),
        d.attempts.len().to_string().into(),
        last.unwrap_or_else(|| "-".to_owned()).into(),
        d.next_attempt_at.map(|t| out.time(t)).unwrap_or_else(|| "-".to_owned()).into(),
    ]
}
