//! Stored rows as the API shows them: the one place where a row becomes a response type, used by
//! the handlers and the streams alike. Rows arrive typed (ids and enums are parsed when the row is
//! read, and a corrupt value fails that read), so these conversions cannot fail.

use herald_common::{
    Timestamp,
    api::{
        activity::{ActivityItem, ActivityStatus},
        applications::ApplicationOut,
        inbox::InboxItem,
        notifications::{AttemptOut, AttemptOutcome, NotificationOut, ReceiptOut},
        templates::TemplateOut,
    },
};

use crate::store::{
    ActivityRow, ApplicationRecord, AttemptRecord, InboxRecord, NotificationRecord, ReceiptRecord,
    TemplateRecord,
};

fn count(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// An inbox item as the inbox and the stream show it.
pub fn inbox_item(record: InboxRecord) -> InboxItem {
    InboxItem {
        id: record.id,
        title: record.title,
        body: record.body,
        is_read: record.is_read,
        archived: record.archived,
        created_at: Timestamp::from_millis(record.created_at),
        data: record.data.map(|d| d.0).unwrap_or_default(),
    }
}

/// A feed row as the feed and the activity stream show it: only an item that failed, that a
/// receipt said did not arrive (`undelivered`, `bounced`, CONTRACT §8) or that was complained
/// about has a failure reason, and only one a retry applies to ([`ActivityStatus::RETRIED`])
/// can be retryable.
pub fn activity_item(row: ActivityRow) -> ActivityItem {
    let retried = ActivityStatus::RETRIED.contains(&row.status);
    // Complained and suppressed are final without a retry; their reason is still worth reading.
    let failed = retried || matches!(row.status, ActivityStatus::Complained | ActivityStatus::Suppressed);
    ActivityItem {
        transaction_id: row.transaction_id,
        application_id: row.application_id,
        application_name: row.application_name,
        channel: row.channel,
        recipient_masked: row.recipient_masked,
        status: row.status,
        failure_reason: row.failure_reason.filter(|_| failed),
        created_at: Timestamp::from_millis(row.created_at),
        retryable: row.retryable && retried,
        retry_count: count(row.retry_count),
        category: row.category,
    }
}

/// A recorded delivery attempt.
pub fn attempt_out(attempt: AttemptRecord) -> AttemptOut {
    AttemptOut {
        attempt: count(attempt.attempt),
        started_at: Timestamp::from_millis(attempt.started_at),
        finished_at: Timestamp::from_millis(attempt.finished_at),
        outcome: attempt.outcome,
        provider_message_id: attempt.provider_message_id,
        error: attempt.error,
    }
}

/// An OTP transaction's one delivery, which happened inside its send request.
pub fn otp_attempt(row: &ActivityRow) -> AttemptOut {
    let outcome = if row.status == ActivityStatus::Failed {
        AttemptOutcome::PermanentFailure
    } else {
        AttemptOutcome::Sent
    };
    AttemptOut {
        attempt: 1,
        started_at: Timestamp::from_millis(row.created_at),
        finished_at: Timestamp::from_millis(row.created_at),
        outcome,
        provider_message_id: None,
        error: row.failure_reason.clone(),
    }
}

/// A notification with its attempts and receipts.
pub fn notification_out(
    record: NotificationRecord,
    attempts: Vec<AttemptRecord>,
    receipts: Vec<ReceiptRecord>,
) -> NotificationOut {
    NotificationOut {
        notification_id: record.id,
        application_id: record.application_id,
        channel: record.channel,
        recipient_masked: record.recipient_masked,
        delivery_status: record.status,
        failure_reason: record.failure_reason,
        retryable: record.retryable,
        retry_count: count(record.retry_count),
        created_at: Timestamp::from_millis(record.created_at),
        updated_at: Timestamp::from_millis(record.updated_at),
        attempts: attempts.into_iter().map(attempt_out).collect(),
        receipts: receipts.into_iter().map(receipt_out).collect(),
    }
}

/// A stored receipt.
pub fn receipt_out(record: ReceiptRecord) -> ReceiptOut {
    ReceiptOut {
        provider: record.provider,
        provider_status: record.provider_status,
        status: record.status,
        error_code: record.error_code,
        detail: record.detail,
        received_at: Timestamp::from_millis(record.received_at),
    }
}

/// A stored template.
pub fn template_out(record: TemplateRecord) -> TemplateOut {
    TemplateOut {
        template_id: record.id,
        name: record.name,
        subject: record.subject,
        body: record.body,
        html_body: record.html_body,
        created_at: Timestamp::from_millis(record.created_at),
        updated_at: Timestamp::from_millis(record.updated_at),
    }
}

/// An application (never its signing secret).
pub fn application_out(record: ApplicationRecord) -> ApplicationOut {
    ApplicationOut {
        application_id: record.id,
        tenant_id: record.tenant_id,
        name: record.name,
        created_at: Timestamp::from_millis(record.created_at),
    }
}
