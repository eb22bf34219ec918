//! The child environment: scrub, overlay, tombstones.

use dsh_process::{LocalSubprocess, Subprocess};

use crate::support::bash;

#[tokio::test]
async fn ambient_credentials_and_dsh_names_are_scrubbed_and_explicit_ones_pass() {
    // The test binary's own environment is the ambient one a child would inherit.
    std::env::set_var("DSH_TEST_PLAIN", "ambient");
    std::env::set_var("MY_API_KEY", "k");
    std::env::set_var("GH_TOKEN", "t");
    std::env::set_var("DB_PASSWORD", "p");
    std::env::set_var("DSH_STALE", "stale");
    std::env::set_var("DSH_TEST_REMOVE_ME", "x");
    let sub = LocalSubprocess::new();
    let mut spec = bash(
        "echo \"${DSH_TEST_PLAIN-unset} ${MY_API_KEY-unset} ${GH_TOKEN-unset} ${DB_PASSWORD-unset} ${DSH_STALE-unset} ${DSH_FRESH-unset} ${EXPLICIT_TOKEN-unset} ${PATH:+path}\"",
    );
    spec.env.insert("DSH_FRESH".into(), Some("fresh".into()));
    spec.env
        .insert("EXPLICIT_TOKEN".into(), Some("opt-in".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let out = p.stdout_capture().expect("cap").collected().text;
    assert_eq!(out, "unset unset unset unset unset fresh opt-in path\n");
}

#[tokio::test]
async fn a_tombstone_removes_an_ambient_variable() {
    std::env::set_var("DSH_TEST_AMBIENT_PLAIN_VAR_X", "1");
    std::env::set_var("PLAIN_AMBIENT_FOR_TOMBSTONE", "here");
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo ${PLAIN_AMBIENT_FOR_TOMBSTONE-unset} ${NEW_ONE-unset}");
    spec.env.insert("PLAIN_AMBIENT_FOR_TOMBSTONE".into(), None);
    spec.env.insert("NEW_ONE".into(), Some("new".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(
        p.stdout_capture().expect("cap").collected().text,
        "unset new\n"
    );
}

#[tokio::test]
async fn an_explicit_term_reaches_the_child_unchanged() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo $TERM");
    spec.env.insert("TERM".into(), Some("xterm-test".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(
        p.stdout_capture().expect("cap").collected().text,
        "xterm-test\n"
    );
}
