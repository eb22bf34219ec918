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
//! An index not as git writes it (cut short, a name without its NUL, more entries than
//! its size holds) is a gap: the layout is incomplete, which is reported and refused.
//!
//! # Limits
//! An index larger than [`MAX_INDEX_BYTES`] with its shared indexes is not read (the
//! layout is then incomplete).
//! A gitlink that is only in a commit (not yet in the index) is not seen: it reaches the
//! index when the user's own git checks that commit out, and the next command's check
//! finds it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use dsh_sandbox::MAX_INDEX_BYTES;

/// Shared indexes one index may link to that are read (git reads one).
const MAX_SHARED: usize = 4;

/// The file-type bits of an entry's mode, and those of a gitlink.
const TYPE_MASK: u32 = 0o170000;
const GITLINK: u32 = 0o160000;
/// The mask of an entry's name length in its flags (longer names are NUL-terminated).
const NAME_MASK: usize = 0x0fff;
/// The flag of an entry with a second flags word (git reads it in any version).
const EXTENDED: u16 = 0x4000;

/// What one repository's index names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gitlinks {
    /// Every gitlink path, relative to the worktree, as git uses it (bytes up to the first
    /// NUL, `/`-separated), sorted.
    pub paths: Vec<Vec<u8>>,
    /// Whether the index (and its shared index) was read whole and as git writes it: an
    /// index dsh cannot read exactly is a gap, never taken as naming nothing.
    pub complete: bool,
}

/// The gitlinks of the index in `git_dir` (a repository's or a linked worktree's git dir),
/// whose objects are named with hashes of `hash_len` bytes (20 for SHA-1, 32 for
/// SHA-256). A missing index names none.
///
/// Answers for an index (and shared index) unchanged since it was last read come from
/// memory: the inode, size and change time of the file git would open (links followed),
/// taken from the open file before it is read, tell a change, which no command can set
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
        if hit.index == Some(stamp) && hit.shared.iter().all(|(p, s)| Stamp::of(p) == *s) {
            return hit.links;
        }
    }
    let fresh = read_fresh(git_dir, &index, hash_len);
    if let Ok(mut c) = cache().lock() {
        if c.len() >= MAX_CACHED {
            c.clear();
        }
        c.insert(key, fresh.clone());
    }
    fresh.links
}

/// Indexes remembered at most.
const MAX_CACHED: usize = 256;

/// One read: what it found and the stamps of the files it read, as they were opened.
#[derive(Clone)]
struct Cached {
    index: Option<Stamp>,
    shared: Vec<(PathBuf, Option<Stamp>)>,
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
    /// The stamp of the file at `p`, links followed (as git opens it).
    fn of(p: &Path) -> Option<Stamp> {
        std::fs::metadata(p).ok().map(|m| Stamp::from(&m))
    }

