//! Read denial: what no confined command may read, whatever its mode, so it never
//! reaches the model.
//!
//! Two rules, enforced together:
//! - **Homes are closed.** Every home directory on the machine ([`homes`]: `/home`,
//!   `/root` and the user's own wherever it is) is readable only through an allow-list:
//!   the workspace and writable roots, and the paths toolchains and common tools read that
//!   hold no secret ([`DEFAULT_READ_ALLOW`], and the configured `read_allow`). A secret
//!   dsh never heard of (`~/.aws/sso/cache/*`, a new tool's token file) is denied all the
//!   same: it is not on the list. See [`HomeRule`].
//! - **Denied paths** stay denied wherever they are, inside an allowed path too: the
//!   user's credential stores ([`DEFAULT_DENY_READ`]), the system's (`/etc/shadow`, host
//!   keys), dsh's own state directory ([`defaults`]), and the configured `deny_read`.
//!   The directory of dsh processes' spill files and sandbox temp directories is closed
//!   as a home is ([`closed_dirs`]): another session's output is not readable. A pattern holds absolute
//!   paths: `*` and `?` may appear in the last component (`~/.ssh/id_*`, say). Each
//!   confinement [expands](expand) them to the paths that exist now, canonical (a link's
//!   target is what is denied, so the link cannot reach it either).
//!
//! The runners enforce them:
//! - bubblewrap mounts an empty, read-only tmpfs over each home, binds each allowed path
//!   back read-only at its own name, and mounts an empty, unreadable file or directory over
//!   each denied path that stays visible;
//! - Landlock, which can only allow, grants reads around them: beneath every other entry
//!   of each directory on the way to a home, an allowed or a denied path, never beneath a
//!   denied path, nor beneath a home's entries that are not allowed (listing directories
//!   stays allowed everywhere). Under Landlock `/dev` is closed the same way: only the
//!   devices every program uses (`null`, `zero`, `full`, `random`, `urandom`, `tty`) are
//!   readable, so no other terminal (`/dev/pts/*`), disk or console is;
//! - Seatbelt denies `file-read*` on each denied path.
//!
//! The file tools refuse the same paths ([`Matcher`]).
//!
//! # Limits
//! A denied path created after the confinement was made is not denied to that command (a
//! new `~/.ssh/id_new`); a new entry in a home is, by construction. Under Landlock, an
//! entry created later directly in a directory on the way to a denied or allowed path
//! (`~/newfile`) is not readable by that command; the names in a home can be listed. A
//! hard link made before the command started is another name for the same data, and
//! stays readable through that name where that name is readable.

use std::path::{Path, PathBuf};

/// The credential stores denied by default (`~` is the home directory of the user dsh
/// runs as).
pub const DEFAULT_DENY_READ: &[&str] = &[
    // Keys of every kind, whatever they are named (ssh itself is of no use without them).
    "~/.ssh",
    "~/.gnupg",
    // Cloud, cluster and registry credentials.
    "~/.aws/credentials",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube/config",
    "~/.docker/config.json",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    // Forges, package registries and git.
    "~/.config/gh/hosts.yml",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.local/share/uv/credentials",
    // Databases.
    "~/.pgpass",
    "~/.my.cnf",
    // Agents' own sign-in tokens.
    "~/.claude/.credentials.json",
    "~/.codex/auth.json",
    "~/.config/gemini",
    // Password stores and keyrings.
    "~/.password-store",
    "~/.local/share/keyrings",
    // The system's: password hashes, host keys, private TLS keys, stored Wi-Fi and VPN
    // secrets (a command of a root dsh is uid 0, and owns them).
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssh/ssh_host_*_key",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wireguard",
];

/// Every directory readable only through an allow-list: the [`homes`], and the directory
/// of dsh's per-process private directories ([`private_parent`](dsh_core::spill::private_parent):
/// other sessions' spill files and sandbox temp directories), made if it is not there.
pub fn closed_dirs() -> Vec<PathBuf> {
    let mut out = homes();
    if let Ok(p) = dsh_core::spill::ensure_private_parent() {
        let p = dsh_core::path::canonical_path(&p);
        if !out.iter().any(|h| p.starts_with(h)) {
            out.push(p);
        }
    }
    out
}

/// This process's own private directories (its spill directory, its sandbox area), which
/// its file tools may read.
pub fn own_private_dirs() -> Vec<PathBuf> {
    let parent = dsh_core::path::canonical_path(&dsh_core::spill::private_parent());
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| is_own_private(&e.file_name()))
        .map(|e| e.path())
        .collect()
}

