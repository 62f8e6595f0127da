//! `Lsp::recognize`: `$/cancelRequest {"id": …}`. See [`tower_cancel_fuzz::check_cancel`].

#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_cancel::{dialect::Lsp, scope::SessionState};
use tower_cancel_fuzz::{check_cancel, CancelShape};

const SHAPE: CancelShape = CancelShape {
    method: Lsp::CANCEL_METHOD,
    id: "id",
    reason: None,
};

fuzz_target!(|data: &[u8]| {
    check_cancel(&Lsp, &SessionState::default(), true, SHAPE, data);
});
