//! `heraldd admin …`: bootstrap work done on the database directly, with the same configuration
//! as `serve` (CONTRACT §3). Also the development credentials of `heraldd --dev`.

use anyhow::{Context, bail};
use herald_common::{
    Scope, Timestamp,
    api::admin::{
        ApplicationCreated, ApplicationSecret, Bootstrapped, KeyCreated, KeyRevoked, TenantCreated,
    },
    ids::{ApplicationId, KeyId, TenantId, UserId},
};

use crate::{
    auth::{api_key, user},
    secret::ServerSecret,
    state::AppState,
    store::Store,
};

pub async fn create_tenant(store: &Store, name: &str) -> anyhow::Result<TenantCreated> {
    let name = checked_name(name)?;
    let record = store.create_tenant(name).await?;
    Ok(TenantCreated { tenant_id: record.id, name: record.name })
}

pub async fn create_application(
    store: &Store,
    secret: &ServerSecret,
    tenant_id: &TenantId,
    name: &str,
) -> anyhow::Result<ApplicationCreated> {
    let name = checked_name(name)?;
    let Some(record) = store.create_application(tenant_id, name).await? else {
        bail!("there is no tenant {tenant_id}");
    };
    Ok(ApplicationCreated {
        application_id: record.id.clone(),
        tenant_id: tenant_id.clone(),
        signing_secret: user::signing_secret(secret, &record),
        name: record.name,
    })
}

/// Creates a key; with no scopes named it gets [`Scope::defaults`].
pub async fn create_key(
    store: &Store,
    application_id: &ApplicationId,
    scopes: &[Scope],
) -> anyhow::Result<KeyCreated> {
    let mut scopes = if scopes.is_empty() { Scope::defaults() } else { scopes.to_vec() };
    scopes.sort();
    scopes.dedup();
    let key = api_key::generate();
    let Some(key_id) = store.create_api_key(application_id, api_key::hash(&key), &scopes).await? else {
        bail!("there is no application {application_id}");
    };
    Ok(KeyCreated { key_id, api_key: key, scopes })
}

/// The application's current signing secret; with `rotate`, a new one (the old one stops
/// verifying user tokens at once).
pub async fn application_secret(
    store: &Store,
    secret: &ServerSecret,
    application_id: &ApplicationId,
    rotate: bool,
) -> anyhow::Result<ApplicationSecret> {
    let record = if rotate {
        store.rotate_signing_secret(application_id).await?
    } else {
        store.get_application(application_id).await?
    };
    let Some(record) = record else {
        bail!("there is no application {application_id}");
    };
    Ok(ApplicationSecret {
        application_id: application_id.clone(),
        signing_secret: user::signing_secret(secret, &record),
        rotated: rotate,
    })
}

pub async fn revoke_key(store: &Store, key_id: &KeyId) -> anyhow::Result<KeyRevoked> {
    let revoked = store.revoke_api_key(key_id).await?;
    if !revoked {
        bail!("there is no active key {key_id}");
    }
    Ok(KeyRevoked { key_id: key_id.clone(), revoked })
}

/// A new tenant, an application and a key with every scope.
pub async fn bootstrap(store: &Store, secret: &ServerSecret, name: &str) -> anyhow::Result<Bootstrapped> {
    let tenant = create_tenant(store, name).await?;
    let app = create_application(store, secret, &tenant.tenant_id, name).await?;
    let key = create_key(store, &app.application_id, &Scope::ALL).await?;
    Ok(Bootstrapped {
        tenant_id: tenant.tenant_id,
        application_id: app.application_id,
        api_key: key.api_key,
        key_id: key.key_id,
        signing_secret: app.signing_secret,
    })
}

fn checked_name(name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        bail!("a name must be 1 to 200 characters");
    }
    Ok(name.to_owned())
}

/// What `heraldd --dev` prints and writes into the CLI profile.
pub struct DevCredentials {
    pub bootstrap: Bootstrapped,
    /// `None` when operators use a configured identity provider instead of the built-in one.
    pub operator_token: Option<String>,
    pub user_id: UserId,
    pub user_token: String,
}

/// The development tenant of `--dev`: the one recorded in `<data_dir>/dev-credentials.json` if
/// its key still works, else a new one. Tokens are minted fresh at every start.
pub async fn dev_credentials(state: &AppState) -> anyhow::Result<DevCredentials> {
    let path = state.config.data_dir.join("dev-credentials.json");
    let saved =
        std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice::<Bootstrapped>(&bytes).ok());
    let reusable = match &saved {
        Some(saved) => state
            .store
            .find_api_key(&api_key::hash(&saved.api_key))
            .await?
            .is_some_and(|k| k.revoked_at.is_none()),
        None => false,
    };
    let bootstrap = match saved {
        Some(saved) if reusable => saved,
        _ => {
            let created = bootstrap(&state.store, &state.secret, "Development").await?;
            crate::secret::write_private_file(&path, &serde_json::to_vec_pretty(&created)?)?;
            created
        }
    };
    let operator_token = match &state.dev_idp {
        Some(idp) => Some(idp.operator_token(&bootstrap.tenant_id, 30 * 24 * 3600)?),
        None => None,
    };
    let app = state
        .store
        .get_application(&bootstrap.application_id)
        .await?
        .context("the development application is missing")?;
    let user_id = UserId::parse("dev-user")?;
    let expires = Timestamp::from_millis((Timestamp::now().seconds() + 24 * 3600) * 1000);
    let user_token = user::mint(&state.secret, &app, &user_id, expires)?;
    Ok(DevCredentials { bootstrap, operator_token, user_id, user_token })
}

/// Sets the messages that carry OTP codes for an application (`{code}` and `{minutes}` are
/// replaced; `None` restores the default).
pub async fn set_otp_messages(
    store: &Store,
    application_id: &ApplicationId,
    messages: crate::store::OtpMessages,
) -> anyhow::Result<serde_json::Value> {
    for (name, text) in [("email body", &messages.otp_email_body), ("SMS body", &messages.otp_sms_body)] {
        if text.as_deref().is_some_and(|t| !t.contains("{code}")) {
            bail!("the OTP {name} must contain {{code}}");
        }
    }
    if !store.set_otp_messages(application_id, messages.clone()).await? {
        bail!("there is no application {application_id}");
    }
    Ok(serde_json::json!({
        "application_id": application_id,
        "otp_email_subject": messages.otp_email_subject,
        "otp_email_body": messages.otp_email_body,
        "otp_sms_body": messages.otp_sms_body,
    }))
}
