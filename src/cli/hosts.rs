//! `phoenix host` (the host side of the protocol) and `phoenix hosts …` (the operator's view
//! of its hosts).

use crate::hosts::serve;

/// Answer the one request on stdin with one reply on stdout. Always exits 0: whatever went
/// wrong is in the reply, where the operator's phoenix reads it.
pub fn host() -> i32 {
    let reply = serve::answer_from(std::io::stdin().lock());
    // As it is: the envelope carries the host protocol's own `format_version`, not the one
    // of phoenix's `--json` documents.
    let text = serde_json::to_string(&reply).expect("a reply serializes");
    super::output::out(&format!("{text}\n"));
    crate::error::exit::OK
}
