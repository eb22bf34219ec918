//! Reading the small files git keeps its facts in (`.git` pointers, `commondir`, config
//! files), which a confined command may have replaced with something else: through
//! [`dsh_sandbox::small_file`] (never waits on a FIFO, reads a bound), and as git reads a
//! path from them.

use std::path::Path;

pub(crate) use dsh_sandbox::small_file::{open_regular, read, read_bytes};

/// The path a `.git` file, `commondir` or `gitdir` file holds, read as git reads it: up to
/// the first NUL byte, with trailing line feeds and carriage returns taken off and nothing
/// else (spaces and inner line breaks are part of the path). A `.git` file's must follow
/// `gitdir: `. `None` when it is missing, empty or not a regular file.
pub(crate) fn git_path(path: &Path, after: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = read_bytes(path, POINTER_MAX)?;
    parse_git_path(&bytes, after).map(|p| std::ffi::OsStr::from_bytes(p).into())
}

/// The path in a pointer file's bytes, as [`git_path`] reads it; `None` when there is
/// none (empty, or without `after`).
pub(crate) fn parse_git_path<'a>(bytes: &'a [u8], after: &str) -> Option<&'a [u8]> {
    let bytes = &bytes[..bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len())];
    let mut rest = bytes.strip_prefix(after.as_bytes())?;
    while let [head @ .., b'\n' | b'\r'] = rest {
        rest = head;
    }
    (!rest.is_empty()).then_some(rest)
}

/// What a pointer-sized file (`.git`, `commondir`, `gitdir`) may hold: a path and a line
/// break, with room to spare.
pub(crate) const POINTER_MAX: u64 = 8192;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_directory_and_a_huge_file_are_read_safely() {
        let d = tempfile::tempdir().expect("tempdir");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("c");
        // SAFETY: mkfifo(3) with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read(&fifo, 100), None, "a FIFO is not read (nor waited on)");
        assert_eq!(read(d.path(), 100), None);
        let big = d.path().join("big");
        let f = std::fs::File::create(&big).expect("big");
        f.set_len(1 << 40).expect("sparse");
        assert_eq!(read(&big, 4).map(|s| s.len()), Some(4));
    }

    // `evil ` (a trailing space) named in a `.git` file or a `commondir` is read as git reads
    // it: trimming the space would look elsewhere than git.
    #[test]
    fn git_paths_are_read_as_git_reads_them() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("f");
        for (text, after, want) in [
            ("gitdir: ../evil \n", "gitdir: ", Some("../evil ")),
            ("gitdir: a\r\n\n", "gitdir: ", Some("a")),
            ("gitdir:a\n", "gitdir: ", None),
            (". \n", "", Some(". ")),
            ("x\ny\n", "", Some("x\ny")),
            ("a\0b\n", "", Some("a")),
            ("\n", "", None),
        ] {
            std::fs::write(&f, text).expect("write");
            assert_eq!(
                git_path(&f, after),
                want.map(std::path::PathBuf::from),
                "{text:?}"
            );
        }
    }
}