/// The paths beneath a home that stay readable by default: toolchains, package caches and
/// settings tools read on every run that hold no secret. Everything else in a home is
/// denied (see the [module docs](self)); a credential inside one of these (a registry
/// token in `~/.cargo/credentials.toml`) stays denied by [`DEFAULT_DENY_READ`].
pub const DEFAULT_READ_ALLOW: &[&str] = &[
    // Toolchains and what they installed.
    "~/.cargo/bin",
    "~/.cargo/registry",
    "~/.cargo/git",
    "~/.cargo/env",
    "~/.cargo/config.toml",
    "~/.cargo/config",
    "~/.cargo/.package-cache",
    "~/.rustup",
    "~/.pyenv",
    "~/.nvm",
    "~/.volta",
    "~/.bun",
    "~/.deno",
    "~/.local/bin",
    "~/.local/lib",
    "~/.local/share/uv",
    "~/.local/share/pnpm",
    "~/.local/share/mise",
    "~/.asdf",
    "~/.sdkman",
    "~/.ghcup",
    "~/.elan",
    "~/.juliaup",
    "~/.dotnet",
    "~/go",
    // Package caches: public packages, downloaded.
    "~/.npm/_cacache",
    "~/.npm/_npx",
    "~/.cache/pip",
    "~/.cache/uv",
    "~/.cache/pypoetry",
    "~/.cache/go-build",
    "~/.cache/yarn",
    "~/.cache/node-gyp",
    "~/.cache/ms-playwright",
    "~/.cache/pre-commit",
    "~/.cache/bazel",
    "~/.cache/deno",
    "~/.cache/sccache",
    "~/.m2/repository",
    "~/.gradle/caches",
    "~/.gradle/wrapper",
    "~/.ivy2/cache",
    "~/.yarn/berry/cache",
    // Settings read on every run, holding no secret.
    "~/.gitconfig",
    "~/.config/git/config",
    "~/.config/git/ignore",
    "~/.config/git/attributes",
    "~/.editorconfig",
    "~/.inputrc",
    "~/.terminfo",
];

/// [`DEFAULT_READ_ALLOW`] with `~` expanded to the user's home (`$HOME`) and to the home
/// the password database gives (where toolchains were installed when `HOME` differs), and
/// every absolute directory on `PATH` that is not a home itself: a program dsh can run, its
/// command can run too.
pub fn read_allow_defaults() -> Vec<PathBuf> {
    let mut out = expand_each_home(DEFAULT_READ_ALLOW);
    let bases = user_homes();
    let homes = homes();
    let mut seen: std::collections::HashSet<PathBuf> = out.iter().cloned().collect();
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            // A home itself on PATH opens nothing (nor does one reached through a link:
            // no allow-list entry opens a whole home, see `HomeRule::new`).
            let d = dsh_core::path::fold_dots(&d);
            if d.is_absolute()
                && !homes.contains(&d)
                && !bases.contains(&d)
                && seen.insert(d.clone())
            {
                out.push(d);
            }
        }
    }
    out
}

/// Every home directory on this machine, canonical, that exists: `/home`, `/root`, and
/// the user's own (`$HOME`, and the password database's) wherever they are; none inside
/// another. A home that is `/` or a system directory directly in it (`HOME=/tmp`) is left
/// out: closing it would close the system.
pub fn homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: &Path| {
        let real = dsh_core::path::canonical_path(p);
        if std::fs::symlink_metadata(&real).is_ok_and(|m| m.is_dir()) {
            out.push(real);
        }
    };
    add(Path::new("/home"));
    add(Path::new("/root"));
    for h in user_homes() {
        let real = dsh_core::path::canonical_path(&h);
        let system = real.components().count() <= 2
            && real
                .file_name()
                .is_none_or(|n| SYSTEM_DIRS.iter().any(|s| n == *s));
        if !system {
            add(&real);
        }
    }
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|h| !all.iter().any(|o| o != h && h.starts_with(o)));
    out
}

/// The directories directly in `/` that are the system's, never a home to close.
const SYSTEM_DIRS: [&str; 17] = [
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "media", "mnt", "opt", "proc",
    "run", "sbin", "sys", "tmp", "usr",
];

