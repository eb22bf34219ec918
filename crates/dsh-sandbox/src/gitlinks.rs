//! The submodule paths (gitlinks) a repository's index names, read from the index file
//! as git reads it, without running git.
//!
//! The host's `git status` runs git again inside every populated submodule its index
//! names, and that git reads the submodule's own config (`core.fsmonitor`) and runs its
//! hooks. The index is writable in a workspace (commits need it), so a confined command
//! can name any directory as a submodule, also one beneath a `node_modules` package, which
//! the walk does not enter ([`crate::walk::SKIPPED_DIRS`]). Every gitlink is therefore a
//! place to look for a git dir.
//!
//! The index is read over-approximately: the entries git's single-threaded reader sees,
//! and those its threaded reader sees (blocks of the offset table, `IEOT`, found through
//! the end-of-entries extension, `EOIE`, each starting without a previous name); the
//! shared index a split index links to (`link`), whose every path counts when a
//! replacement entry is a gitlink (which path it replaces is not decoded). The trailing
//! checksum is not checked (git does not check it either when it reads).
//!
//! # Limits
//! An index larger than [`MAX_INDEX_BYTES`] is not read (the layout is then incomplete).
//! A gitlink that is only in a commit (not yet in the index) is not seen: it reaches the
//! index when the user's own git checks that commit out, and the next command's check
//! finds it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes of one index (or shared index) read at most: a 100 000-file repository's index
/// is about 10 MiB.
pub const MAX_INDEX_BYTES: u64 = 512 << 20;

/// The file-type bits of an entry's mode, and those of a gitlink.
const TYPE_MASK: u32 = 0o170000;
const GITLINK: u32 = 0o160000;
/// The mask of an entry's name length in its flags (longer names are NUL-terminated).
const NAME_MASK: usize = 0x0fff;
/// The flag of an entry with a second flags word (index version 3 and later).
const EXTENDED: u16 = 0x4000;

/// What one repository's index names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gitlinks {
    /// Every gitlink path, relative to the worktree, as the index spells it (bytes,
    /// `/`-separated), sorted.
    pub paths: Vec<Vec<u8>>,
    /// Whether the index (and its shared index) could be read whole.
    pub complete: bool,
}

/// The gitlinks of the index in `git_dir` (a repository's or a linked worktree's git dir),
/// whose objects are named with hashes of `hash_len` bytes (20 for SHA-1, 32 for
/// SHA-256). A missing index names none.
///
/// Answers for an index (and shared index) unchanged since it was last read come from
/// memory: a file's inode, size, and change time tell a change, which no command can set
/// back.
pub fn read(git_dir: &Path, hash_len: usize) -> Gitlinks {
    let index = git_dir.join("index");
    let Some(stamp) = Stamp::of(&index) else {
        return Gitlinks {
            paths: Vec::new(),
            complete: true,
        };
    };
    let key = (index.clone(), hash_len);
    if let Some(hit) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        if hit.index == stamp && hit.shared.iter().all(|(p, s)| Stamp::of(p) == Some(*s)) {
            return hit.links;
        }
    }
    let (links, shared) = read_fresh(git_dir, &index, hash_len);
    // Stamped as they were before the read: a change during it is seen next time.
    if let Ok(mut c) = cache().lock() {
        if c.len() >= MAX_CACHED {
            c.clear();
        }
        let shared = shared
            .into_iter()
            .map(|p| {
                let s = Stamp::of(&p).unwrap_or_default();
                (p, s)
            })
            .collect();
        c.insert(
            key,
            Cached {
                index: stamp,
                shared,
                links: links.clone(),
            },
        );
    }
    links
}

/// Indexes remembered at most.
const MAX_CACHED: usize = 256;

#[derive(Clone)]
struct Cached {
    index: Stamp,
    shared: Vec<(PathBuf, Stamp)>,
    links: Gitlinks,
}

type Cache = Mutex<HashMap<(PathBuf, usize), Cached>>;

