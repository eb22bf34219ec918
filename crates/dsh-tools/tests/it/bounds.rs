//! Every string argument of every tool has a size bound, checked before it is used: one
//! byte over is `INVALID_ARGS` naming the argument, its size and the bound; at the bound
//! the call goes on; the schema says the bound.
// Regression: issue 11 (a 2 MB `glob` pattern or `grep` include panicked inside globset).

use dsh_core::CancelToken;
use dsh_tools::schema::bounds::{
    COMMAND_MAX_BYTES, DESCRIPTION_MAX_BYTES, EDIT_MAX_BYTES, GLOB_MAX_BYTES,
    GREP_PATTERN_MAX_BYTES, JUSTIFICATION_MAX_BYTES, PATH_MAX_BYTES, WRITE_MAX_BYTES,
};
use serde_json::{json, Value};

use crate::support::{call, code, fixture};

/// `(tool, arguments that pass, bounded argument, its bound)` for every bound.
fn cases() -> Vec<(&'static str, Value, &'static str, usize)> {
    let bash = json!({"command": "true", "description": "d"});
    let escalating = json!({"command": "true", "description": "d",
        "sandbox_permissions": "workspace-write", "justification": "j"});
    let write = json!({"file_path": "w.txt", "content": "c"});
    let edit = json!({"file_path": "e.txt", "old_string": "a", "new_string": "b"});
    let with = |v: &Value, k: &str, x: &str| {
        let mut v = v.clone();
        v[k] = json!(x);
        v
    };
    vec![
        ("bash", bash.clone(), "command", COMMAND_MAX_BYTES),
        ("bash", bash.clone(), "description", DESCRIPTION_MAX_BYTES),
        ("bash", bash.clone(), "workdir", PATH_MAX_BYTES),
        ("bash", escalating, "justification", JUSTIFICATION_MAX_BYTES),
        (
            "read",
            json!({"file_path": "r.txt"}),
            "file_path",
            PATH_MAX_BYTES,
        ),
        ("write", write.clone(), "file_path", PATH_MAX_BYTES),
        ("write", write.clone(), "content", WRITE_MAX_BYTES),
        (
            "write",
            with(&write, "sandbox_permissions", "workspace-write"),
            "justification",
            JUSTIFICATION_MAX_BYTES,
        ),
        ("edit", edit.clone(), "file_path", PATH_MAX_BYTES),
        ("edit", edit.clone(), "old_string", EDIT_MAX_BYTES),
        ("edit", edit.clone(), "new_string", EDIT_MAX_BYTES),
        (
            "edit",
            with(&edit, "sandbox_permissions", "workspace-write"),
            "justification",
            JUSTIFICATION_MAX_BYTES,
        ),
        (
            "glob",
            json!({"pattern": "*.rs"}),
            "pattern",
            GLOB_MAX_BYTES,
        ),
        ("glob", json!({"pattern": "*.rs"}), "path", PATH_MAX_BYTES),
        (
            "grep",
            json!({"pattern": "x"}),
            "pattern",
            GREP_PATTERN_MAX_BYTES,
        ),
        ("grep", json!({"pattern": "x"}), "include", GLOB_MAX_BYTES),
        ("grep", json!({"pattern": "x"}), "path", PATH_MAX_BYTES),
        (
            "read_image",
            json!({"file_path": "i.png"}),
            "file_path",
            PATH_MAX_BYTES,
        ),
    ]
}

#[tokio::test]
async fn one_byte_over_any_bound_is_invalid_args_naming_the_argument_size_and_bound() {
    let f = fixture(|b| b, vec![]).await;
    f.session.begin_turn().await.expect("turn");
    for (tool, base, arg, bound) in cases() {
        let mut args = base.clone();
        args[arg] = json!("a".repeat(bound + 1));
        let r = f
            .world
            .call(Some(&f.session), call(tool, args), CancelToken::new())
            .await;
        let want = format!(
            "Error: {arg} is {} bytes; the limit is {bound} bytes: ",
            bound + 1
        );
        assert_eq!(code(&r), Some("INVALID_ARGS"), "{tool} {arg}: {}", r.text);
        assert!(r.text.starts_with(&want), "{tool} {arg}: {}", r.text);
        // No approval was asked for the escalating ones: nothing ran.
        assert!(f.answers.questions().is_empty(), "{tool} {arg}");
    }
}

#[tokio::test]
async fn a_2_mb_glob_pattern_or_grep_include_is_invalid_args_and_the_world_keeps_serving() {
    let f = fixture(|b| b, vec![]).await;
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let two_mb = "?".repeat(2 << 20);
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": two_mb})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        r.text,
        "Error: pattern is 2097152 bytes; the limit is 4096 bytes: use a shorter glob, or \
         several calls"
    );
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "x", "include": two_mb})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        r.text,
        "Error: include is 2097152 bytes; the limit is 4096 bytes: use a shorter glob, or \
         several calls"
    );
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "*.nothing"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "No files found");
}

#[tokio::test]
async fn at_its_bound_an_argument_is_used_and_a_command_of_max_arg_strlen_runs() {
    let f = fixture(|b| b, vec![]).await;
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    // The longest argument Linux's execve takes: the bound is the kernel's, not a guess.
    let command = format!("echo ran #{}", "a".repeat(COMMAND_MAX_BYTES - 10));
    assert_eq!(command.len(), COMMAND_MAX_BYTES);
    let r = f
        .world
        .call(
            s,
            call("bash", json!({"command": command, "description": "d"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("ran\n", false));
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "a".repeat(GLOB_MAX_BYTES)})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "No files found");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "a".repeat(PATH_MAX_BYTES)})),
            CancelToken::new(),
        )
        .await;
    assert_ne!(code(&r), Some("INVALID_ARGS"), "{}", r.text);
}

#[tokio::test]
async fn a_parser_message_quotes_only_the_head_of_a_large_argument() {
    let f = fixture(|b| b, vec![]).await;
    let r = f
        .world
        .call(
            None,
            call(
                "read",
                json!({"file_path": "r.txt", "offset": "o".repeat(1 << 20)}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("INVALID_ARGS"));
    assert!(
        r.text
            .starts_with("Error: invalid arguments: invalid type: string \"ooo"),
        "{}",
        &r.text[..200]
    );
    assert!(r.text.len() < 1000, "{} bytes", r.text.len());
    assert!(r.text.ends_with(" bytes in all)"), "{}", r.text);
}

#[tokio::test]
async fn each_tool_schema_states_its_bounds_as_max_length() {
    let f = fixture(|b| b, vec![]).await;
    let schemas = f.world.schemas();
    for (tool, _, arg, bound) in cases() {
        let (_, _, schema) = schemas.iter().find(|(n, _, _)| n == tool).expect("listed");
        assert_eq!(
            schema["properties"][arg]["maxLength"],
            json!(bound),
            "{tool} {arg}: {schema}"
        );
    }
}