/// Each user's own home on this machine, canonical: every directory in `/home`, `/root`,
/// and the user's (`$HOME`, the password database's).
fn each_users_home() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/home") {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(dsh_core::path::canonical_path(&e.path()));
            }
        }
    }
    out.push(dsh_core::path::canonical_path(Path::new("/root")));
    out.push(dsh_core::path::canonical_path(Path::new("/home")));
    for h in user_homes() {
        out.push(dsh_core::path::canonical_path(&h));
    }
    out.sort();
    out.dedup();
    out
}

/// [`DEFAULT_DENY_READ`] with `~` expanded to each of the user's homes (`$HOME`, the
/// password database's), and dsh's state directory (session logs, the registry of
/// placeholders, unsettled records).
pub fn defaults() -> Vec<PathBuf> {
    let mut out = expand_each_home(DEFAULT_DENY_READ);
    out.extend(dsh_private_dirs());
    out
}

/// The user's own home folders that exist, canonical (`$HOME`, the password database's).
pub fn user_home_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for h in user_homes() {
        if let Ok(real) = std::fs::canonicalize(&h) {
            if real.is_dir() && !out.contains(&real) {
                out.push(real);
            }
        }
    }
    out
}

/// The user's homes: `$HOME`, and the password database's when it differs.
fn user_homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for h in [crate::home_dir(), crate::passwd_home()]
        .into_iter()
        .flatten()
    {
        if !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

/// `patterns` with a leading `~/` expanded to each of the [`user_homes`], without
/// duplicates.
fn expand_each_home(patterns: &[&str]) -> Vec<PathBuf> {
    let bases = user_homes();
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in patterns {
        let expanded: Vec<PathBuf> = match p.strip_prefix("~/") {
            Some(rest) => bases.iter().map(|b| b.join(rest)).collect(),
            None => vec![PathBuf::from(p)],
        };
        for e in expanded {
            if seen.insert(e.clone()) {
                out.push(e);
            }
        }
    }
    out
}

/// dsh's own places no confined command may read (see [`defaults`]): the state
/// directory. (A session store kept elsewhere with `--state` is denied to its own
/// session's commands by the World's configuration; in a home it is closed to every
/// session. The private directories of dsh processes are in a closed directory: see
/// [`closed_dirs`].)
pub fn dsh_private_dirs() -> Vec<PathBuf> {
    crate::state_dir::path().into_iter().collect()
}

/// The name prefixes of dsh's per-process private directories: spill files and sandbox
/// areas (`<prefix><pid>-<random>`).
const PRIVATE_PREFIXES: [&str; 2] = [dsh_core::spill::DIR_PREFIX, "dsh-sandbox-"];

/// Whether `name` is one of this process's own private directories (its spill directory,
/// its sandbox area).
pub fn is_own_private(name: &std::ffi::OsStr) -> bool {
    PRIVATE_PREFIXES
        .iter()
        .any(|p| dsh_core::spill::is_own_name(name, p))
}

/// `p` with a leading `~/` replaced by the home directory; `None` when it has one and
/// there is no home directory.
pub fn expand_home(p: &str) -> Option<PathBuf> {
    match p.strip_prefix("~/") {
        Some(rest) => crate::home_dir().map(|h| h.join(rest)),
        None => Some(PathBuf::from(p)),
    }
}

/// The paths `patterns` name that exist now, canonical, sorted, without duplicates. A
/// match that leads, through a symlink, to `/` or a directory directly in it (`/usr`,
/// `/tmp`: never what a pattern is written to deny) is left out: a command can make such
/// a link at a denied name, and an empty mount there would leave no usable sandbox.
pub fn expand(patterns: &[PathBuf]) -> Vec<PathBuf> {
    expand_matches(matches(patterns))
}

/// [`expand`], unless a match of `patterns` in one of `places` (where a command can
/// write) is a link, or lies behind one, leading out of every place or to a directory
/// holding one: then `Err((the match as written, where it leads))`. dsh does not hide that
/// target on the word of a link a command could have made (an empty mount over `/usr/lib`
/// would leave no usable sandbox). One look at the file system for both.
pub fn expand_unless_planted(
    patterns: &[PathBuf],
    places: &[PathBuf],
) -> Result<Vec<PathBuf>, (PathBuf, PathBuf)> {
    let found = matches(patterns);
    if let Some(planted) = planted_in(&found, places) {
        return Err(planted);
    }
    Ok(expand_matches(found))
}

fn expand_matches(found: Vec<(PathBuf, PathBuf)>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (written, real) in found {
        let through_link = real != dsh_core::path::fold_dots(&written);
        if through_link && real.components().count() <= 2 {
            continue;
        }
        if refused_by_the_kernel(&real) {
            continue;
        }
        out.push(real);
    }
    out.sort();
    out.dedup();
    out
}

/// Whether this process could never read `path`, nor make it readable: another user's
/// file it may not read (`/etc/shadow` to a user), or folder it may neither list nor
/// enter. Denying it too would only cost each confinement (under Landlock, the grants around it). One of this
/// user's own is never taken for that: a command could change its mode.
fn refused_by_the_kernel(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    // SAFETY: geteuid(2) has no preconditions.
    if meta.uid() == unsafe { libc::geteuid() } {
        return false;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access(2) with a valid C string.
    let refused = |need| unsafe { libc::access(c.as_ptr(), need) != 0 };
    // A folder that can be listed shows its names, one that can be entered its files.
    refused(libc::R_OK) && (!meta.is_dir() || refused(libc::X_OK))
}

/// The planted link among `found` (see [`expand_unless_planted`]).
fn planted_in(found: &[(PathBuf, PathBuf)], places: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    found.iter().find_map(|(written, real)| {
        let (written, real) = (dsh_core::path::fold_dots(written), real.clone());
        let in_place = |p: &Path| places.iter().any(|w| p.starts_with(w));
        let holds_place = places.iter().any(|w| w.starts_with(&real));
        (written != real && in_place(&written) && (!in_place(&real) || holds_place))
            .then_some((written, real))
    })
}

/// The paths `patterns` name that exist now, `(as written, canonical)`.
fn matches(patterns: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    // Each folder is looked at once: a missing one rules out every pattern in it, and an
    // existing one is resolved once for all its entries (a pattern that is not a link is
    // its folder's real path plus its name). One confinement takes a hundred patterns.
    let mut resolver = Resolver::default();
    let mut real_dir = |dir: &Path| resolver.real(dir);
    let mut out = Vec::new();
    let real_of = |p: &Path, dir_real: &Path, meta: &std::fs::Metadata| -> PathBuf {
        match p.file_name() {
            Some(name) if !meta.file_type().is_symlink() && name != ".." && name != "." => {
                dir_real.join(name)
            }
            _ => dsh_core::path::canonical_path(p),
        }
    };
    // A folder named by many patterns is listed once rather than each name looked up;
    // only the names wanted are kept from the listing. Listing costs about as much as
    // thirty lookups in a folder of a hundred entries (`/etc`), so a few names are looked
    // up one by one.
    const LIST_AT: usize = 32;
    let mut named: std::collections::HashMap<&Path, std::collections::HashSet<&std::ffi::OsStr>> =
        std::collections::HashMap::new();
    for p in patterns {
        if let (Some(dir), Some(last)) = (p.parent(), p.file_name()) {
            if !last.to_string_lossy().contains(['*', '?']) {
                named.entry(dir).or_default().insert(last);
            }
        }
    }
    type Listing = Option<std::collections::HashMap<std::ffi::OsString, bool>>;
    let mut listings: std::collections::HashMap<PathBuf, Listing> =
        std::collections::HashMap::new();
    for p in patterns {
        let (Some(dir), Some(last)) = (p.parent(), p.file_name()) else {
            continue;
        };
        let Some(dir_real) = real_dir(dir) else {
            continue;
        };
        let name = last;
        let last = last.to_string_lossy();
        if !last.contains(['*', '?']) {
            let wanted = named.get(dir);
            if wanted.is_some_and(|w| w.len() >= LIST_AT) && name != ".." && name != "." {
                let listing = listings.entry(dir.to_path_buf()).or_insert_with(|| {
                    std::fs::read_dir(dir).ok().map(|entries| {
                        entries
                            .flatten()
                            .filter(|e| {
                                wanted.is_some_and(|w| w.contains(e.file_name().as_os_str()))
                            })
                            .map(|e| {
                                let link = e.file_type().is_ok_and(|t| t.is_symlink());
                                (e.file_name(), link)
                            })
                            .collect()
                    })
                });
                match listing.as_ref().and_then(|l| l.get(name)) {
                    Some(false) => out.push((p.clone(), dir_real.join(name))),
                    Some(true) => out.push((p.clone(), dsh_core::path::canonical_path(p))),
                    None => {}
                }
            } else if let Ok(meta) = std::fs::symlink_metadata(p) {
                let real = real_of(p, &dir_real, &meta);
                out.push((p.clone(), real));
            }
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            if name_matches(&last, &e.file_name().to_string_lossy()) {
                let path = e.path();
                let real = match e.file_type() {
                    Ok(t) if !t.is_symlink() => dir_real.join(e.file_name()),
                    _ => dsh_core::path::canonical_path(&path),
                };
                out.push((path, real));
            }
        }
    }
    out
}

/// Real paths of folders, each component looked at once however many paths share it: a
/// component that is no link is its folder's real path plus its name (one `lstat`); a
/// link is resolved whole.
#[derive(Default)]
struct Resolver {
    known: std::collections::HashMap<PathBuf, Option<PathBuf>>,
}

impl Resolver {
    /// Where the existing `path` (absolute) really is; `None` when it does not exist.
    fn real(&mut self, path: &Path) -> Option<PathBuf> {
        if let Some(r) = self.known.get(path) {
            return r.clone();
        }
        let r = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if name != ".." && name != "." => match self.real(parent) {
                None => None,
                Some(real_parent) => {
                    let at = real_parent.join(name);
                    match std::fs::symlink_metadata(&at) {
                        Err(_) => None,
                        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&at).ok(),
                        Ok(_) => Some(at),
                    }
                }
            },
            (None, _) => Some(path.to_path_buf()),
            _ => std::fs::canonicalize(path).ok(),
        };
        self.known.insert(path.to_path_buf(), r.clone());
        r
    }
}

