//! Paths that stay read-only inside a writable root, and the git entries that stay
//! writable so `git add` and `git commit` still work.
//!
//! A command that may write a root could otherwise plant code that runs later, outside the
//! sandbox, without anyone asking: a git hook, a `core.fsmonitor` line in a git config, a
//! shell rc file, an editor task, a toolchain or package manager setting that names a
//! program, an agent's MCP configuration. Under workspace-write these stay read-only in
//! every writable root, and one that does not exist cannot be created (a runner that cannot
//! promise that reports [`Enforcement::Partial`](dsh_sandbox::Enforcement::Partial)).
//!
//! For each root, [`for_root`] protects:
//! - [`PROTECTED_NAMES`] under the root (a file as written, a folder whole), the existing
//!   ones of [`PROTECTED_WHEN_PRESENT`] and of [`HOOK_MANAGER_NAMES`] (all of
//!   [`LEFTHOOK_NAMES`] once one exists), and
//!   each existing root entry matching [`PROTECTED_PATTERNS`];
//! - for every git dir the root's repository and the repositories below it use (the
//!   root's `.git`, each nested `.git` directory or pointer file the walk ([`crate::walk`])
//!   finds, each bare repository, each submodule's under `.git/modules`, each linked
//!   worktree's under `.git/worktrees`, and the common dir a `commondir` names): its
//!   [`GIT_DIR_PARTS`];
//! - every `.git` pointer file itself (it names the git dir);
//! - every folder a `core.hooksPath` names and every file an `include.path` or
//!   `includeIf.*.path` pulls in, read from those git dirs' config files and from the
//!   user's global and the system config (see [`crate::gitconfig`]).
//!
//! Objects, refs, the index and logs stay writable. For a root whose own `.git` is a
//! pointer (a linked worktree, a submodule checkout), its git dir and the common dir's
//! `objects`, `refs` and `logs` become writable roots too, so commits work there.
//!
//! A `commondir` file redirects git to another directory's `config` and `hooks`, so one
//! that does not exist must not be created either. Its placeholder is not empty (git
//! refuses to run with an empty one) but holds [`COMMONDIR_PLACEHOLDER`](dsh_sandbox::COMMONDIR_PLACEHOLDER), `.`: the git
//! dir itself, what git assumes without the file.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_sandbox::deny_read::name_matches;
use dsh_sandbox::{SandboxPolicy, WorkspaceLayout};

use crate::gitconfig;
use crate::gitlinks;
use crate::names::{
    GIT_DIR_PARTS, HOME_STARTUP, HOOK_MANAGER_NAMES, LEFTHOOK_NAMES, PROTECTED_NAMES,
    PROTECTED_PATTERNS, PROTECTED_WHEN_PRESENT, XDG_CONFIG_STARTUP,
};
use crate::small_file;
use crate::walk::{self, Walk};

/// Directories one search for submodule git dirs under a `modules` folder reads at most
/// (a name with `/` nests them at any depth); past it, the layout is incomplete.
const MODULE_SEARCH: usize = 100_000;

/// The layout of the root at `root` (canonical), walking it now.
pub fn for_workspace(root: &Path) -> WorkspaceLayout {
    for_root(root, &walk::walk(root, |_| {}))
}

