//! `Acp::recognize`: `$/cancel_request {"requestId": …}`. See [`tower_cancel_fuzz::check_cancel`].

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel::{dialect::Acp, scope::SessionState};
use tower_cancel_fuzz::{check_cancel, CancelShape};

const SHAPE: CancelShape = CancelShape {
    method: Acp::CANCEL_METHOD,
    id: "requestId",
    reason: None,
};

fuzz_target!(|data: &[u8]| {
    check_cancel(&Acp, &SessionState::default(), true, SHAPE, data);
});