/// The paths `patterns` name that exist now, as the check after a command sees them: each
/// where it really is (what the sandbox hides), and a match in one of `roots` (the
/// writable roots, where a command makes links) also as written.
pub fn expand_within(patterns: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = matches(patterns)
        .into_iter()
        .flat_map(|(written, real)| {
            let written = dsh_core::path::fold_dots(&written);
            // Where the sandbox hides it, and, in a root, the name it is denied under.
            let named = roots.iter().any(|r| written.starts_with(r));
            [Some(real), named.then_some(written)]
        })
        .flatten()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether `patterns` deny reading `path` (absolute): `path`, or where its links lead, is
/// a denied path or lies beneath one.
pub fn denies(patterns: &[PathBuf], path: &Path) -> bool {
    !patterns.is_empty() && Matcher::new(patterns).refusal(path).is_some()
}

/// The home rule of one confinement or file-tool check, as the disk is now: the homes
/// that exist, and beneath them the allowed paths that exist (see the [module
/// docs](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HomeRule {
    /// Each home, canonical.
    pub homes: Vec<PathBuf>,
    /// Each allowed path in a home, `(as written, canonical)`, shallowest first; none
    /// beneath another, none a denied path or beneath one.
    pub allowed: Vec<(PathBuf, PathBuf)>,
}