/// The layout of the root at `root` (canonical) from a walk of it: see the [module
/// docs](self).
pub fn for_root(root: &Path, walk: &Walk) -> WorkspaceLayout {
    let mut b = Builder {
        layout: WorkspaceLayout {
            protected: PROTECTED_NAMES.iter().map(|n| root.join(n)).collect(),
            writable: Vec::new(),
            git_dirs: Vec::new(),
            hooks_dirs: Vec::new(),
            complete: walk.complete,
        },
        global: Vec::new(),
        indexed: std::collections::HashSet::new(),
        pending: Vec::new(),
    };
    b.layout.protected.extend(pattern_matches(root));
    let exists = |n: &str| std::fs::symlink_metadata(root.join(n)).is_ok();
    b.layout.protected.extend(
        PROTECTED_WHEN_PRESENT
            .iter()
            .filter(|n| exists(n))
            .map(|n| root.join(n)),
    );
    b.layout.protected.extend(hook_managers(root));
    for config in global_configs() {
        let facts = gitconfig::read(&config);
        b.layout.complete &= facts.complete;
        b.layout.protected.push(config);
        b.layout.protected.extend(facts.includes.iter().cloned());
        b.global.extend(facts.hooks_paths);
    }
    // What runs at login or on the user's own git commands, wherever it really lives: a
    // dotfiles repository as a workspace holds the targets of these links. One missing in
    // this root (`--writable ~/.config`) is held by a placeholder, so it cannot be made.
    // `$XDG_CONFIG_HOME` moves some of them (dsh's own config among them).
    let bases = [
        dsh_sandbox::home_dir().map(|h| (h, HOME_STARTUP)),
        std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(|x| (PathBuf::from(x), XDG_CONFIG_STARTUP)),
    ];
    for (base, names) in bases.into_iter().flatten() {
        let base = dsh_core::path::canonical_path(&base);
        for name in names {
            let p = base.join(name);
            if std::fs::symlink_metadata(&p).is_ok() {
                // And every link on its way: one a command could replace in a chain
                // (`config.toml -> ws/current -> real.toml`) would change what it names.
                b.layout
                    .protected
                    .extend(dsh_core::path::links_on_the_way(&p));
                b.layout.protected.push(p);
            } else {
                // Missing: where it would be made, through any link on the way
                // (`~/.config/git -> dotfiles/git`).
                let made_at = through_links(&p);
                if made_at.starts_with(root) {
                    b.layout.protected.push(made_at);
                }
            }
        }
    }
    let dot_git = root.join(".git");
    if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        // The root's own pointer.
        b.layout
            .protected
            .retain(|p| !p.starts_with(&dot_git) || *p == dot_git);
        if let Some(git_dir) = pointer_target(&dot_git).filter(|g| points_back(g, &dot_git, root)) {
            // Its git dir (a linked worktree's, a submodule's) must be writable for
            // commits: only when it is one and names this checkout back, so a pointer file
            // cannot make any directory writable.
            b.layout.writable.push(git_dir.clone());
            if let Some(common) = common_dir(&git_dir).filter(|c| walk::is_git_dir(c)) {
                for name in ["objects", "refs", "logs"] {
                    let dir = common.join(name);
                    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                        b.layout.writable.push(dir);
                    }
                }
            }
        }
    }
    for entry in &walk.git_entries {
        b.entry(entry);
    }
    while let Some(entry) = b.pending.pop() {
        b.entry(&entry);
    }
    for dir in &walk.unlistable {
        // A directory this user owns but cannot list: read-only inside the sandbox, so
        // nothing can be made in it unseen.
        b.layout.protected.push(dir.clone());
    }
    for entry in &walk.tool_configs {
        b.layout.protected.push(entry.clone());
    }
    // What a protected config points a tool at is protected too (present or not): a
    // read-only `.yarnrc.yml` naming a writable `yarnPath` would run the command's program.
    let configs: Vec<PathBuf> = b
        .layout
        .protected
        .iter()
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                n == ".yarnrc.yml"
                    || n == ".yarnrc"
                    || n == ".envrc"
                    || n == "hgrc"
                    || n == "hgrc-not-shared"
            })
        })
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .cloned()
        .collect();
    for c in configs {
        b.layout.protected.extend(
            config_targets(&c)
                .into_iter()
                .filter(|t| t.starts_with(root) && t != root),
        );
    }
    // A protected path behind a link is protected where it leads, too.
    let targets: Vec<PathBuf> = b
        .layout
        .protected
        .iter()
        .filter_map(|p| {
            let real = dsh_core::path::canonical_path(p);
            (real != *p && std::fs::symlink_metadata(&real).is_ok()).then_some(real)
        })
        .collect();
    b.layout.protected.extend(targets);
    let mut seen = std::collections::HashSet::new();
    b.layout.protected.retain(|p| seen.insert(p.clone()));
    b.layout.git_dirs.sort();
    b.layout.git_dirs.dedup();
    b.layout
}

struct Builder {
    layout: WorkspaceLayout,
    /// The (git dir, worktree) pairs whose index was read.
    indexed: std::collections::HashSet<(PathBuf, PathBuf)>,
    /// `.git` entries of submodules the indexes name, still to look at: a worklist, so a
    /// chain of nested submodules costs no stack.
    pending: Vec<PathBuf>,
    /// The hooks paths the user's global and the system config name (they apply to every
    /// repository; a relative one, in each repository's worktree).
    global: Vec<PathBuf>,
}

impl Builder {
    /// One entry of the walk: a `.git` directory, pointer file or symlink, or a bare
    /// repository directory.
    fn entry(&mut self, entry: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(entry) else {
            return;
        };
        let top = entry.parent().unwrap_or(entry).to_path_buf();
        if entry.file_name().is_some_and(|n| n != ".git") {
            // A bare repository: hooks run (and relative hook paths resolve) in it.
            self.git_dir(entry, Some(entry));
        } else if meta.is_dir() {
            // A `.git` without git's shape is not a repository (git passes it by; an empty
            // one is what a placeholder for a missing `.git/hooks` looks like): nothing to
            // protect in it yet. The root's own is protected by name all the same.
            if !walk::is_git_dir(entry) {
                return;
            }
            self.git_dir(entry, Some(&top));
        } else if meta.is_file() {
            self.layout.protected.push(entry.to_path_buf());
            if let Some(git_dir) = pointer_target(entry) {
                self.git_dir(&git_dir, Some(&top));
            }
        } else if meta.file_type().is_symlink() {
            // The link itself cannot be held by a mount (see `symlinked_protected_path`);
            // where it leads is protected.
            self.layout.protected.push(entry.to_path_buf());
            let target = dsh_core::path::canonical_path(entry);
            if target.is_dir() {
                self.git_dir(&target, Some(&top));
            }
        }
    }

