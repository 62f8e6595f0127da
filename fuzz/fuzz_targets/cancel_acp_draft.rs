//! `AcpDraft::recognize`: `$/cancelRequest {"id": …}`, handled only once the session is initialized and only by a
//! side that declared the capability. See [`tower_cancel_fuzz::check_cancel`].

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel::{dialect::AcpDraft, scope::SessionState};
use tower_cancel_fuzz::{check_cancel, CancelShape};

const SHAPE: CancelShape = CancelShape {
    method: AcpDraft::CANCEL_METHOD,
    id: "id",
    reason: None,
};

fuzz_target!(|data: &[u8]| {
    let before_initialize = SessionState::default();
    let initialized = SessionState::default();
    initialized.mark_initialized();
    let declared = AcpDraft::new();
    let undeclared = AcpDraft::new().declared(false);
    check_cancel(&declared, &before_initialize, false, SHAPE, data);
    check_cancel(&undeclared, &initialized, false, SHAPE, data);
    check_cancel(&declared, &initialized, true, SHAPE, data);
});