impl HomeRule {
    /// The rule closing `homes` (canonical) but for `allow` (patterns, as
    /// [`expand`] takes them) and `roots` (the workspace and writable roots, canonical),
    /// never opening a path of `denied` (expanded).
    pub fn new(
        homes: &[PathBuf],
        allow: &[PathBuf],
        roots: &[PathBuf],
        denied: &[PathBuf],
    ) -> HomeRule {
        if homes.is_empty() {
            return HomeRule::default();
        }
        let in_home = |p: &Path| homes.iter().any(|h| p.starts_with(h));
        let is_denied = |p: &Path| denied.iter().any(|d| p.starts_with(d));
        let users = each_users_home();
        // Whether `p` is, or holds, a user's whole home.
        let covers_home = |p: &Path| users.iter().any(|u| u.starts_with(p));
        let mut allowed: Vec<(PathBuf, PathBuf)> = Vec::new();
        // Names that lead elsewhere through a link, looked at once the rest is known.
        let mut linked: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (w, c) in matches(allow) {
            let w = dsh_core::path::fold_dots(&w);
            // An allow-list never opens a whole home; a dangling link opens nothing (and
            // bubblewrap could not bind it).
            if covers_home(&w) || covers_home(&c) || std::fs::metadata(&w).is_err() {
                continue;
            }
            if w == c {
                allowed.push((w, c));
            } else {
                linked.push((w, c));
            }
        }
        for r in roots {
            if !covers_home(r) {
                allowed.push((r.clone(), r.clone()));
                continue;
            }
            // A root that is or holds a home (a session started in `~`) opens the files
            // the user keeps there, not the dot-entries where tools keep their tokens:
            // those stay closed but for the allow-list. Links are left out (one could lead
            // into a closed entry).
            for home in users.iter().filter(|u| u.starts_with(r) && in_home(u)) {
                let Ok(entries) = std::fs::read_dir(home) else {
                    continue;
                };
                for e in entries.flatten() {
                    let name = e.file_name();
                    let dot = name.as_encoded_bytes().first() == Some(&b'.');
                    let link = e.file_type().is_ok_and(|t| t.is_symlink());
                    if !dot && !link && !covers_home(&e.path()) {
                        allowed.push((e.path(), e.path()));
                    }
                }
            }
        }
        // A link at an allowed name opens nothing by itself: its target must be open on its
        // own (outside the homes, or allowed), or any command that once could write there
        // could open a home through it (`~/.cache/pip -> ~/.aws`, `bin -> ~` on PATH).
        for (w, c) in linked {
            let open = !in_home(&c)
                || allowed
                    .iter()
                    .any(|(aw, ac)| c.starts_with(ac) || c.starts_with(aw));
            if open {
                allowed.push((w, c));
            }
        }
        allowed.retain(|(w, c)| (in_home(w) || in_home(c)) && !is_denied(w) && !is_denied(c));
        allowed.sort_by_key(|(w, _)| (w.components().count(), w.clone()));
        allowed.dedup();
        let mut kept: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (w, c) in allowed {
            let covered = kept
                .iter()
                .any(|(kw, kc)| w.starts_with(kw) && c.starts_with(kc));
            if !covered {
                kept.push((w, c));
            }
        }
        HomeRule {
            homes: homes.to_vec(),
            allowed: kept,
        }
    }