    /// Protects the git dir `g` (whose hooks run in `top`), the git dirs it holds for
    /// submodules and linked worktrees, its common dir, and what their configs name.
    fn git_dir(&mut self, g: &Path, top: Option<&Path>) {
        let common = common_dir(g).filter(|c| c != g);
        let opened = Opened::of(g, common.as_deref());
        let top = top
            .map(Path::to_path_buf)
            .or_else(|| opened.worktree.clone());
        // Per worktree: a `.git` pointer makes any directory another worktree of a git dir,
        // and git honours a `core.worktree` when it comes through one; the index is read
        // against each.
        for worktree in top.iter().chain(opened.worktree.iter()) {
            self.gitlinks(g, worktree, opened.hash_len);
        }
        if self.layout.git_dirs.iter().any(|d| d == g) {
            return;
        }
        self.layout.git_dirs.push(g.to_path_buf());
        for part in GIT_DIR_PARTS {
            self.layout.protected.push(g.join(part));
        }
        let mut configs = vec![g.join("config"), g.join("config.worktree")];
        if let Some(common) = common {
            if !self.layout.git_dirs.contains(&common) {
                self.layout.git_dirs.push(common.clone());
                for part in GIT_DIR_PARTS {
                    self.layout.protected.push(common.join(part));
                }
            }
            configs.push(common.join("config"));
        }
        if let Some(top) = &top {
            // The hook managers of this repository's worktree run on its commits as the
            // root's do.
            self.layout.protected.extend(hook_managers(top));
        }
        let mut hooks_paths = self.global.clone();
        let mut remotes = Vec::new();
        for config in configs {
            let facts = gitconfig::read(&config);
            self.layout.complete &= facts.complete;
            self.layout.protected.extend(facts.includes);
            hooks_paths.extend(facts.hooks_paths);
            remotes.extend(facts.local_remotes);
        }
        remotes.extend(legacy_remotes(g));
        // A remote that is a repository on this disk runs its own hooks (`pre-receive`,
        // `post-receive`) on the user's `git push`: it is protected as a git dir, wherever
        // the URL is read from (the worktree or the git dir).
        for url in remotes {
            let mut bases = vec![g.to_path_buf()];
            bases.extend(top.clone());
            for base in bases {
                let at = dsh_core::path::fold_dots(&base.join(&url));
                // Hooks run (and a relative `core.hooksPath` resolves) in the worktree, or in
                // a bare repository itself.
                for (candidate, top) in [(at.join(".git"), at.clone()), (at.clone(), at)] {
                    if walk::is_git_dir(&candidate) && !self.layout.git_dirs.contains(&candidate) {
                        self.git_dir(&candidate, Some(&top));
                    }
                }
            }
        }
        if let Some(top) = &top {
            // A hook that runs a hook manager runs whatever that manager's config in the
            // worktree says, a missing config included (pre-commit's
            // `--allow-missing-config`): the config is protected, present or not.
            let mut dirs = vec![g.join("hooks")];
            dirs.extend(hooks_paths.iter().map(|h| top.join(h)));
            self.layout
                .protected
                .extend(configs_of_hooked_managers(&dirs, top));
        }
        {
            for hooks in hooks_paths {
                let path = match (&top, hooks.is_absolute()) {
                    (_, true) => hooks,
                    (Some(top), false) => top.join(hooks),
                    // A relative hooks path of a git dir whose worktree is unknown.
                    (None, false) => continue,
                };
                let path = dsh_core::path::fold_dots(&path);
                self.layout.git_dirs.push(path.clone());
                self.layout.hooks_dirs.push(path.clone());
                self.layout.protected.push(path);
            }
        }
        for wt in subdirs(&g.join("worktrees")) {
            let wt_top = small_file::git_path(&wt.join("gitdir"), "")
                .and_then(|t| t.parent().map(Path::to_path_buf));
            self.git_dir(&wt, wt_top.as_deref());
        }
        let (modules, whole) = module_dirs(g);
        self.layout.complete &= whole;
        for module in modules {
            self.git_dir(&module, None);
        }
    }
}

impl Builder {
    /// Every submodule the index of `g` names in the worktree `top`: the host's `git
    /// status` enters each one that is populated, also one beneath a `node_modules`
    /// package, which the walk does not enter. Their `.git` entries are looked at after
    /// the rest (see [`Builder::pending`]).
    fn gitlinks(&mut self, g: &Path, top: &Path, hash_len: usize) {
        if !self.indexed.insert((g.to_path_buf(), top.to_path_buf())) {
            return;
        }
        let links = gitlinks::read(g, hash_len);
        self.layout.complete &= links.complete;
        for path in links.paths {
            if let Some(dot_git) = checkout_dot_git(top, &path) {
                self.pending.push(dot_git);
            }
        }
    }
}

