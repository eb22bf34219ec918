//! Where `clone3` is refused (Docker's default seccomp profile answers it with `ENOSYS`),
//! a command's leader still ends up in its own cgroup: it joins by writing
//! `cgroup.procs`. This test re-runs itself under exactly such a seccomp filter.

use std::process::Command;

use dsh_process::{CaptureLimits, LocalSubprocess, OutputMode, SpawnSpec, Subprocess};

const HELPER: &str = "DSH_TEST_CLONE3_REFUSED";

#[test]
fn without_clone3_the_leader_still_joins_its_cgroup() {
    if std::env::var_os(HELPER).is_some() {
        return helper();
    }
    if let Err(why) = LocalSubprocess::new().cgroup_status() {
        dsh_testkit::skip(dsh_testkit::Need::Cgroups, why);
        return;
    }
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "without_clone3_the_leader_still_joins_its_cgroup",
            "--nocapture",
        ])
        .env(HELPER, "1")
        .output()
        .expect("run the helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("HELPER "))
        .unwrap_or_else(|| panic!("no helper report: {stdout}"));
    assert!(line.contains("clone3=ENOSYS"), "{line}");
    assert!(line.contains("/dsh-") && line.contains("/cmd-"), "{line}");
}

/// Under a filter that answers `clone3` with ENOSYS: spawn a command that prints its
/// cgroup, and report.
fn helper() {
    refuse_clone3();
    // SAFETY: a syscall with invalid arguments; only its errno matters.
    let probe = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    let refused = probe < 0 && errno == Some(libc::ENOSYS);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cgroup = rt.block_on(async {
        let sub = LocalSubprocess::new();
        let mut spec = SpawnSpec::new(["grep", "^0::", "/proc/self/cgroup"], "/");
        spec.stdout = OutputMode::Collect(CaptureLimits {
            max_bytes: 4096,
            max_spill_bytes: None,
        });
        let p = sub.spawn(spec).expect("spawn");
        p.done().await;
        p.stdout_capture().expect("capture").collected().text
    });
    println!(
        "HELPER clone3={} {}",
        if refused { "ENOSYS" } else { "allowed" },
        cgroup.trim()
    );
}

/// Installs a seccomp filter on this process: `clone3` fails with ENOSYS, all else runs.
fn refuse_clone3() {
    let nr = u32::try_from(libc::SYS_clone3).expect("syscall number");
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // if A == clone3 fall through, else skip one
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl on this process with a valid program that outlives the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}
