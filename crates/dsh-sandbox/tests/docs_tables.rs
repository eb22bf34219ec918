//! docs/reading.md holds the default allow-list and deny list as tables generated from
//! the code: this test fails when they differ, and `DSH_BLESS=1` rewrites them.

use dsh_sandbox::deny_read::{DEFAULT_DENY_READ, DEFAULT_READ_ALLOW};

const BEGIN: &str = "<!-- generated from dsh_sandbox::deny_read: DSH_BLESS=1 cargo test -p dsh-sandbox --test docs_tables -->\n";
const END: &str = "<!-- end of generated tables -->\n";

fn tables() -> String {
    let mut out = String::from(BEGIN);
    out.push_str("\n| open in a closed home (`DEFAULT_READ_ALLOW`) |\n|---|\n");
    for p in DEFAULT_READ_ALLOW {
        out.push_str(&format!("| `{p}` |\n"));
    }
    out.push_str("\n| denied everywhere (`DEFAULT_DENY_READ`) |\n|---|\n");
    for p in DEFAULT_DENY_READ {
        out.push_str(&format!("| `{p}` |\n"));
    }
    out.push('\n');
    out.push_str(END);
    out
}

#[test]
fn the_documented_lists_are_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reading.md");
    let doc = std::fs::read_to_string(&path).expect("docs/reading.md");
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/reading.md has no generated block (markers missing)");
    };
    let current = &doc[b..e + END.len()];
    let want = tables();
    if current != want {
        if std::env::var_os("DSH_BLESS").is_some() {
            let new = format!("{}{}{}", &doc[..b], want, &doc[e + END.len()..]);
            std::fs::write(&path, new).expect("write docs/reading.md");
            return;
        }
        panic!("docs/reading.md's tables differ from the code: run DSH_BLESS=1 cargo test -p dsh-sandbox --test docs_tables");
    }
}