/// What the hook managers (husky, pre-commit, lefthook) keep in the worktree `top`: the
/// existing ones of [`HOOK_MANAGER_NAMES`], and all of [`LEFTHOOK_NAMES`] once one exists
/// (lefthook merges a `lefthook-local.yml` into the project's config).
fn hook_managers(top: &Path) -> Vec<PathBuf> {
    let exists = |n: &str| std::fs::symlink_metadata(top.join(n)).is_ok();
    let mut out: Vec<PathBuf> = HOOK_MANAGER_NAMES
        .iter()
        .filter(|n| exists(n))
        .map(|n| top.join(n))
        .collect();
    if LEFTHOOK_NAMES.iter().any(|n| exists(n)) {
        out.extend(LEFTHOOK_NAMES.iter().map(|n| top.join(n)));
    }
    out
}

/// The local repositories the older remote files of the git dir `g` name (`remotes/NAME`:
/// `URL:` and `Push:` lines; `branches/NAME`: its first line, before any `#`).
fn legacy_remotes(g: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (dir, branches) in [("remotes", false), ("branches", true)] {
        let Ok(entries) = std::fs::read_dir(g.join(dir)) else {
            continue;
        };
        for e in entries.flatten().take(64) {
            let Some(text) = small_file::read(&e.path(), 64 << 10) else {
                continue;
            };
            for line in text.lines() {
                let url = if branches {
                    Some(line.split('#').next().unwrap_or(""))
                } else {
                    line.strip_prefix("URL:")
                        .or_else(|| line.strip_prefix("Push:"))
                };
                if let Some(u) = url.map(str::trim).filter(|u| gitconfig::is_local_url(u)) {
                    out.push(gitconfig::local_path(u));
                }
                if branches {
                    break;
                }
            }
        }
    }
    out
}