fn cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What tells that a file changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(p: &Path) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(p).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// Reads the index and its shared index; also says which shared index was read.
fn read_fresh(git_dir: &Path, index: &Path, hash_len: usize) -> (Gitlinks, Vec<PathBuf>) {
    let mut out = Gitlinks {
        paths: Vec::new(),
        complete: true,
    };
    let mut shared_read = Vec::new();
    let Some(bytes) = read_bounded(index, &mut out.complete) else {
        return (out, shared_read);
    };
    let main = parse(&bytes, hash_len, false);
    out.complete &= !main.exhausted;
    out.paths.extend(main.gitlinks);
    for hex in main.links {
        // git names the shared index by the hex of the hash the link holds; in the index's
        // own directory.
        let shared = git_dir.join(format!("sharedindex.{hex}"));
        let Some(bytes) = read_bounded(&shared, &mut out.complete) else {
            continue;
        };
        shared_read.push(shared);
        let base = parse(&bytes, hash_len, main.replaced_by_gitlink);
        out.complete &= !base.exhausted;
        out.paths.extend(base.gitlinks);
        if main.replaced_by_gitlink {
            out.paths.extend(base.all);
        }
    }
    out.paths.sort();
    out.paths.dedup();
    (out, shared_read)
}

/// The file's bytes, or none when it is missing, unreadable or too large (too large also
/// clears `complete`).
fn read_bounded(p: &Path, complete: &mut bool) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_INDEX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_INDEX_BYTES {
        *complete = false;
        return None;
    }
    Some(bytes)
}

/// What one index file holds, read every way git may read it.
#[derive(Debug, Default)]
struct Parsed {
    gitlinks: Vec<Vec<u8>>,
    /// Every entry's path, when asked for (a split index replaces one of them by a
    /// gitlink).
    all: Vec<Vec<u8>>,
    want_all: bool,
    /// Entries left to read: each way of reading reads each entry once, so more means
    /// offset tables naming the same entries over and over.
    budget: usize,
    exhausted: bool,
    /// The hex names of the shared indexes a `link` extension names.
    links: Vec<String>,
    /// An entry with an empty name (a split index's replacement) is a gitlink.
    replaced_by_gitlink: bool,
}

/// The smallest entry: stat data, mode, ids and size (40 bytes), a hash, flags, and a
/// name's NUL.
const MIN_ENTRY: usize = 40 + 20 + 2 + 1;

fn parse(bytes: &[u8], hash_len: usize, want_all: bool) -> Parsed {
    let mut out = Parsed {
        want_all,
        budget: 2 * (bytes.len() / MIN_ENTRY) + 16,
        ..Parsed::default()
    };
    if bytes.len() < 12 || &bytes[..4] != b"DIRC" {
        return out;
    }
    let version = be32(bytes, 4).unwrap_or(0);
    if !(2..=4).contains(&version) {
        return out;
    }
    let count = be32(bytes, 8).unwrap_or(0) as usize;
    let body_end = bytes.len().saturating_sub(hash_len);
    // As the single-threaded reader: every entry in turn, then the extensions.
    let end = entries(bytes, 12, count, version, hash_len, &mut out);
    if let Some(end) = end {
        extensions(bytes, end, body_end, version, hash_len, &mut out);
    }
    // As the threaded reader: extensions from where the end-of-entries extension says,
    // and entries in the blocks its offset table names.
    if let Some(at) = eoie(bytes, hash_len) {
        extensions(bytes, at, body_end, version, hash_len, &mut out);
    }
    out
}

