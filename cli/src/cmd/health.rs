//! `herald health` and `herald whoami`.

use herald_common::api::health::TaskState;

use crate::{
    context::Context,
    exit::Fail,
    output::{Cell, Table, cell},
    style::Tone,
};

pub async fn health(ctx: &Context) -> Result<(), Fail> {
    let ready = ctx.anonymous().readyz().await?;
    if ctx.out.is_json() {
        return ctx.out.json(&ready);
    }
    let database = ready.database.clone().unwrap_or_default();
    ctx.out.fields(&[("status", cell(ready.status.as_str(), Tone::Good)), ("database", database.into())])?;
    if !ready.tasks.is_empty() {
        let mut table = Table::new(&["TASK", "STATE", "RESTARTS"]);
        for (name, task) in &ready.tasks {
            let tone = if task.state == TaskState::Running { Tone::Good } else { Tone::Bad };
            table.row(vec![
                name.as_str().into(),
                cell(task.state.as_str(), tone),
                task.restarts.to_string().into(),
            ]);
        }
        ctx.out.line("")?;
        ctx.out.table(&table)?;
    }
    Ok(())
}

pub async fn whoami(ctx: &Context) -> Result<(), Fail> {
    let who = ctx.any()?.whoami().await?;
    if ctx.out.is_json() {
        return ctx.out.json(&who);
    }
    let scopes: Vec<String> = who.scopes.iter().map(ToString::to_string).collect();
    let mut fields: Vec<(&str, Cell)> = vec![
        (
            "kind",
            serde_json::to_value(who.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
                .into(),
        ),
        ("tenant", who.tenant_id.to_string().into()),
    ];
    if let Some(app) = &who.application_id {
        fields.push(("application", app.to_string().into()));
    }
    if let Some(key) = &who.key_id {
        fields.push(("key", key.to_string().into()));
    }
    if let Some(subject) = &who.subject {
        fields.push(("subject", subject.clone().into()));
    }
    fields.push(("scopes", scopes.join(" ").into()));
    ctx.out.fields(&fields)
}