/// The configs, in the worktree `top`, of the hook managers whose hooks are installed in
/// one of `hooks_dirs`: `.pre-commit-config.yaml` when a hook runs pre-commit, every name
/// of [`LEFTHOOK_NAMES`] when one runs lefthook. A hook is a file of at most 64 KiB (the
/// first 64 of a folder are read); `*.sample` files run nothing.
fn configs_of_hooked_managers(hooks_dirs: &[PathBuf], top: &Path) -> Vec<PathBuf> {
    let (mut pre_commit, mut lefthook) = (false, false);
    let mut out = Vec::new();
    for dir in hooks_dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten().take(64) {
            if e.file_name().to_string_lossy().ends_with(".sample") {
                continue;
            }
            // A hook that is a link runs where it leads (`ln -s ../../scripts/pre-commit`):
            // that file is what git runs.
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                out.push(dsh_core::path::canonical_path(&e.path()));
            }
            let Some(text) = small_file::read_bytes(&e.path(), 64 << 10) else {
                continue;
            };
            pre_commit |= contains(&text, b"pre-commit") || contains(&text, b"pre_commit");
            lefthook |= contains(&text, b"lefthook");
            // pre-commit's hook names its config: `--config=ci/pre-commit.yaml`.
            for w in String::from_utf8_lossy(&text)
                .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            {
                if let Some(v) = w.strip_prefix("--config=") {
                    let v = v.trim_matches(|c| c == '"' || c == '\'');
                    if !v.is_empty() && !v.contains('$') {
                        out.push(dsh_core::path::fold_dots(&top.join(v)));
                    }
                }
            }
        }
    }
    if pre_commit {
        out.push(top.join(".pre-commit-config.yaml"));
    }
    if lefthook {
        out.extend(LEFTHOOK_NAMES.iter().map(|n| top.join(n)));
    }
    out
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What the tool config `config` (an existing `.yarnrc.yml`, `.yarnrc`, `.envrc` or
/// Mercurial `hgrc`) makes its tool run or load on an ordinary invocation, as paths in the
/// config's folder: yarn's `yarnPath` and each plugin `path` (yarn runs them on any
/// command, `yarn --version` too); what an allowed `.envrc` loads or puts on PATH on
/// entering the folder, in any command of a line (`dotenv` (default `.env`),
/// `dotenv_if_exists`, `source_env(_if_exists)`, `source`, `.`, `PATH_add`, `path_add`,
/// `load_prefix` and its `bin`, a `layout`'s `.direnv`, a `PATH=` assignment's entries;
/// `$PWD` is the folder); hg's `%include` files. Absolute targets, and those leaving the
/// folder, are returned as they lead: the caller keeps the ones in a root. Not followed:
/// `layout node` and `use` (they put `node_modules/.bin` and tool folders on PATH), values
/// holding other variables.
pub fn config_targets(config: &Path) -> Vec<PathBuf> {
    let Some(dir) = config.parent() else {
        return Vec::new();
    };
    let Some(text) = small_file::read(config, gitconfig::MAX_CONFIG_BYTES) else {
        return Vec::new();
    };
    let unquote = |v: &str| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned();
    let mut out: Vec<String> = Vec::new();
    let name = config.file_name().map(|n| n.to_string_lossy().into_owned());
    match name.as_deref() {
        Some(".yarnrc.yml") => {
            for line in text.lines() {
                let l = line.trim_start().trim_start_matches("- ").trim_start();
                for key in ["yarnPath:", "path:"] {
                    if let Some(v) = l.strip_prefix(key) {
                        out.push(unquote(v));
                    }
                }
            }
        }
        Some(".yarnrc") => {
            for line in text.lines() {
                if let Some(v) = line.trim_start().strip_prefix("yarn-path") {
                    out.push(unquote(v));
                }
            }
        }
        Some(".envrc") => {
            let pwd = dir.to_string_lossy().into_owned();
            for line in text.lines() {
                let line = line.split('#').next().unwrap_or("");
                // Each command of the line (`test -f .env && dotenv`).
                for cmd in line.split([';', '&', '|']) {
                    let cmd = cmd.replace("${PWD}", &pwd).replace("$PWD", &pwd);
                    let words: Vec<&str> = cmd.split_whitespace().collect();
                    match words.as_slice() {
                        ["dotenv" | "dotenv_if_exists"] => out.push(".env".into()),
                        ["dotenv"
                        | "dotenv_if_exists"
                        | "source_env"
                        | "source_env_if_exists"
                        | "source"
                        | "."
                        | "PATH_add"
                        | "load_prefix", rest @ ..] => {
                            out.extend(rest.iter().map(|w| unquote(w)));
                            if words[0] == "load_prefix" {
                                out.extend(rest.iter().map(|w| format!("{}/bin", unquote(w))));
                            }
                        }
                        ["path_add", _var, rest @ ..] => {
                            out.extend(rest.iter().map(|w| unquote(w)))
                        }
                        // `layout python` keeps its virtualenv (on PATH) in `.direnv`.
                        ["layout", ..] => out.push(".direnv".into()),
                        ["export", assign, ..] | [assign, ..] if assign.starts_with("PATH=") => {
                            let value = unquote(&assign["PATH=".len()..]);
                            out.extend(
                                value
                                    .split(':')
                                    .filter(|e| !e.is_empty() && !e.starts_with('$'))
                                    .map(str::to_owned),
                            );
                        }
                        _ => {}
                    }
                }
            }
        }
        Some("hgrc" | "hgrc-not-shared") => {
            for line in text.lines() {
                if let Some(v) = line.trim_start().strip_prefix("%include") {
                    out.push(unquote(v));
                }
            }
        }
        _ => {}
    }
    out.into_iter()
        .filter(|v| !v.is_empty() && !v.contains('$'))
        .map(|v| dsh_core::path::fold_dots(&dir.join(v)))
        .collect()
}

/// The `.git` entry of the submodule checked out at `path` (relative, as an index spells
/// it) in `top`, when it exists and git would enter it: git takes a link on the way as a
/// removed submodule, so no component below `top` may be one.
fn checkout_dot_git(top: &Path, path: &[u8]) -> Option<PathBuf> {
    let rel = dsh_core::path::fold_dots(Path::new(OsStr::from_bytes(path)));
    if rel.is_absolute() || rel.starts_with("..") || rel.as_os_str().is_empty() {
        return None;
    }
    let mut at = top.to_path_buf();
    for part in rel.components() {
        at.push(part);
        if !std::fs::symlink_metadata(&at).ok()?.is_dir() {
            return None;
        }
    }
    let dot_git = at.join(".git");
    std::fs::symlink_metadata(&dot_git).ok().map(|_| dot_git)
}

/// What a confined command made, found by comparing the layout of its root after it ran
/// with the policy it ran under: new git dirs and hooks folders, new `.git` entries, new
/// entries matching [`PROTECTED_PATTERNS`] and new tool settings in any directory
/// ([`walk::is_tool_setting`]). Sorted.
pub fn new_since(before: &SandboxPolicy, after: &WorkspaceLayout) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = after
        .git_dirs
        .iter()
        .filter(|g| !before.git_dirs.contains(g))
        .cloned()
        .collect();
    out.extend(
        after
            .protected
            .iter()
            .filter(|p| !before.protected.contains(p))
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    n == ".git" || walk::is_tool_setting_in(p.parent().unwrap_or(p), n)
                })
            })
            .cloned(),
    );
    out.sort();
    out.dedup();
    out
}