    fn from(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// Reads the index and the shared indexes it links to.
fn read_fresh(git_dir: &Path, index: &Path, hash_len: usize) -> Cached {
    let mut out = Cached {
        index: None,
        shared: Vec::new(),
        links: Gitlinks {
            paths: Vec::new(),
            complete: true,
        },
    };
    let mut budget = MAX_INDEX_BYTES;
    let complete = &mut out.links.complete;
    let Some((bytes, stamp)) = open_read(index, &mut budget, complete) else {
        // Unread: stamped so that a later index is read.
        out.index = Stamp::of(index);
        return out;
    };
    out.index = Some(stamp);
    let mut paths = BTreeSet::new();
    let main = parse(&bytes, hash_len, false);
    *complete &= main.exact;
    paths.extend(main.gitlinks);
    for (i, hex) in main.links.iter().enumerate() {
        // git names the shared index by the hex of the hash the link holds, in the index's
        // own directory.
        let shared = git_dir.join(format!("sharedindex.{hex}"));
        if i >= MAX_SHARED {
            *complete = false;
            break;
        }
        let Some((bytes, stamp)) = open_read(&shared, &mut budget, complete) else {
            out.shared.push((shared.clone(), Stamp::of(&shared)));
            continue;
        };
        out.shared.push((shared, Some(stamp)));
        let base = parse(&bytes, hash_len, main.replaced_by_gitlink);
        *complete &= base.exact;
        paths.extend(base.gitlinks);
        // Which entry a gitlink replaces is not decoded: each is a candidate.
        paths.extend(base.all);
    }
    out.links.paths = paths.into_iter().collect();
    out
}

/// The bytes of the regular file at `p` (links followed, a FIFO never waited on) and its
/// stamp taken before reading; none when it is missing, not a regular file or
/// unreadable. More than `budget` bytes is a gap (`complete` cleared); what is read is
/// taken from the budget.
fn open_read(p: &Path, budget: &mut u64, complete: &mut bool) -> Option<(Vec<u8>, Stamp)> {
    use std::io::Read;
    let (file, meta) = crate::small_file::open_regular(p)?;
    let stamp = Stamp::from(&meta);
    if meta.size() > *budget {
        *complete = false;
        return None;
    }
    let mut bytes = Vec::new();
    file.take(*budget + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > *budget {
        *complete = false;
        return None;
    }
    *budget -= bytes.len() as u64;
    Some((bytes, stamp))
}

/// What one index file holds, read every way git may read it.
#[derive(Debug, Default)]
struct Parsed {
    gitlinks: BTreeSet<Vec<u8>>,
    /// Every entry's path, when asked for (a split index replaces one of them by a
    /// gitlink).
    all: BTreeSet<Vec<u8>>,
    want_all: bool,
    /// The hex names of the shared indexes a `link` extension names.
    links: Vec<String>,
    /// An entry with an empty name (a split index's replacement) is a gitlink.
    replaced_by_gitlink: bool,
    /// Bytes of names left to copy: each way of reading reads each entry once, so more
    /// means offset tables naming the same entries over and over.
    budget: usize,
    /// Entry blocks (offset, count) of offset tables already read.
    blocks: HashSet<(usize, usize)>,
    /// Whether the file was read whole, as git writes it, within the budget.
    exact: bool,
}

fn parse(bytes: &[u8], hash_len: usize, want_all: bool) -> Parsed {
    let mut out = Parsed {
        want_all,
        budget: 4 * bytes.len() + (1 << 20),
        exact: true,
        ..Parsed::default()
    };
    if bytes.len() < 12 || &bytes[..4] != b"DIRC" {
        out.exact = false;
        return out;
    }
    let version = be32(bytes, 4).unwrap_or(0);
    if !(2..=4).contains(&version) {
        out.exact = false;
        return out;
    }
    let count = be32(bytes, 8).unwrap_or(0) as usize;
    let body_end = bytes.len().saturating_sub(hash_len);
    // As the single-threaded reader: every entry in turn, then the extensions.
    match entries(bytes, 12, count, version, hash_len, &mut out) {
        Some(end) => extensions(bytes, end, body_end, version, hash_len, &mut out),
        None => out.exact = false,
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
        let e = entry(bytes, at, version, hash_len, (!first).then_some(&previous))?;
        first = false;
        out.budget = out.budget.checked_sub(e.name.len() + 64)?;
        // git uses the name as a C string: up to its first NUL.
        let used = e.name.split(|b| *b == 0).next().unwrap_or_default();
        let mut names = vec![used.to_vec()];
        if let Some(longer) = e.unterminated {
            // Not as git writes it: what git would make of it is not known exactly.
            out.exact = false;
            names.push(longer);
        }
        for name in names {
            if e.mode & TYPE_MASK == GITLINK {
                if name.is_empty() {
                    out.replaced_by_gitlink = true;
                } else {
                    out.gitlinks.insert(name.clone());
                }
            }
            if out.want_all && !name.is_empty() {
                out.all.insert(name);
            }
        }
        previous = e.name;
        at = e.next;
    }
    Some(at)
}

/// One entry as read.
struct Entry {
    name: Vec<u8>,
    mode: u32,
    /// Where the next begins.
    next: usize,
    /// The name up to the next NUL, when the byte after the name is not one.
    unterminated: Option<Vec<u8>>,
}

/// One entry at `at`. `previous` is the name before it (a version 4 index strips a
/// prefix of it), none at a block's start.
fn entry(
    bytes: &[u8],
    at: usize,
    version: u32,
    hash_len: usize,
    previous: Option<&Vec<u8>>,
) -> Option<Entry> {
    let mode = be32(bytes, at.checked_add(24)?)?;
    let flags_at = at.checked_add(40 + hash_len)?;
    let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
    let mut name_at = flags_at + 2;
    if flags & EXTENDED != 0 {
        name_at += 2;
    }
    let len = usize::from(flags) & NAME_MASK;
    let (name, name_end, next) = if version == 4 {
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
        let end = suffix_at.checked_add(suffix_len)?;
        let mut name = previous.map(|p| p[..copy].to_vec()).unwrap_or_default();
        name.extend_from_slice(bytes.get(suffix_at..end)?);
        (name, end, end + 1)
    } else {
        let len = if len == NAME_MASK {
            nul_at(bytes, name_at)? - name_at
        } else {
            len
        };
        let end = name_at.checked_add(len)?;
        let name = bytes.get(name_at..end)?.to_vec();
        // Padded with one to eight NULs to a multiple of eight bytes from the entry's start.
        let size = (name_at - at + len + 8) & !7;
        (name, end, at + size)
    };
    let unterminated = match bytes.get(name_end) {
        Some(0) => None,
        _ => {
            let to = nul_at(bytes, name_end).unwrap_or(bytes.len());
            let mut longer = name.split(|b| *b == 0).next().unwrap_or_default().to_vec();
            if !name.contains(&0) {
                longer.extend_from_slice(&bytes[name_end..to]);
            }
            Some(longer)
        }
    };
    Some(Entry {
        name,
        mode,
        next,
        unterminated,
    })
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
            out.exact = false;
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
                    if !out.blocks.insert((offset as usize, count as usize)) {
                        continue;
                    }
                    if entries(
                        bytes,
                        offset as usize,
                        count as usize,
                        version,
                        hash_len,
                        out,
                    )
                    .is_none()
                    {
                        out.exact = false;
                    }
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

    /// Ends the index `bytes` with an offset table naming `blocks` (offset, count), the
    /// end-of-entries extension pointing at it, and a (zero) checksum.
    fn with_offset_table(bytes: &mut Vec<u8>, blocks: &[(u32, u32)]) {
        let ext_at = u32::try_from(bytes.len()).expect("small");
        let mut ieot = 1u32.to_be_bytes().to_vec();
        for (offset, count) in blocks {
            ieot.extend(offset.to_be_bytes());
            ieot.extend(count.to_be_bytes());
        }
        bytes.extend(extension(b"IEOT", &ieot));
        let mut eoie = ext_at.to_be_bytes().to_vec();
        eoie.extend([0u8; 20]);
        bytes.extend(extension(b"EOIE", &eoie));
        bytes.extend([0u8; 20]);
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
        with_offset_table(&mut bytes, &[(12, 1), (second as u32, 1)]);
        let parsed = parse(&bytes, 20, false);
        assert_eq!(
            parsed.gitlinks.into_iter().collect::<Vec<_>>(),
            vec![b"evil".to_vec()]
        );
    }

    // An offset table naming one long entry thousands of times reads each block once:
    // read per mention, a 4 MB index takes 27 s and 1.5 GB.
    #[test]
    fn offset_tables_that_repeat_entries_read_each_block_once() {
        let mut bytes = header(4, 0);
        let long = vec![b'a'; 100_000];
        bytes.extend(v4_entry(0o160000, 0, &long, 0xfff));
        with_offset_table(&mut bytes, &[(12, 1); 10_000]);
        let parsed = parse(&bytes, 20, false);
        assert_eq!(parsed.gitlinks.len(), 1);
        assert_eq!(parsed.blocks.len(), 1);
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

    /// One version 2 entry named `name`, its flags saying `len`, followed by `after` and
    /// padded.
    fn v2_entry(mode: u32, extended: bool, name: &[u8], len: usize, after: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e.extend(mode.to_be_bytes());
        e.extend([0u8; 12 + 20]);
        let flags = u16::try_from(len).expect("short") | if extended { EXTENDED } else { 0 };
        e.extend(flags.to_be_bytes());
        if extended {
            e.extend([0u8; 2]);
        }
        let fixed = e.len();
        e.extend(name);
        e.extend(after);
        let size = (fixed + len + 8) & !7;
        e.resize(size.max(e.len()), 0);
        e
    }

    fn v2_index(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = header(2, u32::try_from(entries.len()).expect("few"));
        for e in entries {
            bytes.extend(e);
        }
        bytes.extend([0u8; 20]);
        bytes
    }

    // The extended flag set on a version 2 index's first entry (git reads it) must not
    // stop the parser there, silently.
    #[test]
    fn the_extended_flag_is_read_in_any_version() {
        let bytes = v2_index(&[
            v2_entry(0o100644, true, b"a", 1, b""),
            v2_entry(0o160000, false, b"node_modules/p", 14, b""),
        ]);
        let parsed = parse(&bytes, 20, false);
        assert!(parsed.exact);
        assert_eq!(
            parsed.gitlinks.into_iter().collect::<Vec<_>>(),
            vec![b"node_modules/p".to_vec()]
        );
    }

    // A NUL hidden in a gitlink's name (git uses the name up to it), and the NUL left out
    // after another (git reads on into the next bytes): names are read as git uses them.
    #[test]
    fn names_are_read_as_git_uses_them() {
        let bytes = v2_index(&[v2_entry(0o160000, false, b"node_modules/p\0zz", 17, b"")]);
        let parsed = parse(&bytes, 20, false);
        assert!(parsed.exact);
        assert_eq!(
            parsed.gitlinks.into_iter().collect::<Vec<_>>(),
            vec![b"node_modules/p".to_vec()]
        );
        let bytes = v2_index(&[v2_entry(0o160000, false, b"node_modules/p", 14, b"q")]);
        let parsed = parse(&bytes, 20, false);
        assert!(
            !parsed.exact,
            "a name without its NUL is not as git writes it"
        );
        assert_eq!(
            parsed.gitlinks.into_iter().collect::<Vec<_>>(),
            vec![b"node_modules/p".to_vec(), b"node_modules/pq".to_vec()]
        );
    }

    #[test]
    fn an_index_cut_short_is_a_gap() {
        let (t, len) = repo_with_gitlink(&[], &[]);
        let whole = std::fs::read(t.path().join(".git/index")).expect("index");
        assert!(parse(&whole, len, false).exact);
        assert!(!parse(&whole[..whole.len() / 2], len, false).exact);
        std::fs::write(t.path().join(".git/index"), &whole[..whole.len() / 2]).expect("cut");
        assert!(!read(&t.path().join(".git"), len).complete);
    }

    // An index that is a link to another file rewritten in place is stamped where the
    // link leads: the link's own stamp does not change, and would give the old answer.
    #[test]
    fn an_index_behind_a_link_is_stamped_where_it_leads() {
        let (t, len) = repo_with_gitlink(&[], &[]);
        let g = t.path().join(".git");
        let real = t.path().join("real-index");
        std::fs::rename(g.join("index"), &real).expect("move");
        std::os::unix::fs::symlink(&real, g.join("index")).expect("link");
        assert_eq!(read(&g, len).paths, vec![b"deep/path/sub".to_vec()]);
        let info = format!("160000,{},other", "2".repeat(40));
        git(t.path(), &["update-index", "--add", "--cacheinfo", &info]);
        assert!(
            std::fs::symlink_metadata(g.join("index"))
                .expect("index")
                .is_symlink()
                || real.exists()
        );
        let bytes = std::fs::read(g.join("index")).expect("read through");
        std::fs::write(&real, bytes).expect("rewrite in place");
        assert_eq!(
            read(&g, len).paths,
            vec![b"deep/path/sub".to_vec(), b"other".to_vec()]
        );
    }

    #[test]
    fn an_index_that_is_a_fifo_is_not_waited_on() {
        let t = tempfile::tempdir().expect("tmp");
        let index =
            std::ffi::CString::new(t.path().join("index").into_os_string().into_encoded_bytes())
                .expect("path");
        // SAFETY: mkfifo(3) with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(index.as_ptr(), 0o600) }, 0);
        assert_eq!(read(t.path(), 20).paths, Vec::<Vec<u8>>::new());
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
