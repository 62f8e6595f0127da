//! `Mcp::recognize`: `notifications/cancelled {"requestId": …, "reason": …}`. See
//! [`tower_cancel_fuzz::check_cancel`].

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel::{dialect::Mcp, scope::SessionState};
use tower_cancel_fuzz::{check_cancel, CancelShape};

const SHAPE: CancelShape = CancelShape {
    method: Mcp::CANCEL_METHOD,
    id: "requestId",
    reason: Some("reason"),
};

fuzz_target!(|data: &[u8]| {
    check_cancel(&Mcp, &SessionState::default(), true, SHAPE, data);
});
