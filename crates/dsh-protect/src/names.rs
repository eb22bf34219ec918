//! The names under a writable root, a git dir and a home that host tools trust: what
//! [`crate::protected`] protects and the walk and the check look for.

/// Names under each writable root that are protected whether they exist or not (a missing
/// one is held by a placeholder, so it cannot be created), and why: see docs/sandbox.md's
/// table. A name listed in [`DIRECTORY_NAMES`](dsh_sandbox::DIRECTORY_NAMES) is a folder, protected whole.
pub const PROTECTED_NAMES: &[&str] = &[
    // git: hooks run, config names programs (fsmonitor, pager, sshCommand), commondir and
    // config.worktree redirect or extend the config.
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    // dsh's own workspace configuration (it may only narrow the sandbox, but a narrowing
    // a command chose could still stop every later command).
    ".dsh",
    // Editors: settings that name programs and tasks that run on opening the folder.
    ".vscode",
    ".idea",
    ".zed",
    ".helix",
    ".devcontainer",
    ".devcontainer.json",
    // Agents: their settings, hooks and MCP servers (programs they start by themselves).
    ".mcp.json",
    ".claude",
    ".cursor",
    ".codex",
    ".gemini",
    ".windsurf",
    ".amazonq",
    ".kiro",
    ".roo",
    ".continue",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
    // Toolchains and package managers: settings that name a program they run on any
    // invocation, an editor's included (build.rustc-wrapper, a toolchain path, yarnPath,
    // node-options).
    ".cargo",
    "rust-toolchain",
    "rust-toolchain.toml",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
];

/// Names protected only where they exist: a missing one runs nothing until a file that is
/// protected already points a tool at it (a git hook installed by the hook manager, a
/// shell's startup in a home directory, which is refused as a root), and every mount has a
/// cost. The hook managers' ([`HOOK_MANAGER_NAMES`], [`LEFTHOOK_NAMES`]) are protected
/// the same way, in every repository's worktree.
pub const PROTECTED_WHEN_PRESENT: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".envrc",
];

/// What a hook manager other than lefthook keeps in a worktree, protected where present in
/// every repository's worktree, nested ones included (with [`LEFTHOOK_NAMES`]).
pub const HOOK_MANAGER_NAMES: &[&str] = &[".husky", ".pre-commit-config.yaml", ".gitmodules"];

/// The names lefthook reads its configuration from (and merges a `-local` one into), in
/// each format it reads, at the root, hidden, or in `.config/`.
pub const LEFTHOOK_NAMES: &[&str] = &[
    "lefthook.yml",
    ".lefthook.yml",
    ".config/lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yaml",
    ".config/lefthook.yaml",
    "lefthook.toml",
    ".lefthook.toml",
    ".config/lefthook.toml",
    "lefthook.json",
    ".lefthook.json",
    ".config/lefthook.json",
    "lefthook.jsonc",
    ".lefthook.jsonc",
    ".config/lefthook.jsonc",
    "lefthook-local.yml",
    ".lefthook-local.yml",
    ".config/lefthook-local.yml",
    "lefthook-local.yaml",
    ".lefthook-local.yaml",
    ".config/lefthook-local.yaml",
    "lefthook-local.toml",
    ".lefthook-local.toml",
    ".config/lefthook-local.toml",
    "lefthook-local.json",
    ".lefthook-local.json",
    ".config/lefthook-local.json",
    "lefthook-local.jsonc",
    ".lefthook-local.jsonc",
    ".config/lefthook-local.jsonc",
    ".lefthook",
    ".lefthook-local",
];

/// Patterns (`*` in the last component) matched against the entries of each writable
/// root when a policy is made: matching entries are protected as files. A new entry that
/// matches cannot be stopped by a read-only mount (the name is not known in advance); the
/// check after each command reports it.
pub const PROTECTED_PATTERNS: &[&str] = &["*.code-workspace"];

/// The parts of every git dir that stay read-only: what git runs (`hooks`), what it reads
/// as configuration (`config`, `config.worktree`), what redirects both (`commondir`), and
/// the older places a remote is named (`remotes`, `branches`: a remote that is a
/// repository on this disk runs its own hooks on `git push`).
pub const GIT_DIR_PARTS: [&str; 6] = [
    "hooks",
    "config",
    "config.worktree",
    "commondir",
    "remotes",
    "branches",
];

/// Files under the home directory that run at login, on a schedule or on the user's own
/// commands, protected (where they lead too) in case a writable root holds them or their
/// targets (a dotfiles repository as a workspace).
pub const HOME_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".config/fish/config.fish",
    ".ssh/config",
    ".ssh/authorized_keys",
    ".gitconfig",
    ".config/git/config",
    ".config/autostart",
    ".config/systemd/user",
    ".config/dsh/config.toml",
    ".local/bin",
    ".vimrc",
    ".config/nvim",
    ".tmux.conf",
    ".ssh/rc",
    ".claude/settings.json",
];

/// The files of [`HOME_STARTUP`] under `.config/`, where `$XDG_CONFIG_HOME` moves them:
/// git's global config and dsh's own (which says which workspaces are trusted).
pub const XDG_CONFIG_STARTUP: &[&str] = &["git/config", "dsh/config.toml"];

/// Settings a tool reads from the directory it runs in (or an ancestor of it), not only
/// from a project's root, besides every name [`PROTECTED_NAMES`]
/// protects at a root as a whole entry (cargo and rustup in any subdirectory, npm and yarn
/// at each package, an editor's or an agent's per-folder settings): direnv's; Maven's
/// `.mvn` (`jvm.config` takes `-javaagent:`, on any `mvn`, `mvn -v` too, from any folder
/// beneath it); Gradle's `gradle.properties` (`org.gradle.jvmargs`) and its wrapper's
/// properties and jar; Mercurial's `hgrc` and `hgrc-not-shared` (in a `.hg`: hooks run on
/// `hg status`). An existing one is read-only; a new one is emptied by the check after
/// the call (see [`crate::walk::is_tool_setting`]). (Jujutsu's repository config is [`JJ_REPO_CONFIG`].)
pub const NESTED_TOOL_NAMES: &[&str] = &[
    ".envrc",
    ".mvn",
    "gradle.properties",
    "gradle-wrapper.properties",
    "gradle-wrapper.jar",
    "hgrc",
    "hgrc-not-shared",
];

/// Jujutsu's repository config (`.jj/repo/config.toml`: a pager, a diff tool, a signing
/// program): a tool setting wherever it is, known by its folder, not its name alone.
pub const JJ_REPO_CONFIG: &str = ".jj/repo/config.toml";