    /// Whether the rule hides `path` (canonical): it lies in a home and beneath no allowed
    /// path.
    pub fn hides(&self, path: &Path) -> bool {
        self.homes.iter().any(|h| path.starts_with(h))
            && !self
                .allowed
                .iter()
                .any(|(w, c)| path.starts_with(c) || path.starts_with(w))
    }

    /// Whether an allowed path lies beneath `dir` (canonical): a search of `dir` finds
    /// something it may read.
    pub fn opens_beneath(&self, dir: &Path) -> bool {
        self.allowed
            .iter()
            .any(|(w, c)| c.starts_with(dir) || w.starts_with(dir))
    }

    /// The home `path` (canonical) lies in, if the rule hides it.
    pub fn home_of(&self, path: &Path) -> Option<&Path> {
        if !self.hides(path) {
            return None;
        }
        self.homes
            .iter()
            .find(|h| path.starts_with(h))
            .map(PathBuf::as_path)
    }
}

/// The paths a command's error output (`text`) says it could not read that `policy` keeps
/// from it, and why: each absolute path a line reports missing or not permitted
/// (`cat: /root/.aws/x: No such file or directory`, `ls: cannot access '/root/x': …`)
/// that a closed home hides or a denial covers; at most `max`, in order. A command in a
/// closed home sees a missing file (bubblewrap) or a refusal (Landlock); this tells the
/// model, and through it the user, which key opens it.
pub fn refused_in_output(
    policy: &crate::SandboxPolicy,
    text: &str,
    max: usize,
) -> Vec<(PathBuf, Refusal)> {
    if !policy.mode.is_confined() || (policy.closed_dirs.is_empty() && policy.deny_read.is_empty())
    {
        return Vec::new();
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for line in text.lines().take(10_000) {
        let Some(at) = [": No such file or directory", ": Permission denied"]
            .iter()
            .find_map(|s| line.find(s))
        else {
            continue;
        };
        let head = line[..at].trim_end_matches(['\'', '"']);
        let start = head
            .find("'/")
            .or_else(|| head.find("\"/"))
            .map(|i| i + 1)
            .or_else(|| head.find(": /").map(|i| i + 2))
            .or_else(|| head.starts_with('/').then_some(0));
        if let Some(start) = start {
            let p = PathBuf::from(&head[start..]);
            if !candidates.contains(&p) {
                candidates.push(p);
            }
        }
    }
    if candidates.is_empty() {
        return Vec::new();
    }
    let fence = Matcher::new(&policy.deny_read).with_homes(
        &policy.closed_dirs,
        &policy.read_allow,
        &policy.readable_roots(),
    );
    candidates
        .into_iter()
        .filter_map(|p| fence.refusal(&p).map(|r| (p, r)))
        .take(max)
        .collect()
}

/// Where the user's own config file is, as a refusal names it for `read_allow`:
/// `$XDG_CONFIG_HOME/dsh/config.toml` when that is set (absolute), else
/// `~/.config/dsh/config.toml`.
pub fn user_config_hint() -> String {
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(x) => Path::new(&x).join("dsh/config.toml").display().to_string(),
        None => "~/.config/dsh/config.toml".into(),
    }
}