/// Reads `count` entries from `at`; the offset after the last, if all were whole.
fn entries(
    bytes: &[u8],
    mut at: usize,
    count: usize,
    version: u32,
    hash_len: usize,
    out: &mut Parsed,
) -> Option<usize> {
    let mut previous: Vec<u8> = Vec::new();
    let mut first = true;
    for _ in 0..count {
        if out.budget == 0 {
            out.exhausted = true;
            return None;
        }
        out.budget -= 1;
        let (name, mode, next) =
            entry(bytes, at, version, hash_len, (!first).then_some(&previous))?;
        first = false;
        if mode & TYPE_MASK == GITLINK {
            if name.is_empty() {
                out.replaced_by_gitlink = true;
            } else {
                out.gitlinks.push(name.clone());
            }
        }
        if out.want_all && !name.is_empty() {
            out.all.push(name.clone());
        }
        previous = name;
        at = next;
    }
    Some(at)
}

/// One entry at `at`: its name, its mode and where the next begins. `previous` is the
/// name before it (a version 4 index strips a prefix of it), none at a block's start.
fn entry(
    bytes: &[u8],
    at: usize,
    version: u32,
    hash_len: usize,
    previous: Option<&Vec<u8>>,
) -> Option<(Vec<u8>, u32, usize)> {
    let mode = be32(bytes, at.checked_add(24)?)?;
    let flags_at = at.checked_add(40 + hash_len)?;
    let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
    let mut name_at = flags_at + 2;
    if flags & EXTENDED != 0 {
        if version < 3 {
            return None;
        }
        name_at += 2;
    }
    let len = usize::from(flags) & NAME_MASK;
    if version == 4 {
        let (strip, used) = varint(bytes.get(name_at..)?)?;
        let suffix_at = name_at + used;
        let copy = match previous {
            Some(p) => p.len().checked_sub(usize::try_from(strip).ok()?)?,
            None => 0,
        };
        let suffix_len = if len == NAME_MASK {
            nul_at(bytes, suffix_at)? - suffix_at
        } else {
            len.checked_sub(copy)?
        };
        let suffix = bytes.get(suffix_at..suffix_at.checked_add(suffix_len)?)?;
        let mut name = previous.map(|p| p[..copy].to_vec()).unwrap_or_default();
        name.extend_from_slice(suffix);
        Some((name, mode, suffix_at + suffix_len + 1))
    } else {
        let len = if len == NAME_MASK {
            nul_at(bytes, name_at)? - name_at
        } else {
            len
        };
        let name = bytes.get(name_at..name_at.checked_add(len)?)?.to_vec();
        // Padded with one to eight NULs to a multiple of eight bytes from the entry's start.
        let size = (name_at - at + len + 8) & !7;
        Some((name, mode, at + size))
    }
}

/// Reads the extensions from `at` to `end`: a shared index's name (`link`) and the blocks
/// of entries the offset table (`IEOT`) names.
fn extensions(
    bytes: &[u8],
    mut at: usize,
    end: usize,
    version: u32,
    hash_len: usize,
    out: &mut Parsed,
) {
    while at + 8 <= end {
        let sig = &bytes[at..at + 4];
        let Some(size) = be32(bytes, at + 4).map(|s| s as usize) else {
            return;
        };
        let Some(data) = (at + 8)
            .checked_add(size)
            .filter(|e| *e <= end)
            .map(|e| &bytes[at + 8..e])
        else {
            return;
        };
        match sig {
            b"link" if data.len() >= hash_len => {
                let hex: String = data[..hash_len]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                if !out.links.contains(&hex) {
                    out.links.push(hex);
                }
            }
            b"IEOT" if data.len() >= 4 => {
                for block in data[4..].chunks_exact(8) {
                    let offset = u32::from_be_bytes(block[..4].try_into().unwrap_or_default());
                    let count = u32::from_be_bytes(block[4..].try_into().unwrap_or_default());
                    entries(
                        bytes,
                        offset as usize,
                        count as usize,
                        version,
                        hash_len,
                        out,
                    );
                }
            }
            _ => {}
        }
        at += 8 + size;
    }
}