/// Where the missing path `p` would be made: its deepest existing ancestor made canonical
/// (links followed), with the rest of `p` after it.
fn through_links(p: &Path) -> PathBuf {
    let mut p = p.to_path_buf();
    // A dangling link on the way leads on to where its target would be made (a few hops).
    for _ in 0..8 {
        let mut existing = p.as_path();
        let mut rest = Vec::new();
        while std::fs::symlink_metadata(existing).is_err() {
            let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                return p;
            };
            rest.push(name.to_os_string());
            existing = parent;
        }
        let next = match std::fs::canonicalize(existing) {
            Ok(real) => {
                let mut out = real;
                out.extend(rest.iter().rev());
                return out;
            }
            Err(_) => match std::fs::read_link(existing) {
                Ok(target) => {
                    let mut out = existing.parent().unwrap_or(existing).join(target);
                    out.extend(rest.iter().rev());
                    dsh_core::path::fold_dots(&out)
                }
                Err(_) => return p,
            },
        };
        p = next;
    }
    p
}

/// What git takes from a git dir's configs when it opens it.
struct Opened {
    /// The worktree its own `config`'s `core.worktree` names (relative to the git dir).
    worktree: Option<PathBuf>,
    /// The length of the hashes that name its objects: from the common dir's `config`
    /// alone, where `extensions.objectFormat` counts only with
    /// `core.repositoryFormatVersion` 1 or more. (A wrong answer reads the index as not as
    /// git writes it, which is a gap, not a miss.)
    hash_len: usize,
}

impl Opened {
    /// The facts of the git dir `g`, whose common dir is `common` (none: `g` itself).
    fn of(g: &Path, common: Option<&Path>) -> Opened {
        let read = |dir: &Path| {
            small_file::read(&dir.join("config"), gitconfig::MAX_CONFIG_BYTES)
                .map(|text| gitconfig::entries(&text))
                .unwrap_or_default()
        };
        let own = read(g);
        let shared = common.map(read);
        let format = shared.as_ref().unwrap_or(&own);
        let version = gitconfig::last(format, "core", "repositoryformatversion")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let sha256 = gitconfig::last(format, "extensions", "objectformat")
            .is_some_and(|v| v.eq_ignore_ascii_case("sha256"));
        Opened {
            worktree: gitconfig::last(&own, "core", "worktree")
                .map(|w| dsh_core::path::fold_dots(&g.join(w))),
            hash_len: if version >= 1 && sha256 { 32 } else { 20 },
        }
    }
}

/// The submodule git dirs under `g/modules`, nested ones too: directories that hold a
/// `HEAD` (a submodule's name may contain `/`, so its git dir can be deeper).
fn module_dirs(g: &Path) -> (Vec<PathBuf>, bool) {
    let mut out = Vec::new();
    let mut budget = MODULE_SEARCH;
    let mut level = subdirs(&g.join("modules"));
    while !level.is_empty() {
        let mut next = Vec::new();
        for dir in level {
            if budget == 0 {
                return (out, false);
            }
            budget -= 1;
            if walk::is_git_dir(&dir) || dir.join("HEAD").is_file() {
                out.push(dir);
            } else {
                next.extend(subdirs(&dir));
            }
        }
        level = next;
    }
    (out, true)
}

/// The common dir `g/commondir` names (canonical), if it names one.
fn common_dir(g: &Path) -> Option<PathBuf> {
    let rel = small_file::git_path(&g.join("commondir"), "")?;
    Some(dsh_core::path::resolved(&g.join(rel)))
}

/// The user's global and the system git config files, where git looks for them.
fn global_configs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("GIT_CONFIG_GLOBAL") {
        out.push(PathBuf::from(p));
    } else {
        if let Some(home) = dsh_sandbox::home_dir() {
            out.push(home.join(".gitconfig"));
        }
        match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(x) => out.push(PathBuf::from(x).join("git/config")),
            None => {
                if let Some(home) = dsh_sandbox::home_dir() {
                    out.push(home.join(".config/git/config"));
                }
            }
        }
    }
    match std::env::var_os("GIT_CONFIG_SYSTEM") {
        Some(p) => out.push(PathBuf::from(p)),
        None => {
            out.push(PathBuf::from("/etc/gitconfig"));
            out.push(PathBuf::from("/usr/local/etc/gitconfig"));
        }
    }
    out.retain(|p| p.is_file());
    out
}