/// Why the file tools refuse to read a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A denied path (`deny_read`, a credential store, dsh's own state).
    Denied,
    /// A path in a home that the allow-list (`read_allow`) does not name.
    OutsideAllowList,
}

/// `patterns` made ready to test many paths without a lookup per path: each pattern as
/// written, with its directory's symlinks resolved, and each match where it really is (a
/// denied `~/.gnupg` that is a link to `dots/gnupg` denies `dots/gnupg` too).
#[derive(Clone, Debug, Default)]
pub struct Matcher {
    patterns: Vec<PathBuf>,
    /// The home rule, if the homes are closed.
    home: HomeRule,
    /// `(dev, ino)` of each denied path that exists, and of the files beneath a denied
    /// directory (at most [`IDENTITIES_MAX`]): another name for one (a hard link) is denied
    /// too.
    ids: Vec<(u64, u64)>,
}

impl Matcher {
    /// The matcher of `patterns` (resolving each pattern's directory once).
    pub fn new(patterns: &[PathBuf]) -> Matcher {
        let mut out = Vec::new();
        for p in patterns {
            out.push(p.clone());
            if let (Some(dir), Some(last)) = (p.parent(), p.file_name()) {
                let real = dsh_core::path::canonical_path(dir).join(last);
                if !out.contains(&real) {
                    out.push(real);
                }
            }
        }
        let real = expand(patterns);
        for r in &real {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        let mut ids: Vec<(u64, u64)> = real
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
            .collect();
        // A hard link elsewhere to a file inside a denied directory (`~/.ssh/id_ed25519`) is
        // denied too: identities are kept.
        beneath_identities(&real, &mut ids);
        ids.sort_unstable();
        ids.dedup();
        Matcher {
            patterns: out,
            home: HomeRule::default(),
            ids,
        }
    }

    /// The same matcher closing `homes` but for `allow` and `roots` (see
    /// [`HomeRule::new`]).
    pub fn with_homes(
        mut self,
        homes: &[PathBuf],
        allow: &[PathBuf],
        roots: &[PathBuf],
    ) -> Matcher {
        let denied = expand(&self.patterns);
        self.home = HomeRule::new(homes, allow, roots, &denied);
        self
    }

    /// Why reading `path` (absolute; its links followed) is refused, if it is: by
    /// identity, as written, where its links lead, or by the home rule.
    pub fn refusal(&self, path: &Path) -> Option<Refusal> {
        let by_identity = std::fs::metadata(path).is_ok_and(|st| {
            use std::os::unix::fs::MetadataExt;
            self.denies_identity(st.dev(), st.ino())
        });
        let real = dsh_core::path::canonical_path(path);
        if by_identity || self.denies_as_written(path) || self.denies_as_written(&real) {
            return Some(Refusal::Denied);
        }
        self.home.hides(&real).then_some(Refusal::OutsideAllowList)
    }

    /// Why searching beneath `dir` (absolute) is refused, if it is: as
    /// [`refusal`](Self::refusal), but a closed directory beneath which something stays
    /// readable may be searched (its hidden entries are skipped).
    pub fn search_refusal(&self, dir: &Path) -> Option<Refusal> {
        match self.refusal(dir) {
            Some(Refusal::OutsideAllowList)
                if self
                    .home
                    .opens_beneath(&dsh_core::path::canonical_path(dir)) =>
            {
                None
            }
            r => r,
        }
    }

    /// Whether the file with this identity (`st_dev`, `st_ino` of an opened file) is a
    /// denied one, under any name.
    pub fn denies_identity(&self, dev: u64, ino: u64) -> bool {
        self.ids.contains(&(dev, ino))
    }

    /// Whether `path` (absolute) is denied as written, without following its links.
    pub fn denies_as_written(&self, path: &Path) -> bool {
        self.patterns.iter().any(|pat| matches_beneath(pat, path))
    }

    /// Whether `path`, known to be canonical (no symlink in it), is denied or hidden by
    /// the home rule.
    pub fn denies_canonical(&self, path: &Path) -> bool {
        self.denies_as_written(path) || self.home.hides(path)
    }
}

/// How many identities of files beneath denied directories a [`Matcher`] keeps: a denied
/// directory holds keys and tokens, a few dozen files; past this, the rest are denied by
/// name only.
pub const IDENTITIES_MAX: usize = 4096;

/// Adds to `ids` the identities of the regular files beneath each directory of `dirs`
/// (canonical), never following a link, at most [`IDENTITIES_MAX`] in all.
pub(crate) fn beneath_identities(dirs: &[PathBuf], ids: &mut Vec<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = 0usize;
    let mut todo: Vec<(PathBuf, usize)> = dirs
        .iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .map(|d| (d.clone(), 0))
        .collect();
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > IDENTITIES_MAX {
                return;
            }
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() && depth < 16 {
                todo.push((e.path(), depth + 1));
            } else if kind.is_file() {
                if let Ok(m) = e.metadata() {
                    ids.push((m.dev(), m.ino()));
                }
            }
        }
    }
}

