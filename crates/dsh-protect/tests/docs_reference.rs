//! docs/reference.md lists the names the protection knows, generated from
//! `dsh_protect::names`: this test fails when they differ, and `DSH_BLESS=1` rewrites them.

use dsh_protect::names::{
    GIT_DIR_PARTS, HOME_STARTUP, HOOK_MANAGER_NAMES, JJ_REPO_CONFIG, LEFTHOOK_NAMES,
    NESTED_TOOL_NAMES, PROTECTED_NAMES, PROTECTED_PATTERNS, PROTECTED_WHEN_PRESENT,
};

const BEGIN: &str = "<!-- generated from dsh_protect::names: DSH_BLESS=1 cargo test -p dsh-protect --test docs_reference -->\n";
const END: &str = "<!-- end of the generated names -->\n";

fn names(list: &[&str]) -> String {
    list.iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn block() -> String {
    let rows = [
        (
            "`PROTECTED_NAMES`",
            "in each writable root, whether they exist or not (a missing one cannot be created)",
            names(PROTECTED_NAMES),
        ),
        (
            "`PROTECTED_WHEN_PRESENT`",
            "in each writable root, where they exist",
            names(PROTECTED_WHEN_PRESENT),
        ),
        (
            "`HOOK_MANAGER_NAMES`",
            "in every repository's worktree, nested ones too, where they exist",
            names(HOOK_MANAGER_NAMES),
        ),
        (
            "`LEFTHOOK_NAMES`",
            "in every repository's worktree, all of them once one exists",
            names(LEFTHOOK_NAMES),
        ),
        (
            "`PROTECTED_PATTERNS`",
            "entries of each writable root matching them (a new one is reported by the check)",
            names(PROTECTED_PATTERNS),
        ),
        (
            "`GIT_DIR_PARTS`",
            "in every git dir the roots' repositories use (nested, bare, submodule, worktree)",
            names(&GIT_DIR_PARTS),
        ),
        (
            "`NESTED_TOOL_NAMES`",
            "in any folder: an existing one read-only, a new one emptied by the check",
            format!("{}, `{JJ_REPO_CONFIG}`", names(NESTED_TOOL_NAMES)),
        ),
        (
            "`HOME_STARTUP`",
            "in the home directory, where a writable root holds them or their targets",
            names(HOME_STARTUP),
        ),
    ];
    let mut out = String::from(BEGIN);
    out.push_str("\n| list | protected | names |\n|---|---|---|\n");
    for (list, where_, names) in rows {
        out.push_str(&format!("| {list} | {where_} | {names} |\n"));
    }
    out.push('\n');
    out.push_str(END);
    out
}

#[test]
fn the_documented_names_are_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference.md");
    let doc = std::fs::read_to_string(&path).expect("docs/reference.md");
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/reference.md has no generated block of names (markers missing)");
    };
    let want = block();
    if doc[b..e + END.len()] != want {
        if std::env::var_os("DSH_BLESS").is_some() {
            let new = format!("{}{want}{}", &doc[..b], &doc[e + END.len()..]);
            std::fs::write(&path, new).expect("write docs/reference.md");
            return;
        }
        panic!(
            "docs/reference.md's names differ from the code: run \
             DSH_BLESS=1 cargo test -p dsh-protect --test docs_reference"
        );
    }
}