/// The entries of `root` matching [`PROTECTED_PATTERNS`].
fn pattern_matches(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            PROTECTED_PATTERNS.iter().any(|p| name_matches(p, &name))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Whether the git dir `g` that the pointer file `pointer` (in `root`) names is one, and
/// names this checkout back: a linked worktree's `gitdir` file names `pointer`; a
/// submodule's `core.worktree` names `root`.
fn points_back(g: &Path, pointer: &Path, root: &Path) -> bool {
    let shaped = std::fs::symlink_metadata(g.join("HEAD")).is_ok_and(|m| m.is_file())
        && (walk::is_git_dir(g) || g.join("commondir").is_file());
    if !shaped {
        return false;
    }
    let by_gitdir = small_file::git_path(&g.join("gitdir"), "").is_some_and(|p| {
        dsh_core::path::canonical_path(&g.join(p)) == dsh_core::path::canonical_path(pointer)
    });
    by_gitdir
        || Opened::of(g, None)
            .worktree
            .is_some_and(|w| dsh_core::path::canonical_path(&w) == *root)
}

/// The real (not symlinked) directories directly in `dir`, sorted.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The directory a `.git` pointer file (`gitdir: PATH`) names (links followed, `..`
/// folded), read as git reads it.
pub(crate) fn pointer_target(file: &Path) -> Option<PathBuf> {
    let target = small_file::git_path(file, "gitdir: ")?;
    Some(dsh_core::path::resolved(&file.parent()?.join(target)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives `dir` git's shape of a git dir.
    fn git_shape(dir: &Path) {
        std::fs::create_dir_all(dir.join("objects")).expect("objects");
        std::fs::create_dir_all(dir.join("refs")).expect("refs");
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    }

    fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dsh_core::path::canonical_path(dir.path());
        (dir, root)
    }

    #[test]
    fn a_plain_directory_gets_the_default_names() {
        let (_d, root) = canonical_tempdir();
        let layout = for_workspace(&root);
        assert!(layout.protected.contains(&root.join(".git/hooks")));
        assert!(layout.protected.contains(&root.join(".mcp.json")));
        assert!(layout.protected.contains(&root.join(".cursor")));
        assert!(layout.writable.is_empty());
        assert!(layout.complete);
    }

    #[test]
    fn worktree_and_submodule_git_dirs_inside_dot_git_are_protected() {
        let (_d, root) = canonical_tempdir();
        let git = root.join(".git");
        git_shape(&git);
        std::fs::create_dir_all(git.join("worktrees/wt")).expect("must succeed");
        std::fs::create_dir_all(git.join("modules/lib/modules/inner")).expect("must succeed");
        std::fs::write(git.join("modules/lib/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(git.join("modules/lib/modules/inner/HEAD"), "x\n").expect("HEAD");
        let layout = for_workspace(&root);
        for p in [
            ".git/commondir",
            ".git/config.worktree",
            ".git/worktrees/wt/commondir",
            ".git/worktrees/wt/config.worktree",
            ".git/modules/lib/hooks",
            ".git/modules/lib/config",
            ".git/modules/lib/config.worktree",
            ".git/modules/lib/commondir",
            ".git/modules/lib/modules/inner/hooks",
        ] {
            assert!(layout.protected.contains(&root.join(p)), "{p}");
        }
    }

    #[test]
    fn a_linked_worktree_protects_its_pointer_and_the_common_dir() {
        let (_d, base) = canonical_tempdir();
        let common = base.join("main/.git");
        let wt_git = common.join("worktrees/wt");
        std::fs::create_dir_all(&wt_git).expect("must succeed");
        std::fs::create_dir_all(common.join("objects")).expect("must succeed");
        std::fs::create_dir_all(common.join("refs")).expect("must succeed");
        std::fs::write(wt_git.join("commondir"), "../..\n").expect("must succeed");
        std::fs::write(wt_git.join("HEAD"), "ref: refs/heads/wt\n").expect("HEAD");
        std::fs::write(common.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let root = base.join("wt");
        std::fs::create_dir_all(&root).expect("must succeed");
        std::fs::write(root.join(".git"), format!("gitdir: {}\n", wt_git.display()))
            .expect("must succeed");
        std::fs::write(
            wt_git.join("gitdir"),
            format!("{}\n", root.join(".git").display()),
        )
        .expect("gitdir");

        let layout = for_workspace(&root);
        assert!(layout.protected.contains(&root.join(".git")));
        assert!(!layout.protected.contains(&root.join(".git/hooks")));
        assert!(layout.protected.contains(&common.join("hooks")));
        assert!(layout.protected.contains(&common.join("config")));
        assert!(layout.protected.contains(&wt_git.join("config.worktree")));
        assert_eq!(
            layout.writable,
            vec![wt_git, common.join("objects"), common.join("refs")]
        );
    }

    // `gitdir: /any/dir` in a root's `.git` file must not make that directory a writable
    // root.
    #[test]
    fn a_pointer_to_a_directory_that_does_not_name_it_back_grants_nothing() {
        let (_d, base) = canonical_tempdir();
        let victim = base.join("victim");
        std::fs::create_dir_all(victim.join("objects")).expect("objects");
        std::fs::create_dir_all(victim.join("refs")).expect("refs");
        std::fs::write(victim.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let root = base.join("ws");
        std::fs::create_dir_all(&root).expect("ws");
        for target in [victim.clone(), base.join("plain")] {
            std::fs::create_dir_all(&target).expect("target");
            std::fs::write(root.join(".git"), format!("gitdir: {}\n", target.display()))
                .expect("pointer");
            let layout = for_workspace(&root);
            assert!(layout.writable.is_empty(), "{:?}", layout.writable);
            assert!(layout.protected.contains(&root.join(".git")));
        }
    }

    #[test]
    fn hooks_paths_includes_nested_repositories_and_bare_ones_are_protected() {
        let (_d, root) = canonical_tempdir();
        git_shape(&root.join(".git"));
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\thooksPath = .husky/_\n[include]\n\tpath = ../.gitconfig\n",
        )
        .expect("config");
        std::fs::write(
            root.join(".gitconfig"),
            "[core]\n\thooksPath = tools/hooks\n",
        )
        .expect("shared config");
        git_shape(&root.join("vendor/foo/.git"));
        std::fs::write(
            root.join("vendor/foo/.git/config.worktree"),
            "[core]\n\thooksPath = ../h\n",
        )
        .expect("nested config");
        for d in ["srv/r.git/objects", "srv/r.git/refs"] {
            std::fs::create_dir_all(root.join(d)).expect("bare");
        }
        std::fs::write(root.join("srv/r.git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(root.join("x.code-workspace"), "{}").expect("ws file");
        let layout = for_workspace(&root);
        for p in [
            ".husky/_",
            ".gitconfig",
            "tools/hooks",
            "vendor/foo/.git/hooks",
            "vendor/foo/.git/config",
            "vendor/h",
            "srv/r.git/hooks",
            "srv/r.git/config",
            "x.code-workspace",
        ] {
            assert!(layout.protected.contains(&root.join(p)), "{p}");
        }
        for g in [".git", "vendor/foo/.git", "srv/r.git", ".husky/_"] {
            assert!(layout.git_dirs.contains(&root.join(g)), "{g}");
        }
    }

    #[test]
    fn a_nested_pointer_file_is_protected_with_the_git_dir_it_names() {
        let (_d, root) = canonical_tempdir();
        std::fs::create_dir_all(root.join(".git/modules/sub")).expect("modules");
        std::fs::write(root.join(".git/modules/sub/HEAD"), "x\n").expect("HEAD");
        std::fs::create_dir_all(root.join("sub")).expect("sub");
        std::fs::write(root.join("sub/.git"), "gitdir: ../.git/modules/sub\n").expect("ptr");
        let layout = for_workspace(&root);
        assert!(layout.protected.contains(&root.join("sub/.git")));
        assert!(layout
            .protected
            .contains(&root.join(".git/modules/sub/config")));
        // A nested pointer's git dir is not made writable (only the root's own is).
        assert!(layout.writable.is_empty());
    }

    // A submodule's git dir with a hook, seven levels down in `.git/modules` (a name
    // with `/`), is found: the search for submodule git dirs goes to any depth.
    #[test]
    fn submodule_git_dirs_are_found_at_any_depth() {
        let (_d, root) = canonical_tempdir();
        git_shape(&root.join(".git"));
        let deep = root.join(".git/modules/a/b/c/d/e/f/g");
        git_shape(&deep);
        let layout = for_workspace(&root);
        assert!(layout.complete);
        assert!(layout.protected.contains(&deep.join("hooks")), "{layout:?}");
    }

    // `.husky/pre-commit` in a nested repository that uses husky is protected: hook
    // managers are protected in nested repositories, not at the root only.
    #[test]
    fn nested_repositories_hook_managers_are_protected() {
        let (_d, root) = canonical_tempdir();
        git_shape(&root.join("app/.git"));
        std::fs::create_dir_all(root.join("app/.husky")).expect("husky");
        std::fs::write(root.join("app/lefthook.yml"), "").expect("lefthook");
        let layout = for_workspace(&root);
        for p in ["app/.husky", "app/lefthook.yml", "app/lefthook-local.json"] {
            assert!(layout.protected.contains(&root.join(p)), "{p}");
        }
    }

    // With `~/.config/git` a link into the workspace and no `config` there, the missing
    // startup file is placed where the link leads, not at its unresolved path.
    #[test]
    fn a_missing_path_is_placed_where_links_on_the_way_lead() {
        let (_d, root) = canonical_tempdir();
        std::fs::create_dir_all(root.join("home/.config")).expect("config");
        std::fs::create_dir_all(root.join("ws/git")).expect("ws");
        std::os::unix::fs::symlink(root.join("ws/git"), root.join("home/.config/git"))
            .expect("link");
        assert_eq!(
            through_links(&root.join("home/.config/git/config")),
            root.join("ws/git/config")
        );
        // A dangling link leads on to where its target would be made.
        std::os::unix::fs::symlink(root.join("ws/later"), root.join("home/.config/fish"))
            .expect("link");
        assert_eq!(
            through_links(&root.join("home/.config/fish/config.fish")),
            root.join("ws/later/config.fish")
        );
    }
}
