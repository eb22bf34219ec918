//! docs/errors.md lists every error code with what it means and what to do, generated from
//! the doc comments of `ErrorCode`: this test fails when the page and the code differ, and
//! `DSH_BLESS=1` rewrites the page.

use dsh_core::ErrorCode;

const BEGIN: &str =
    "<!-- generated from dsh_core::ErrorCode: DSH_BLESS=1 cargo test -p dsh-core --test docs_errors -->\n";
const END: &str = "<!-- end of generated table -->\n";

/// Each variant's doc comment, by its name, as `src/error.rs` writes it (one line, the
/// `as_str()` note left out).
fn variant_docs() -> Vec<(String, String)> {
    let src = include_str!("../src/error.rs");
    let body = src
        .split_once("pub enum ErrorCode {")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(body, _)| body)
        .expect("the ErrorCode enum");
    let mut out = Vec::new();
    let mut doc = Vec::new();
    for line in body.lines().map(str::trim) {
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_owned());
        } else if let Some(name) = line.strip_suffix(',') {
            let text = doc.join(" ");
            let text = match text.split_once("`as_str()`") {
                Some((before, _)) => before.trim().to_owned(),
                None => text,
            };
            out.push((name.to_owned(), text));
            doc.clear();
        }
    }
    out
}

/// `text` with each intra-doc link (``[`X`](Self::X)``) written as the code it names
/// (`` `CODE` ``), or as its plain name when it names no code.
fn plain_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some((name, tail)) = after.split_once("`](") else {
            out.push_str(&rest[at..]);
            return out;
        };
        let Some((_, tail)) = tail.split_once(')') else {
            out.push_str(&rest[at..]);
            return out;
        };
        let code = ErrorCode::ALL
            .iter()
            .find(|c| format!("{c:?}") == name)
            .map_or(name, |c| c.as_str());
        out.push_str(&format!("`{code}`"));
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn table() -> String {
    let docs = variant_docs();
    let mut out = String::from(BEGIN);
    out.push_str("\n| code | what happened, and what to do |\n|---|---|\n");
    for code in ErrorCode::ALL {
        let name = format!("{code:?}");
        let text = docs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.as_str())
            .unwrap_or_else(|| panic!("{name} has no doc comment in src/error.rs"));
        assert!(!text.is_empty(), "{name}'s doc comment is empty");
        let text = plain_links(text);
        out.push_str(&format!(
            "| `{}` | {} |\n",
            code.as_str(),
            text.replace('|', "\\|")
        ));
    }
    out.push('\n');
    out.push_str(END);
    out
}

#[test]
fn every_code_is_documented_and_the_page_is_the_code() {
    assert_eq!(
        variant_docs().len(),
        ErrorCode::ALL.len(),
        "ErrorCode::ALL and the enum's variants differ"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let want = table();
    let current = match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) => Some((b, e)),
        _ => None,
    };
    if current.is_some_and(|(b, e)| doc[b..e + END.len()] == want) {
        return;
    }
    if std::env::var_os("DSH_BLESS").is_some() {
        let new = match current {
            Some((b, e)) => format!("{}{}{}", &doc[..b], want, &doc[e + END.len()..]),
            None => format!(
                "# Error codes\n\nEvery error a user or a model sees carries one of these codes \
                 (`error.code` in a tool result and the session log, and in `dsh exec --json`). \
                 A code never changes meaning; new ones may be added.\n\n{want}"
            ),
        };
        std::fs::write(&path, new).expect("write docs/errors.md");
        return;
    }
    panic!("docs/errors.md differs from the code: run DSH_BLESS=1 cargo test -p dsh-core --test docs_errors");
}