/// Whether `path` is `pattern` (a `*`/`?` last component) or lies beneath a match.
fn matches_beneath(pattern: &Path, path: &Path) -> bool {
    let (Some(dir), Some(last)) = (pattern.parent(), pattern.file_name()) else {
        return false;
    };
    let Ok(rest) = path.strip_prefix(dir) else {
        return false;
    };
    let Some(first) = rest.components().next() else {
        return false;
    };
    name_matches(
        &last.to_string_lossy(),
        &first.as_os_str().to_string_lossy(),
    )
}

/// The directories on the way to the denied paths (strict ancestors, `/` included),
/// shallowest first: where Landlock's read grants must go around them.
pub(crate) fn split_dirs(denied: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = denied
        .iter()
        .flat_map(|d| d.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    out.sort_by_key(|p| (p.components().count(), p.clone()));
    out.dedup();
    out
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters and `?` one
/// character (no other syntax).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with one backtrack point.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_patterns_match_as_shell_globs_do() {
        assert!(name_matches("*.code-workspace", "a.code-workspace"));
        assert!(name_matches("*.code-workspace", ".code-workspace"));
        assert!(!name_matches("*.code-workspace", "a.code-workspace.bak"));
        assert!(name_matches("id_*", "id_ed25519"));
        assert!(!name_matches("id_*", "known_hosts"));
        assert!(name_matches("a?c*", "abcdef"));
        assert!(name_matches("*", ""));
    }

    #[test]
    fn patterns_expand_to_what_exists_and_links_to_their_targets() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir(r.join(".ssh")).expect("ssh");
        for f in ["id_ed25519", "id_ed25519.pub", "known_hosts"] {
            std::fs::write(r.join(".ssh").join(f), "x").expect("file");
        }
        std::os::unix::fs::symlink(r.join(".ssh/id_ed25519"), r.join("key")).expect("link");
        let got = expand(&[r.join(".ssh/id_*"), r.join("key"), r.join("missing")]);
        assert_eq!(
            got,
            vec![r.join(".ssh/id_ed25519"), r.join(".ssh/id_ed25519.pub")]
        );
    }

    #[test]
    fn denial_covers_the_path_what_is_beneath_it_and_links_to_it() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir_all(r.join("gcloud/sub")).expect("dirs");
        std::fs::write(r.join("gcloud/sub/creds.json"), "x").expect("file");
        std::os::unix::fs::symlink(r.join("gcloud"), r.join("alias")).expect("link");
        let pats = vec![r.join("gcloud"), r.join(".ssh/id_*")];
        assert!(denies(&pats, &r.join("gcloud")));
        assert!(denies(&pats, &r.join("gcloud/sub/creds.json")));
        assert!(denies(&pats, &r.join("alias/sub/creds.json")));
        assert!(denies(&pats, &r.join(".ssh/id_rsa")));
        assert!(!denies(&pats, &r.join(".ssh/known_hosts")));
        assert!(!denies(&pats, &r.join("gcloudx")));
        assert!(!denies(&[], &r.join("gcloud")));
    }

    #[test]
    fn split_dirs_are_every_strict_ancestor_shallowest_first() {
        let got = split_dirs(&[PathBuf::from("/h/u/.ssh/id"), PathBuf::from("/h/u/.netrc")]);
        assert_eq!(
            got,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/h"),
                PathBuf::from("/h/u"),
                PathBuf::from("/h/u/.ssh")
            ]
        );
    }
}
