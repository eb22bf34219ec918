//! Landlock rulesets, built in the parent and applied by the child.
//!
//! [`abi`] asks the kernel which Landlock ABI it speaks. [`Ruleset::build`] creates a
//! ruleset that handles every filesystem right of that ABI and grants read + execute
//! beneath `/`, read + write of `/dev/null` (the file, never `/dev`), and every handled
//! right beneath each writable root. Where the ABI has them it also:
//! - handles TCP bind and connect with no rule (ABI 4), when the network is denied;
//! - scopes abstract Unix sockets (when the network is denied) and signals to the
//!   sandbox's own domain (ABI 6), so a confined command cannot signal host processes.
//!
//! The child applies it with `landlock_restrict_self` after `no_new_privs` (see
//! [`ChildRestrictions`](crate::ChildRestrictions)).
//!
//! # What Landlock cannot do (reported as partial enforcement)
//! - Protect a path inside a writable root: rights are granted beneath a directory, and
//!   the right to create files there cannot exclude names.
//! - Below ABI 3, deny `truncate`; below ABI 5, deny `ioctl` on devices opened inside.
//!   (Renames and links across directories are denied outright below ABI 2.)

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

/// Filesystem access rights, by ABI.
mod access {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REMOVE_DIR: u64 = 1 << 4;
    pub const REMOVE_FILE: u64 = 1 << 5;
    pub const MAKE_CHAR: u64 = 1 << 6;
    pub const MAKE_DIR: u64 = 1 << 7;
    pub const MAKE_REG: u64 = 1 << 8;
    pub const MAKE_SOCK: u64 = 1 << 9;
    pub const MAKE_FIFO: u64 = 1 << 10;
    pub const MAKE_BLOCK: u64 = 1 << 11;
    pub const MAKE_SYM: u64 = 1 << 12;
    /// ABI 2.
    pub const REFER: u64 = 1 << 13;
    /// ABI 3.
    pub const TRUNCATE: u64 = 1 << 14;
    /// ABI 5.
    pub const IOCTL_DEV: u64 = 1 << 15;

    pub const ABI1: u64 = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    /// Rights that make sense on a file (not a directory).
    pub const FILE: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
    pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
}

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels accept it when the fields
/// they do not know are zero).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel, or why there is none (not built in,
/// not in the `lsm=` list, or not Linux).
pub fn abi() -> Result<u32, String> {
    // SAFETY: the documented version query: null attr, size 0, the VERSION flag.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel has no Landlock (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)".into(),
            Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled (add landlock to the lsm= boot parameter)".into(),
            _ => format!("Landlock is unusable: {e}"),
        });
    }
    u32::try_from(v).map_err(|_| "Landlock reported a negative ABI".into())
}

/// The filesystem rights ABI `abi` can handle.
fn handled_fs(abi: u32) -> u64 {
    let mut mask = access::ABI1;
    if abi >= 2 {
        mask |= access::REFER;
    }
    if abi >= 3 {
        mask |= access::TRUNCATE;
    }
    if abi >= 5 {
        mask |= access::IOCTL_DEV;
    }
    mask
}

/// What the policy asks of a ruleset.
#[derive(Clone, Debug, Default)]
pub struct RulesetSpec<'a> {
    /// Directories with every handled right beneath them.
    pub writable: Vec<&'a Path>,
    /// Whether TCP and abstract Unix sockets are scoped away (network denied).
    pub deny_network: bool,
    /// Existing paths (canonical) that must not be read: read grants go around them.
    pub deny_read: Vec<&'a Path>,
    /// Existing denied paths (canonical) no grant needs to go around (a closed home hides
    /// them), whose files must still not be granted under another name.
    pub deny_identities_only: Vec<&'a Path>,
    /// Existing directories (canonical) readable only beneath `open`: every home, `/dev`.
    pub closed: Vec<&'a Path>,
    /// Existing paths (canonical) inside `closed` that stay readable (unless denied).
    pub open: Vec<&'a Path>,
}

/// The devices under `/dev` a confined command may read (and `/dev/null` write): what
/// every program uses. No terminal but its own (already open), no disk, no console.
pub const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// A Landlock ruleset fd, ready for `landlock_restrict_self` in a child.
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
}

