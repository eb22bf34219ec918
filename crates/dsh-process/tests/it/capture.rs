//! Bounded capture with real processes: tail, spill, offsets, UTF-8.

use dsh_process::{LocalSubprocess, Subprocess};

use crate::support::{bash, collect};

#[tokio::test]
async fn stdout_and_stderr_caps_are_independent() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("printf 'a%.0s' $(seq 500); printf 'b%.0s' $(seq 500) >&2");
    spec.stdout = collect(500, None);
    spec.stderr = collect(100, None);
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let out = p.stdout_capture().expect("out").collected();
    let err = p.stderr_capture().expect("err").collected();
    assert_eq!((out.text.len(), out.truncated), (500, false));
    assert_eq!(
        (err.text.len(), err.truncated, err.total_bytes),
        (100, true, 500)
    );
}

#[tokio::test]
async fn the_tail_stays_in_memory_and_the_spill_file_holds_everything() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("for i in $(seq 1 200); do echo line-$i; done");
    spec.stdout = collect(500, Some(1 << 20));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let c = p.stdout_capture().expect("cap").collected();
    assert!(c.truncated);
    assert!(c.text.contains("line-200\n") && !c.text.contains("line-1\n"));
    let spill = c.spill.expect("spill file");
    assert!(spill.complete);
    let full = std::fs::read_to_string(&spill.path).expect("read spill");
    let expected: String = (1..=200).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(full, expected);
    let mode = std::fs::metadata(&spill.path).expect("meta");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let dir_mode = std::fs::metadata(spill.path.parent().expect("dir")).expect("meta");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&dir_mode.permissions()) & 0o777,
        0o700
    );
}

#[tokio::test]
async fn a_stream_past_the_spill_cap_keeps_its_head_in_the_file_marked_incomplete() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("for i in $(seq 1 2000); do echo line-$i; done");
    spec.stdout = collect(100, Some(1000));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let c = p.stdout_capture().expect("cap").collected();
    let spill = c.spill.expect("spill");
    assert!(!spill.complete);
    assert_eq!(spill.bytes, 1000);
    let head = std::fs::read(&spill.path).expect("read");
    let expected: String = (1..=2000).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(head, expected.as_bytes()[..1000]);
    assert!(c.text.ends_with("line-2000\n"));
}

#[tokio::test]
async fn no_spill_file_is_made_for_output_that_fits() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo small");
    spec.stdout = collect(100, Some(1000));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(p.stdout_capture().expect("cap").collected().spill, None);
    assert!(sub.spill_dir().is_none());
}

#[tokio::test]
async fn independent_readers_see_every_byte_and_old_offsets_are_lossy() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo first; read x; echo second");
    spec.stdin = dsh_process::StdinMode::Pipe;
    spec.stdout = collect(8, None);
    let mut p = sub.spawn(spec).expect("spawn");
    let cap = p.stdout_capture().expect("cap").clone();
    crate::support::wait_for_total(&cap, 6).await;
    let r1 = cap.read_from(0);
    assert_eq!(
        (r1.text.as_str(), r1.next_offset, r1.lossy),
        ("first\n", 6, false)
    );
    let mut w = p.take_stdin().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut w, b"go\n")
        .await
        .expect("write");
    p.done().await;
    let r2 = cap.read_from(r1.next_offset);
    assert_eq!(
        (r2.text.as_str(), r2.next_offset, r2.lossy),
        ("second\n", 13, false)
    );
    let r3 = cap.read_from(0);
    assert!(r3.lossy);
    assert_eq!(r3.text, "\nsecond\n");
}

#[tokio::test]
async fn a_character_split_between_writes_is_carried_not_replaced() {
    // For each 2-, 3- and 4-byte character and every split point inside it, the command
    // writes the first part, waits for a go on stdin, then writes the rest; a read in
    // between must return only the complete text before it, never U+FFFD.
    let sub = LocalSubprocess::new();
    for ch in ['é', '€', '😀'] {
        let mut utf8 = [0u8; 4];
        let bytes = ch.encode_utf8(&mut utf8).as_bytes().to_vec();
        let hex = |b: &[u8]| b.iter().map(|b| format!("\\x{b:02x}")).collect::<String>();
        for split in 1..bytes.len() {
            let script = format!(
                "printf 'a{}'; read x; printf '{}b'",
                hex(&bytes[..split]),
                hex(&bytes[split..])
            );
            let mut spec = bash(&script);
            spec.stdin = dsh_process::StdinMode::Pipe;
            let mut p = sub.spawn(spec).expect("spawn");
            let cap = p.stdout_capture().expect("cap").clone();
            crate::support::wait_for_total(&cap, 1 + split as u64).await;
            let r1 = cap.read_from(0);
            assert_eq!(
                (r1.text.as_str(), r1.next_offset),
                ("a", 1),
                "{ch} split {split}"
            );
            let mut w = p.take_stdin().expect("stdin");
            tokio::io::AsyncWriteExt::write_all(&mut w, b"go\n")
                .await
                .expect("write");
            p.done().await;
            let r2 = cap.read_from(r1.next_offset);
            assert_eq!(r2.text, format!("{ch}b"), "{ch} split {split}");
            assert_eq!(cap.collected().text, format!("a{ch}b"));
        }
    }
}

#[tokio::test]
async fn invalid_utf8_is_decoded_lossily_never_an_error() {
    let sub = LocalSubprocess::new();
    let p = sub
        .spawn(bash("printf 'a\\xffb\\xe2\\x82'"))
        .expect("spawn");
    p.done().await;
    assert_eq!(
        p.stdout_capture().expect("cap").collected().text,
        "a\u{FFFD}b\u{FFFD}"
    );
}
