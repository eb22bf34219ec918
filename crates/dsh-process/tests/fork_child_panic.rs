//! A panic between `fork` and `exec` aborts the child: it never unwinds into the copy of
//! the parent's frames that the child holds. dsh is built with `panic = "unwind"` (so that
//! a panicking tool call ends alone) and its reaper runs as a `pre_exec` hook; this pins
//! the std behaviour the reaper's module docs ("Panics") rely on.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;

#[test]
fn a_panic_in_a_pre_exec_hook_aborts_the_child_instead_of_unwinding() {
    let mut cmd = Command::new("/bin/true");
    // SAFETY: the hook only panics with a static message, which std formats without
    // allocating (std calls `panic::always_abort()` in the child before the hook).
    unsafe {
        cmd.pre_exec(|| panic!("a bug between fork and exec"));
    }
    // Had the panic unwound in the child, the child would have gone on running this test
    // harness (and exited 101 after it); aborting, it dies by SIGABRT before exec.
    let status = cmd
        .spawn()
        .expect("std reports the aborted child as started")
        .wait()
        .expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
}
