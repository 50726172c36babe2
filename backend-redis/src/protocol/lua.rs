//! Lua sources from the files under `src/lua/`: a file's code without its leading comment, and
//! the shared helpers (`lua/helpers/`, one `local function` per file) that a piece of code calls.
//! The plain scripts ([`crate::protocol::scripts`]) and the function libraries
//! ([`crate::protocol::library`]) are both assembled from these.

/// The helper `lua/helpers/<name>.lua`, with its name: the file defines `local function <name>`.
macro_rules! helper {
    ($name:literal) => {
        ($name, include_str!(concat!("../lua/helpers/", $name, ".lua")))
    };
}

/// The helpers the scripts call, each with its name and file. Each script is sent with only the
/// helpers it calls ([`with_helpers`]): every `local function` is a closure the server builds on
/// every call. A helper calls only helpers listed before it.
pub(crate) const HELPERS: [(&str, &str); 19] = [
    helper!("now_ms"),
    helper!("mine"),
    helper!("fence_of"),
    helper!("bounded_pttl"),
    helper!("unqueue"),
    helper!("head"),
    helper!("wake"),
    helper!("data_loss_wait"),
    helper!("gap_left"),
    helper!("streak_on"),
    helper!("streak_off"),
    helper!("outlive_clock"),
    helper!("next_fence"),
    helper!("take"),
    // The helpers of the other kinds' scripts.
    helper!("role"),
    helper!("permits"),
    helper!("token"),
    helper!("keep"),
    helper!("extend"),
];

/// The code of a `.lua` file: without the comment it starts with (what the file does, its KEYS,
/// ARGV and reply) and the blank line after it, which the server has no use for.
pub(crate) fn code(file: &str) -> &str {
    let mut rest = file;
    while rest.starts_with("--") {
        rest = rest.split_once('\n').map_or("", |(_, after)| after);
    }
    rest.strip_prefix('\n').unwrap_or(rest)
}

/// `body` (a script's code, with any helpers of its own) after the helpers of [`HELPERS`] that it
/// calls, directly or through another helper, and no others.
pub(crate) fn with_helpers(body: &str) -> String {
    let mut s = helpers_of(body);
    s.push_str(body);
    s
}

/// The code of the helpers of [`HELPERS`] that `code` calls, directly or through another helper,
/// in their order (a helper before the helpers that call it).
pub(crate) fn helpers_of(code_text: &str) -> String {
    let calls = |text: &str, name: &str| text.contains(&format!("{name}("));
    let mut used = [false; HELPERS.len()];
    // A helper calls only helpers listed before it: walking back finds every one needed.
    for i in (0..HELPERS.len()).rev() {
        let name = HELPERS[i].0;
        used[i] = calls(code_text, name) || (i + 1..HELPERS.len()).any(|j| used[j] && calls(code(HELPERS[j].1), name));
    }
    HELPERS
        .iter()
        .zip(&used)
        .filter(|(_, used)| **used)
        .map(|((_, file), _)| code(file))
        .collect()
}