/// Where the extensions begin, as the end-of-entries extension (the last one) says.
fn eoie(bytes: &[u8], hash_len: usize) -> Option<usize> {
    let at = bytes.len().checked_sub(8 + 4 + hash_len + hash_len)?;
    if bytes.get(at..at + 4)? != b"EOIE" || be32(bytes, at + 4)? as usize != 4 + hash_len {
        return None;
    }
    let offset = be32(bytes, at + 8)? as usize;
    (offset >= 12 && offset <= at).then_some(offset)
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn nul_at(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|b| *b == 0)
        .map(|i| from + i)
}

/// git's offset varint (each continuation adds one before shifting); the value and the
/// bytes it took. One that overflows is zero and takes no bytes, as git reads it.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut i = 0;
    let mut c = *bytes.first()?;
    let mut val = u64::from(c & 0x7f);
    while c & 0x80 != 0 {
        val += 1;
        if val >> 57 != 0 {
            return Some((0, 0));
        }
        i += 1;
        c = *bytes.get(i)?;
        val = (val << 7) + u64::from(c & 0x7f);
    }
    Some((val, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository with a file, a gitlink at `deep/path/sub` and whatever `setup` does.
    fn repo_with_gitlink(setup: &[&[&str]], init: &[&str]) -> (tempfile::TempDir, usize) {
        let t = tempfile::tempdir().expect("tmp");
        let mut args = vec!["init", "-q"];
        args.extend(init);
        git(t.path(), &args);
        for s in setup {
            git(t.path(), s);
        }
        std::fs::write(t.path().join("a"), "a").expect("file");
        git(t.path(), &["add", "a"]);
        let len = if init.contains(&"--object-format=sha256") {
            32
        } else {
            20
        };
        let oid = "1".repeat(len * 2);
        let info = format!("160000,{oid},deep/path/sub");
        git(t.path(), &["update-index", "--add", "--cacheinfo", &info]);
        (t, len)
    }

    #[test]
    fn finds_gitlinks_in_every_index_format_git_writes() {
        let cases: &[(&[&[&str]], &[&str])] = &[
            (&[], &[]),
            (&[&["update-index", "--index-version", "3"]], &[]),
            (&[&["update-index", "--index-version", "4"]], &[]),
            (&[&["update-index", "--split-index"]], &[]),
            (&[], &["--object-format=sha256"]),
        ];
        for (setup, init) in cases {
            let (t, len) = repo_with_gitlink(setup, init);
            let links = read(&t.path().join(".git"), len);
            assert_eq!(
                links,
                Gitlinks {
                    paths: vec![b"deep/path/sub".to_vec()],
                    complete: true
                },
                "{setup:?} {init:?}"
            );
        }
    }

    #[test]
    fn a_changed_index_is_read_again() {
        let (t, len) = repo_with_gitlink(&[], &[]);
        let g = t.path().join(".git");
        assert_eq!(read(&g, len).paths.len(), 1);
        git(t.path(), &["rm", "-q", "--cached", "deep/path/sub"]);
        assert_eq!(read(&g, len).paths, Vec::<Vec<u8>>::new());
        let info = format!("160000,{},other", "2".repeat(40));
        git(t.path(), &["update-index", "--add", "--cacheinfo", &info]);
        assert_eq!(read(&g, len).paths, vec![b"other".to_vec()]);
    }

    /// One version 4 entry: `strip` bytes of the previous name dropped, `suffix` added.
    fn v4_entry(mode: u32, strip: u8, suffix: &[u8], full_len: usize) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e.extend(mode.to_be_bytes());
        e.extend([0u8; 12]);
        e.extend([0u8; 20]);
        e.extend(u16::try_from(full_len).expect("short").to_be_bytes());
        e.push(strip);
        e.extend(suffix);
        e.push(0);
        e
    }

    fn header(version: u32, count: u32) -> Vec<u8> {
        let mut h = b"DIRC".to_vec();
        h.extend(version.to_be_bytes());
        h.extend(count.to_be_bytes());
        h
    }

    fn extension(sig: &[u8], data: &[u8]) -> Vec<u8> {
        let mut e = sig.to_vec();
        e.extend(u32::try_from(data.len()).expect("small").to_be_bytes());
        e.extend(data);
        e
    }

    /// An index whose second entry only git's threaded reader sees (the header counts one
    /// entry; the offset table names a block at the second), and whose name that reader
    /// reads without the previous name's prefix.
    #[test]
    fn entries_only_the_threaded_reader_sees_count() {
        let mut bytes = header(4, 1);
        bytes.extend(v4_entry(0o100644, 0, b"node_modules/x", 14));
        let second = bytes.len();
        // Sequentially this would be "node_modules/x" minus 14 plus "evil"; at a block's
        // start it is "evil" alone.
        bytes.extend(v4_entry(0o160000, 14, b"evil", 4));
        let ext_at = bytes.len();
        let mut ieot = 1u32.to_be_bytes().to_vec();
        for (offset, count) in [(12u32, 1u32), (second as u32, 1)] {
            ieot.extend(offset.to_be_bytes());
            ieot.extend(count.to_be_bytes());
        }
        bytes.extend(extension(b"IEOT", &ieot));
        let mut eoie = (ext_at as u32).to_be_bytes().to_vec();
        eoie.extend([0u8; 20]);
        bytes.extend(extension(b"EOIE", &eoie));
        bytes.extend([0u8; 20]);
        let parsed = parse(&bytes, 20, false);
        assert_eq!(parsed.gitlinks, vec![b"evil".to_vec()]);
        assert!(!parsed.exhausted);
    }

    #[test]
    fn offset_tables_that_repeat_entries_stop_at_a_budget() {
        let mut bytes = header(4, 0);
        bytes.extend(v4_entry(0o100644, 0, b"a", 1));
        let ext_at = bytes.len();
        let mut ieot = 1u32.to_be_bytes().to_vec();
        for _ in 0..10_000 {
            ieot.extend(12u32.to_be_bytes());
            ieot.extend(1u32.to_be_bytes());
        }
        bytes.extend(extension(b"IEOT", &ieot));
        let mut eoie = (ext_at as u32).to_be_bytes().to_vec();
        eoie.extend([0u8; 20]);
        bytes.extend(extension(b"EOIE", &eoie));
        bytes.extend([0u8; 20]);
        assert!(parse(&bytes, 20, false).exhausted);
    }

    #[test]
    fn a_split_index_replacing_an_entry_by_a_gitlink_names_every_shared_path() {
        let mut shared = header(4, 2);
        shared.extend(v4_entry(0o100644, 0, b"node_modules/p/lib", 18));
        shared.extend(v4_entry(0o100644, 3, b"src", 18));
        shared.extend([0u8; 20]);
        let t = tempfile::tempdir().expect("tmp");
        let hex = "ab".repeat(20);
        std::fs::write(t.path().join(format!("sharedindex.{hex}")), &shared).expect("shared");
        let mut split = header(4, 1);
        split.extend(v4_entry(0o160000, 0, b"", 0));
        let mut link = vec![0xabu8; 20];
        link.extend([0u8; 8]);
        split.extend(extension(b"link", &link));
        split.extend([0u8; 20]);
        std::fs::write(t.path().join("index"), &split).expect("index");
        let links = read(t.path(), 20);
        assert_eq!(
            links.paths,
            vec![
                b"node_modules/p/lib".to_vec(),
                b"node_modules/p/src".to_vec()
            ]
        );
    }

    #[test]
    fn malformed_indexes_name_what_was_read_and_never_panic() {
        let (t, _) = repo_with_gitlink(&[], &[]);
        let whole = std::fs::read(t.path().join(".git/index")).expect("index");
        for cut in 0..whole.len() {
            let _ = parse(&whole[..cut], 20, true);
            let _ = parse(&whole[..cut], 32, true);
        }
        let mut flipped = whole.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = parse(&flipped, 20, true);
            flipped[i] ^= 0xff;
        }
        // An overflowing varint is zero and takes no bytes, as git reads it.
        assert_eq!(varint(&[0xff; 16]), Some((0, 0)));
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
    }
}
