//! The writer's kinds of grouped work, registered once. Each kind states itself where it
//! belongs (`impl WriteKind` beside its statements); adding one is that module and a line here.

use super::{
    notifications::{Attempt, Dispatch},
    otp::{OtpSend, OtpVerify},
    receipts::Receipt,
    suppressions::SuppressionAdd,
    writer::lanes,
};

lanes! {
    /// One lane per kind, in the order a batch writes their groups.
    pub(crate) struct Lanes {
        dispatches: Dispatch,
        attempts: Attempt,
        otp_sends: OtpSend,
        otp_verifications: OtpVerify,
        receipts: Receipt,
        suppressions: SuppressionAdd,
    }
}