impl Ruleset {
    /// Builds the ruleset of the [module docs](self) for `abi`.
    ///
    /// # Errors
    /// The OS error of the first step that failed, with the path it concerned; a rule path
    /// that cannot be opened is an error (failing closed rather than silently narrowing).
    pub fn build(abi: u32, spec: &RulesetSpec<'_>) -> io::Result<Ruleset> {
        let handled = handled_fs(abi);
        let attr = RulesetAttr {
            handled_access_fs: handled,
            handled_access_net: if abi >= 4 && spec.deny_network {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 {
                SCOPE_SIGNAL
                    | if spec.deny_network {
                        SCOPE_ABSTRACT_UNIX_SOCKET
                    } else {
                        0
                    }
            } else {
                0
            },
        };
        // SAFETY: a valid attr of the size given; the kernel returns a new fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("landlock_create_ruleset: {e}"),
            ));
        }
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("bad ruleset fd"))?;
        // SAFETY: the kernel just returned this fd to us (it is O_CLOEXEC).
        let ruleset = Ruleset {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        if spec.deny_read.is_empty() && spec.closed.is_empty() {
            ruleset.allow(Path::new("/"), access::READ & handled)?;
        } else {
            ruleset.allow_around(spec, handled)?;
        }
        ruleset.allow(
            Path::new("/dev/null"),
            (access::READ_FILE | access::WRITE_FILE | access::TRUNCATE | access::IOCTL_DEV)
                & handled,
        )?;
        // The writable roots are canonical: a link on the way to one now was put there
        // since its policy was made (a command of the session moving the workspace and
        // linking its name elsewhere) and would carry the grant elsewhere. Opened without
        // following one, the grant lands where the policy says or the command does not
        // run.
        for dir in &spec.writable {
            let file = crate::nofollow::open_path_no_symlinks(dir)?;
            let st = crate::nofollow::fstat(file.as_raw_fd())?;
            ruleset.add_rule_fd(&file, &st, handled, dir)?;
        }
        Ok(ruleset)
    }

    /// Grants reading everywhere but beneath the denied paths and in the closed
    /// directories outside their open paths: listing directories beneath `/`, and reading
    /// and executing files beneath every readable entry of each directory on the way to a
    /// denied, closed or open path (symlinks are skipped: where they lead is governed by
    /// its own rules).
    fn allow_around(&self, spec: &RulesetSpec<'_>, handled: u64) -> io::Result<()> {
        self.allow(Path::new("/"), access::READ_DIR & handled)?;
        let owned = |v: &[&Path]| -> Vec<std::path::PathBuf> {
            v.iter().map(|p| p.to_path_buf()).collect()
        };
        let (denied, closed) = (owned(&spec.deny_read), owned(&spec.closed));
        // Only the open paths inside a closed directory change what is readable.
        let open: Vec<std::path::PathBuf> = owned(&spec.open)
            .into_iter()
            .filter(|o| closed.iter().any(|c| o.starts_with(c)))
            .collect();
        let points: Vec<std::path::PathBuf> =
            denied.iter().chain(&closed).chain(&open).cloned().collect();
        let split = crate::deny_read::split_dirs(&points);
        // The split directories by their parent, by name.
        let mut split_in: std::collections::HashMap<&Path, Vec<&std::ffi::OsStr>> =
            std::collections::HashMap::new();
        for d in &split {
            if let (Some(parent), Some(name)) = (d.parent(), d.file_name()) {
                split_in.entry(parent).or_default().push(name);
            }
        }
        // Whether an entry of a split directory may be read: denial wins, then the deepest
        // of an open path and a closed directory. Only the points that hold the entry
        // weigh: those holding its directory (`Above`, weighed once per directory) and the
        // entry itself (looked up by name).
        #[derive(Clone, Copy, Default)]
        struct Above {
            denied: bool,
            open: Option<usize>,
            closed: Option<usize>,
        }
        impl Above {
            fn readable(self) -> bool {
                !self.denied
                    && match (self.open, self.closed) {
                        (_, None) => true,
                        (Some(o), Some(c)) => o >= c,
                        (None, Some(_)) => false,
                    }
            }
        }
        let depth = |x: &Path| x.components().count();
        // The points each directory holds directly, by name.
        let mut at: std::collections::HashMap<&Path, Vec<(&std::ffi::OsStr, u8)>> =
            std::collections::HashMap::new();
        const DENIED: u8 = 1;
        const OPEN: u8 = 2;
        const CLOSED: u8 = 4;
        for (list, kind) in [(&denied, DENIED), (&open, OPEN), (&closed, CLOSED)] {
            for x in list.iter() {
                if let (Some(parent), Some(name)) = (x.parent(), x.file_name()) {
                    at.entry(parent).or_default().push((name, kind));
                }
            }
        }
        let above = |dir: &Path| {
            let mut a = Above::default();
            let holds = |x: &std::path::PathBuf| dir.starts_with(x);
            a.denied = denied.iter().any(holds);
            a.open = open.iter().filter(|x| holds(x)).map(|x| depth(x)).max();
            a.closed = closed.iter().filter(|x| holds(x)).map(|x| depth(x)).max();
            a
        };
        // Grants are by inode: another name for a denied file (a hard link in a directory
        // on the way) must not be granted, or the file is readable under its own name too.
        // The files beneath a denied folder count too: a link to `~/.ssh/id_x` in `/tmp`
        // would otherwise grant the key's inode, readable then under its own name.
        let mut denied_ids: Vec<(u64, u64)> = denied
            .iter()
            .filter_map(|d| std::fs::symlink_metadata(d).ok())
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
            .collect();
        let hidden = owned(&spec.deny_identities_only);
        denied_ids.extend(
            hidden
                .iter()
                .filter_map(|d| std::fs::symlink_metadata(d).ok())
                .map(|m| {
                    use std::os::unix::fs::MetadataExt;
                    (m.dev(), m.ino())
                }),
        );
        let every_denied: Vec<std::path::PathBuf> = denied.iter().chain(&hidden).cloned().collect();
        crate::deny_read::beneath_identities(&every_denied, &mut denied_ids);
        denied_ids.sort_unstable();
        denied_ids.dedup();
        for dir in &split {
            // The folder is opened once, with no link on the way (a split folder is
            // canonical: a link there now was swapped in since, and its target is not
            // granted), and its entries opened through that descriptor.
            let Ok(dir_fd) = crate::nofollow::open_dir(dir) else {
                continue;
            };
            let base = above(dir);
            let here = at.get(dir.as_path()).map(Vec::as_slice).unwrap_or_default();
            let split_here = split_in
                .get(dir.as_path())
                .map(Vec::as_slice)
                .unwrap_or_default();
            // The candidates, each with whether it is a folder when the listing says. In a
            // folder closed or denied from above only its own open points can be granted:
            // it is not listed (`/dev`, a home).
            let candidates: Vec<(std::ffi::OsString, Option<bool>)> = if base.readable() {
                let Ok(entries) =
                    std::fs::read_dir(format!("/proc/self/fd/{}", dir_fd.as_raw_fd()))
                else {
                    continue;
                };
                entries
                    .flatten()
                    .filter_map(|e| {
                        let kind = e.file_type().ok()?;
                        // A link is granted nowhere: where it leads has its own rules.
                        (!kind.is_symlink()).then(|| (e.file_name(), Some(kind.is_dir())))
                    })
                    .collect()
            } else {
                let mut names: Vec<(std::ffi::OsString, Option<bool>)> = Vec::new();
                for (name, kind) in here {
                    if *kind == OPEN && !names.iter().any(|(n, _)| n == name) {
                        names.push((name.to_os_string(), None));
                    }
                }
                names
            };
            let entry_depth = depth(dir) + 1;
            for (name, listed_dir) in candidates {
                let mut state = base;
                for (_, kind) in here.iter().filter(|(n, _)| *n == name.as_os_str()) {
                    match *kind {
                        DENIED => state.denied = true,
                        OPEN => state.open = Some(entry_depth),
                        _ => state.closed = Some(entry_depth),
                    }
                }
                if !state.readable() || split_here.contains(&name.as_os_str()) {
                    continue;
                }
                let path = dir.join(&name);
                let opened = crate::nofollow::cstring(&name)
                    .and_then(|c| crate::nofollow::open_at(&dir_fd, &c, libc::O_PATH));
                let file = match opened {
                    Ok(f) => f,
                    // Gone since it was listed, or not ours to open: nothing to grant.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                        ) =>
                    {
                        continue
                    }
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("cannot open rule path {}: {e}", path.display()),
                        ))
                    }
                };
                // A file's identity from the opened descriptor, not the listing: a file can
                // be a mount point (the listing shows the inode beneath), or be swapped for
                // another name of a denied file since it was listed. Folders cannot be
                // another name of a file.
                let st = match listed_dir {
                    Some(true) => None,
                    _ => Some(crate::nofollow::fstat(file.as_raw_fd())?),
                };
                let is_dir = match &st {
                    None => true,
                    Some(st) => {
                        let kind = st.st_mode & libc::S_IFMT;
                        if kind == libc::S_IFLNK {
                            continue;
                        }
                        #[allow(clippy::useless_conversion)]
                        // `dev_t`, `ino_t` are not u64 everywhere
                        let id = (u64::from(st.st_dev), u64::from(st.st_ino));
                        if kind != libc::S_IFDIR && denied_ids.binary_search(&id).is_ok() {
                            continue;
                        }
                        kind == libc::S_IFDIR
                    }
                };
                let rights = access::READ & handled;
                match self.add_rule_kind(&file, is_dir, rights, &path) {
                    // Replaced by a file since it was listed as a folder: as it is now,
                    // unless it is now another name of a denied file.
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                        let st = crate::nofollow::fstat(file.as_raw_fd())?;
                        #[allow(clippy::useless_conversion)] // as above
                        let id = (u64::from(st.st_dev), u64::from(st.st_ino));
                        if st.st_mode & libc::S_IFMT == libc::S_IFLNK
                            || denied_ids.binary_search(&id).is_ok()
                        {
                            continue;
                        }
                        self.add_rule_fd(&file, &st, rights, &path)?;
                    }
                    r => r?,
                }
            }
        }
        Ok(())
    }

    /// Adds a rule granting `rights` beneath `path` (masked to file rights for a file).
    fn allow(&self, path: &Path, rights: u64) -> io::Result<()> {
        self.add_rule(path, rights, false)
    }

    fn add_rule(&self, path: &Path, rights: u64, nofollow: bool) -> io::Result<()> {
        let file = open_path(path, nofollow)?;
        let st = crate::nofollow::fstat(file.as_raw_fd())?;
        self.add_rule_fd(&file, &st, rights, path)
    }

    /// Adds a rule granting `rights` beneath the open `file` (stat `st`), masked to file
    /// rights for a file.
    fn add_rule_fd(
        &self,
        file: &OwnedFd,
        st: &libc::stat,
        rights: u64,
        path: &Path,
    ) -> io::Result<()> {
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        self.add_rule_kind(file, is_dir, rights, path)
    }

    /// Adds a rule granting `rights` beneath the open `file`, a folder when `is_dir`
    /// (masked to file rights for anything else).
    fn add_rule_kind(
        &self,
        file: &OwnedFd,
        is_dir: bool,
        rights: u64,
        path: &Path,
    ) -> io::Result<()> {
        let attr = PathBeneathAttr {
            allowed_access: if is_dir {
                rights
            } else {
                rights & access::FILE
            },
            parent_fd: file.as_raw_fd(),
        };
        // SAFETY: valid ruleset fd, rule type and attr pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("landlock_add_rule {}: {e}", path.display()),
            ));
        }
        Ok(())
    }

    /// The ruleset fd, which the child passes to `landlock_restrict_self`.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// `open(path, O_PATH | O_CLOEXEC [| O_NOFOLLOW])`.
fn open_path(path: &Path, nofollow: bool) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: a valid C string; the result is a new fd or -1.
    let flags = libc::O_PATH | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 };
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open rule path {}: {e}", path.display()),
        ));
    }
    // SAFETY: just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What a Landlock ABI leaves unenforced for a policy, as the reason of a partial
/// enforcement; `None` when it enforces everything.
pub fn gaps(abi: u32) -> Option<String> {
    let mut missing = Vec::new();
    if abi < 3 {
        missing.push("deny truncate (needs ABI 3, Linux 6.2)");
    }
    if abi < 5 {
        missing.push("deny ioctl on devices (needs ABI 5, Linux 6.10)");
    }
    if abi < 6 {
        missing.push(
            "keep signals inside the sandbox (needs ABI 6, Linux 6.12): the command can \
             signal any process of its user",
        );
    }
    if missing.is_empty() {
        None
    } else {
        Some(format!(
            "Landlock ABI {abi} cannot {}",
            missing.join(", nor ")
        ))
    }
}
