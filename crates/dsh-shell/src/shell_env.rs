//! The registry of managed `DSH_*` facts that every shell command receives.
//!
//! [`ShellEnv`] holds the built-ins (`DSH_HOME`, `DSH_SHELL`, `DSH_SESSION_ID`) and the
//! [`EnvContributor`]s other parts of dsh register to add facts of their own (spec §6).
//! The `bash` tool calls [`ShellEnv::collect`] for each command and passes the map as the
//! request's `dsh_env`, which the executor applies last, over everything else.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::path::PathBuf;
//! use std::sync::Arc;
//! use dsh_shell::shell_env::{EnvContributor, EnvVariable, ExecContext, ShellEnv};
//!
//! struct Workspace;
//! impl EnvContributor for Workspace {
//!     fn name(&self) -> &str { "workspace" }
//!     fn variables(&self) -> Vec<EnvVariable> {
//!         vec![EnvVariable::new("DSH_WORKSPACE", "the workspace root")]
//!     }
//!     fn contribute(&self, _exec: &ExecContext) -> BTreeMap<String, String> {
//!         BTreeMap::from([("DSH_WORKSPACE".to_owned(), "/work".to_owned())])
//!     }
//! }
//!
//! let env = ShellEnv::new(Some(PathBuf::from("/home/me/.dsh")));
//! let registration = env.register(Arc::new(Workspace))?;
//! let vars = env.collect(&ExecContext::default())?;
//! assert_eq!(vars["DSH_WORKSPACE"], "/work");
//! assert_eq!(vars["DSH_SHELL"], "1");
//! registration.unregister();
//! assert!(!env.collect(&ExecContext::default())?.contains_key("DSH_WORKSPACE"));
//! # Ok::<(), dsh_core::HarnessError>(())
//! ```
//!
//! # Guarantees
//! - Each key has one owner: a built-in or exactly one contributor. A contributor can only
//!   ever set the keys it declared, and the declaration is checked when it registers.
//! - [`collect`](ShellEnv::collect) returns a fresh, sorted map; later registrations do
//!   not change a map already returned.
//! - No contributor code runs while the registry is locked, so a contributor may call back
//!   into the registry.
//!
//! # Limits
//! - Contributors run in byte order of their names, where the reference used
//!   `localeCompare`. Keys never overlap, so the order only decides which error is
//!   reported first.
//! - The reference's `session-persistence` contributor (`DSH_SESSION_JSONL`) is not here:
//!   it belongs with session persistence, which registers it.
//!
//! # Errors
//! `SHELL_ENV_INVALID`, with the reference's pinned messages, for a malformed contributor at
//! registration and for a contributor that returns an undeclared key at collect.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dsh_core::{ErrorCode, HarnessError, SessionId};

/// The built-in key holding dsh's home directory (absolute).
pub const DSH_HOME: &str = "DSH_HOME";

/// The built-in key that is always `1` inside a dsh shell.
pub const DSH_SHELL: &str = "DSH_SHELL";

/// The built-in key holding the session id, present only when the session is known.
pub const DSH_SESSION_ID: &str = "DSH_SESSION_ID";

/// The keys only the built-ins may set; no contributor can declare them.
pub const RESERVED_KEYS: [&str; 3] = [DSH_HOME, DSH_SESSION_ID, DSH_SHELL];

/// The prefix every managed key starts with.
pub const KEY_PREFIX: &str = "DSH_";

/// What a command is being run for; contributors take their values from it.
#[derive(Clone, Debug, Default)]
pub struct ExecContext {
    /// The session the command belongs to, when it runs for an agent. Default: none.
    pub session_id: Option<SessionId>,
}

/// One key a contributor declares, with what it means (shown by [`ShellEnv::list`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvVariable {
    /// The variable name: `DSH_` then an upper-case letter, then upper-case letters,
    /// digits and underscores.
    pub key: String,
    /// One line on what the value is; must not be blank.
    pub description: String,
}

impl EnvVariable {
    /// A declaration of `key` described by `description`.
    pub fn new(key: impl Into<String>, description: impl Into<String>) -> EnvVariable {
        EnvVariable {
            key: key.into(),
            description: description.into(),
        }
    }
}

/// A source of managed `DSH_*` facts.
///
/// # For implementors
/// All three methods are required. [`name`](Self::name) and
/// [`variables`](Self::variables) are read once, at registration; later changes to what
/// they return are ignored. [`contribute`](Self::contribute) runs for every command, so it must
/// be quick and must not block; it may leave out any declared key (the variable is then
/// unset) but must return no other key, or [`ShellEnv::collect`] fails.
pub trait EnvContributor: Send + Sync {
    /// A unique, non-blank name; it appears in error messages and in [`ShellEnv::list`].
    fn name(&self) -> &str;

    /// Every key this contributor may set, with its description.
    fn variables(&self) -> Vec<EnvVariable>;

    /// The values for one command: a subset of the declared keys.
    fn contribute(&self, exec: &ExecContext) -> BTreeMap<String, String>;
}

/// The `DSH_*` registry. See the [module docs](self).
pub struct ShellEnv {
    dsh_home: PathBuf,
    registry: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    /// Keyed by name, which gives the run order of [`ShellEnv::collect`].
    contributors: BTreeMap<String, Entry>,
}

#[derive(Clone)]
struct Entry {
    id: u64,
    contributor: Arc<dyn EnvContributor>,
    /// Key → description, as declared at registration.
    variables: BTreeMap<String, String>,
}

impl ShellEnv {
    /// A registry with no contributors.
    ///
    /// `DSH_HOME` is `dsh_home` when given, else the host's `$DSH_HOME`, else
    /// `$HOME/.dsh` (the user database's home when `HOME` is unset, the current
    /// directory's `.dsh` when there is none); empty values count as unset. A relative
    /// value is made absolute against the current directory and `.`/`..` are resolved
    /// lexically. The value is fixed here, not re-read per command.
    pub fn new(dsh_home: Option<PathBuf>) -> ShellEnv {
        // Deprecated on toolchains near our MSRV (1.80) for its old Windows behaviour; on
        // Unix it reads HOME, then the user database, as Node's os.homedir() does.
        #[allow(deprecated)]
        let home = std::env::home_dir();
        let cwd = std::env::current_dir().ok();
        ShellEnv {
            dsh_home: resolve_dsh_home(dsh_home, std::env::var_os(DSH_HOME), home, cwd.as_deref()),
            registry: Arc::default(),
        }
    }

    /// The value `DSH_HOME` gets.
    pub fn dsh_home(&self) -> &Path {
        &self.dsh_home
    }

    /// Registers `contributor` until the returned [`Registration`] is dropped.
    ///
    /// # Errors
    /// `SHELL_ENV_INVALID`, registering nothing, when the name is blank or taken, or when
    /// a declared key is malformed, reserved, declared twice, undescribed, or owned by
    /// another contributor.
    pub fn register(
        &self,
        contributor: Arc<dyn EnvContributor>,
    ) -> Result<Registration, HarnessError> {
        let name = contributor.name().to_owned();
        let declared = contributor.variables();
        let mut registry = self.lock();
        let variables = validate(&registry, &name, declared)?;
        let id = registry.next_id;
        registry.next_id += 1;
        registry.contributors.insert(
            name.clone(),
            Entry {
                id,
                contributor,
                variables,
            },
        );
        Ok(Registration {
            registry: Arc::downgrade(&self.registry),
            name,
            id,
        })
    }

    /// The managed variables for one command, sorted by key: the built-ins (with
    /// `DSH_SESSION_ID` only when `exec` names a session), then each contributor's values,
    /// contributors taken in name order.
    ///
    /// # Errors
    /// `SHELL_ENV_INVALID` when a contributor returns a key it did not declare
    /// (`bash env contributor "<n>" returned undeclared key "<k>"`), or a value holding a
    /// NUL byte, which no environment can carry; and when `DSH_HOME` is not valid UTF-8.
    pub fn collect(&self, exec: &ExecContext) -> Result<BTreeMap<String, String>, HarnessError> {
        let mut vars = BTreeMap::new();
        let home = self.dsh_home.to_str().ok_or_else(|| {
            shell_env_invalid(format!(
                "DSH_HOME {} is not valid UTF-8; set DSH_HOME to a UTF-8 path",
                self.dsh_home.display()
            ))
        })?;
        vars.insert(DSH_HOME.to_owned(), home.to_owned());
        vars.insert(DSH_SHELL.to_owned(), "1".to_owned());
        if let Some(session) = &exec.session_id {
            vars.insert(DSH_SESSION_ID.to_owned(), session.as_str().to_owned());
        }

        // Snapshot, then contribute unlocked: a contributor may call back into the registry.
        let entries: Vec<(String, Entry)> = self
            .lock()
            .contributors
            .iter()
            .map(|(name, entry)| (name.clone(), entry.clone()))
            .collect();
        for (name, entry) in entries {
            for (key, value) in entry.contributor.contribute(exec) {
                if !entry.variables.contains_key(&key) {
                    return Err(shell_env_invalid(format!(
                        "bash env contributor \"{name}\" returned undeclared key \"{key}\""
                    )));
                }
                if value.contains('\0') {
                    return Err(shell_env_invalid(format!(
                        "bash env contributor \"{name}\" returned a value with a NUL byte for \"{key}\""
                    )));
                }
                vars.insert(key, value);
            }
        }
        Ok(vars)
    }

    /// Every contributor declaration as `(contributor, key, description)`, sorted by key.
    /// The built-ins are not listed.
    pub fn list(&self) -> Vec<(String, String, String)> {
        let registry = self.lock();
        let mut rows: Vec<(String, String, String)> = registry
            .contributors
            .iter()
            .flat_map(|(name, entry)| {
                entry
                    .variables
                    .iter()
                    .map(move |(key, description)| (name.clone(), key.clone(), description.clone()))
            })
            .collect();
        rows.sort_by(|a, b| a.1.cmp(&b.1));
        rows
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }
}

impl fmt::Debug for ShellEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.lock().contributors.keys().cloned().collect();
        f.debug_struct("ShellEnv")
            .field("dsh_home", &self.dsh_home)
            .field("contributors", &names)
            .finish()
    }
}

/// Keeps a contributor registered; dropping it (or [`unregister`](Self::unregister))
/// removes the contributor. It does not keep the [`ShellEnv`] alive.
#[must_use = "dropping the registration unregisters the contributor at once"]
pub struct Registration {
    registry: Weak<Mutex<Registry>>,
    name: String,
    id: u64,
}

impl Registration {
    /// The registered contributor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the contributor now; its keys are free to be claimed again.
    pub fn unregister(self) {}
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let mut registry = lock(&registry);
        // The id check keeps a stale handle from removing a later contributor that
        // reused the name.
        if registry
            .contributors
            .get(&self.name)
            .is_some_and(|entry| entry.id == self.id)
        {
            registry.contributors.remove(&self.name);
        }
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn lock(registry: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    // No contributor code runs under the lock and every update is one insert or remove,
    // so a poisoned registry is still consistent.
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

fn shell_env_invalid(message: String) -> HarnessError {
    HarnessError::new(ErrorCode::ShellEnvInvalid, message)
}

/// Checks a registration in the reference's order, per key: shape, reserved, described,
/// unowned. Returns the declarations as key → description.
fn validate(
    registry: &Registry,
    name: &str,
    declared: Vec<EnvVariable>,
) -> Result<BTreeMap<String, String>, HarnessError> {
    if name.trim().is_empty() {
        return Err(shell_env_invalid(
            "bash env contributor name must be non-empty".to_owned(),
        ));
    }
    if registry.contributors.contains_key(name) {
        return Err(shell_env_invalid(format!(
            "bash env contributor \"{name}\" is already registered"
        )));
    }
    let mut variables = BTreeMap::new();
    for EnvVariable { key, description } in declared {
        if !is_valid_key(&key) {
            return Err(shell_env_invalid(format!(
                "bash env contributor \"{name}\" declared invalid key \"{key}\""
            )));
        }
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(shell_env_invalid(format!(
                "bash env contributor \"{name}\" cannot own reserved key \"{key}\""
            )));
        }
        if description.trim().is_empty() {
            return Err(shell_env_invalid(format!(
                "bash env contributor \"{name}\" must describe \"{key}\""
            )));
        }
        if let Some(owner) = owner_of(registry, &key) {
            return Err(shell_env_invalid(format!(
                "bash env key \"{key}\" is already owned by contributor \"{owner}\"; contributor \"{name}\" cannot also own it"
            )));
        }
        // The reference declares keys as object properties, which cannot repeat; a list
        // can, and a repeat is a mistake worth naming.
        if variables.contains_key(&key) {
            return Err(shell_env_invalid(format!(
                "bash env contributor \"{name}\" declared key \"{key}\" twice"
            )));
        }
        variables.insert(key, description);
    }
    Ok(variables)
}

fn owner_of<'r>(registry: &'r Registry, key: &str) -> Option<&'r str> {
    registry
        .contributors
        .iter()
        .find(|(_, entry)| entry.variables.contains_key(key))
        .map(|(name, _)| name.as_str())
}

/// `DSH_` then `^[A-Z][A-Z0-9_]*$`.
fn is_valid_key(key: &str) -> bool {
    let Some(suffix) = key.strip_prefix(KEY_PREFIX) else {
        return false;
    };
    let mut bytes = suffix.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The `DSH_HOME` precedence of [`ShellEnv::new`], with the host facts passed in.
fn resolve_dsh_home(
    configured: Option<PathBuf>,
    env_dsh_home: Option<OsString>,
    home: Option<PathBuf>,
    cwd: Option<&Path>,
) -> PathBuf {
    let chosen = configured
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| env_dsh_home.filter(|v| !v.is_empty()).map(PathBuf::from))
        .or_else(|| {
            home.filter(|h| !h.as_os_str().is_empty())
                .map(|h| h.join(".dsh"))
        })
        .unwrap_or_else(|| PathBuf::from(".dsh"));
    let absolute = match cwd {
        Some(cwd) if chosen.is_relative() => cwd.join(chosen),
        _ => chosen,
    };
    // Lexically, as Node's `path.resolve` does (a symlinked directory followed by `..` is
    // not resolved through the link).
    dsh_core::path::fold_dots(&absolute)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every key currently claimed, built-ins included.
    fn claimed_keys(env: &ShellEnv) -> BTreeSet<String> {
        let mut keys: BTreeSet<String> = RESERVED_KEYS.iter().map(|k| (*k).to_owned()).collect();
        keys.extend(env.list().into_iter().map(|(_, key, _)| key));
        keys
    }

    /// A contributor whose declarations and values are plain data.
    struct Fixed {
        name: String,
        variables: Vec<EnvVariable>,
        values: Vec<(String, String)>,
    }

    impl EnvContributor for Fixed {
        fn name(&self) -> &str {
            &self.name
        }
        fn variables(&self) -> Vec<EnvVariable> {
            self.variables.clone()
        }
        fn contribute(&self, _exec: &ExecContext) -> BTreeMap<String, String> {
            self.values.iter().cloned().collect()
        }
    }

    fn contributor(name: &str, keys: &[&str], values: &[(&str, &str)]) -> Arc<Fixed> {
        Arc::new(Fixed {
            name: name.to_owned(),
            variables: keys
                .iter()
                .map(|k| EnvVariable::new(*k, format!("{k} for tests")))
                .collect(),
            values: values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        })
    }

    fn declaring(name: &str, variables: Vec<EnvVariable>) -> Arc<Fixed> {
        Arc::new(Fixed {
            name: name.to_owned(),
            variables,
            values: Vec::new(),
        })
    }

    fn env() -> ShellEnv {
        ShellEnv::new(Some(PathBuf::from("/home/me/.dsh")))
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn session(id: &str) -> ExecContext {
        ExecContext {
            session_id: Some(SessionId::new(id)),
        }
    }

    fn register_err(env: &ShellEnv, c: Arc<Fixed>) -> (ErrorCode, String) {
        let e = env.register(c).expect_err("registration should be refused");
        (e.code(), e.message().to_owned())
    }

    fn refused(message: &str) -> (ErrorCode, String) {
        (ErrorCode::ShellEnvInvalid, message.to_owned())
    }

    // --- built-ins --------------------------------------------------------------------

    #[test]
    fn builtins_without_a_session_are_home_and_shell_only() {
        assert_eq!(
            env().collect(&ExecContext::default()).expect("collect"),
            map(&[("DSH_HOME", "/home/me/.dsh"), ("DSH_SHELL", "1")])
        );
    }

    #[test]
    fn builtins_with_a_session_add_the_session_id() {
        assert_eq!(
            env().collect(&session("s-1")).expect("collect"),
            map(&[
                ("DSH_HOME", "/home/me/.dsh"),
                ("DSH_SESSION_ID", "s-1"),
                ("DSH_SHELL", "1"),
            ])
        );
    }

    #[test]
    fn reserved_keys_are_exactly_the_builtins() {
        assert_eq!(RESERVED_KEYS, ["DSH_HOME", "DSH_SESSION_ID", "DSH_SHELL"]);
    }

    // --- DSH_HOME precedence ----------------------------------------------------------

    fn home(
        configured: Option<&str>,
        env: Option<&str>,
        home: Option<&str>,
        cwd: Option<&str>,
    ) -> PathBuf {
        resolve_dsh_home(
            configured.map(PathBuf::from),
            env.map(OsString::from),
            home.map(PathBuf::from),
            cwd.map(Path::new),
        )
    }

    #[test]
    fn configured_dsh_home_wins_over_environment_and_home() {
        assert_eq!(
            home(Some("/cfg"), Some("/env"), Some("/home/me"), Some("/cwd")),
            PathBuf::from("/cfg")
        );
    }

    #[test]
    fn dsh_home_comes_from_the_environment_when_not_configured() {
        assert_eq!(
            home(None, Some("/env/dsh"), Some("/home/me"), Some("/cwd")),
            PathBuf::from("/env/dsh")
        );
    }

    #[test]
    fn dsh_home_defaults_to_dot_dsh_under_the_home_directory() {
        assert_eq!(
            home(None, None, Some("/home/me"), Some("/cwd")),
            PathBuf::from("/home/me/.dsh")
        );
    }

    #[test]
    fn empty_values_count_as_unset() {
        assert_eq!(
            home(Some(""), Some(""), Some("/home/me"), Some("/cwd")),
            PathBuf::from("/home/me/.dsh")
        );
    }

    #[test]
    fn relative_dsh_home_is_made_absolute_against_the_current_directory() {
        assert_eq!(
            home(Some("state/dsh"), None, None, Some("/cwd")),
            PathBuf::from("/cwd/state/dsh")
        );
        assert_eq!(
            home(None, Some("./x/../dsh"), None, Some("/work/a")),
            PathBuf::from("/work/a/dsh")
        );
        assert_eq!(
            home(None, Some("../../../up"), None, Some("/work/a")),
            PathBuf::from("/up")
        );
    }

    #[test]
    fn missing_home_directory_falls_back_to_dot_dsh_in_the_current_directory() {
        assert_eq!(
            home(None, None, None, Some("/cwd")),
            PathBuf::from("/cwd/.dsh")
        );
    }

    #[test]
    fn relative_path_stays_relative_when_the_current_directory_is_unknown() {
        assert_eq!(home(Some("a/./b"), None, None, None), PathBuf::from("a/b"));
        assert_eq!(home(Some("../a"), None, None, None), PathBuf::from("../a"));
    }

    #[test]
    fn new_always_yields_an_absolute_dsh_home() {
        assert!(ShellEnv::new(None).dsh_home().is_absolute());
        assert!(ShellEnv::new(Some(PathBuf::from("rel")))
            .dsh_home()
            .is_absolute());
    }

    // --- contributors -----------------------------------------------------------------

    #[test]
    fn contributor_values_are_merged_with_the_builtins_sorted_by_key() {
        let env = env();
        let _a = env
            .register(contributor(
                "zeta",
                &["DSH_A_ALWAYS"],
                &[("DSH_A_ALWAYS", "a")],
            ))
            .expect("register zeta");
        let _b = env
            .register(contributor(
                "alpha",
                &["DSH_ZZ", "DSH_OPTIONAL"],
                &[("DSH_ZZ", "z")],
            ))
            .expect("register alpha");
        let vars = env.collect(&ExecContext::default()).expect("collect");
        assert_eq!(
            vars,
            map(&[
                ("DSH_A_ALWAYS", "a"),
                ("DSH_HOME", "/home/me/.dsh"),
                ("DSH_SHELL", "1"),
                ("DSH_ZZ", "z"),
            ])
        );
        assert_eq!(
            vars.keys().cloned().collect::<Vec<_>>(),
            ["DSH_A_ALWAYS", "DSH_HOME", "DSH_SHELL", "DSH_ZZ"]
        );
    }

    #[test]
    fn contributor_sees_the_exec_context() {
        struct SessionEcho;
        impl EnvContributor for SessionEcho {
            fn name(&self) -> &str {
                "echo"
            }
            fn variables(&self) -> Vec<EnvVariable> {
                vec![EnvVariable::new("DSH_ECHO", "the session, again")]
            }
            fn contribute(&self, exec: &ExecContext) -> BTreeMap<String, String> {
                exec.session_id
                    .iter()
                    .map(|s| ("DSH_ECHO".to_owned(), format!("seen {s}")))
                    .collect()
            }
        }
        let env = env();
        let _r = env.register(Arc::new(SessionEcho)).expect("register");
        let with = env.collect(&session("s-9")).expect("collect");
        let without = env.collect(&ExecContext::default()).expect("collect");
        assert_eq!(with.get("DSH_ECHO").map(String::as_str), Some("seen s-9"));
        assert_eq!(without.get("DSH_ECHO"), None);
    }

    #[test]
    fn list_shows_declarations_sorted_by_key_without_builtins() {
        let env = env();
        let _a = env
            .register(declaring(
                "beta",
                vec![
                    EnvVariable::new("DSH_ZEBRA", "last"),
                    EnvVariable::new("DSH_APPLE", "first"),
                ],
            ))
            .expect("register beta");
        let _b = env
            .register(declaring(
                "alpha",
                vec![EnvVariable::new("DSH_MIDDLE", "middle")],
            ))
            .expect("register alpha");
        let row = |c: &str, k: &str, d: &str| (c.to_owned(), k.to_owned(), d.to_owned());
        assert_eq!(
            env.list(),
            vec![
                row("beta", "DSH_APPLE", "first"),
                row("alpha", "DSH_MIDDLE", "middle"),
                row("beta", "DSH_ZEBRA", "last"),
            ]
        );
    }

    #[test]
    fn list_is_empty_with_no_contributors() {
        assert_eq!(env().list(), Vec::new());
    }

    #[test]
    fn declarations_are_read_once_at_registration() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Counting(AtomicUsize);
        impl EnvContributor for Counting {
            fn name(&self) -> &str {
                "counting"
            }
            fn variables(&self) -> Vec<EnvVariable> {
                self.0.fetch_add(1, Ordering::SeqCst);
                vec![EnvVariable::new("DSH_COUNTED", "counted")]
            }
            fn contribute(&self, _exec: &ExecContext) -> BTreeMap<String, String> {
                BTreeMap::new()
            }
        }
        let env = env();
        let c = Arc::new(Counting(AtomicUsize::new(0)));
        let _r = env.register(c.clone()).expect("register");
        env.collect(&ExecContext::default()).expect("collect");
        env.list();
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
    }

    // --- registration refusals ----------------------------------------------------------

    #[test]
    fn blank_name_is_refused() {
        let env = env();
        for name in ["", "   "] {
            assert_eq!(
                register_err(&env, contributor(name, &["DSH_X"], &[])),
                refused("bash env contributor name must be non-empty")
            );
        }
    }

    #[test]
    fn duplicate_name_is_refused() {
        let env = env();
        let _first = env
            .register(contributor("dup", &["DSH_ONE"], &[]))
            .expect("register first");
        assert_eq!(
            register_err(&env, contributor("dup", &["DSH_TWO"], &[])),
            refused("bash env contributor \"dup\" is already registered")
        );
    }

    #[test]
    fn malformed_keys_are_refused() {
        let env = env();
        for key in [
            "HOME", "DSH_", "dsh_X", "DSH_x", "DSH_1X", "DSH__X", "DSH_X-Y", "DSH_X Y", "DSH_É",
            " DSH_X",
        ] {
            assert_eq!(
                register_err(&env, contributor("bad", &[key], &[])),
                refused(&format!(
                    "bash env contributor \"bad\" declared invalid key \"{key}\""
                )),
                "{key:?}"
            );
        }
    }

    #[test]
    fn well_formed_keys_are_accepted() {
        let env = env();
        let _r = env
            .register(contributor(
                "good",
                &["DSH_X", "DSH_A1_B_2", "DSH_Z__"],
                &[],
            ))
            .expect("register");
        assert_eq!(env.list().len(), 3);
    }

    #[test]
    fn reserved_keys_are_refused() {
        let env = env();
        for key in RESERVED_KEYS {
            assert_eq!(
                register_err(&env, contributor("greedy", &[key], &[])),
                refused(&format!(
                    "bash env contributor \"greedy\" cannot own reserved key \"{key}\""
                ))
            );
        }
    }

    #[test]
    fn blank_description_is_refused() {
        let env = env();
        for description in ["", " \t\n"] {
            assert_eq!(
                register_err(
                    &env,
                    declaring("terse", vec![EnvVariable::new("DSH_X", description)])
                ),
                refused("bash env contributor \"terse\" must describe \"DSH_X\"")
            );
        }
    }

    #[test]
    fn key_owned_by_another_contributor_is_refused() {
        let env = env();
        let _owner = env
            .register(contributor("first", &["DSH_SHARED"], &[]))
            .expect("register first");
        assert_eq!(
            register_err(&env, contributor("second", &["DSH_OWN", "DSH_SHARED"], &[])),
            refused(
                "bash env key \"DSH_SHARED\" is already owned by contributor \"first\"; \
                 contributor \"second\" cannot also own it"
            )
        );
    }

    #[test]
    fn key_declared_twice_by_one_contributor_is_refused() {
        let env = env();
        assert_eq!(
            register_err(&env, contributor("twice", &["DSH_X", "DSH_X"], &[])),
            refused("bash env contributor \"twice\" declared key \"DSH_X\" twice")
        );
    }

    #[test]
    fn refused_registration_claims_nothing() {
        let env = env();
        register_err(&env, contributor("half", &["DSH_FINE", "bad"], &[]));
        assert_eq!(
            claimed_keys(&env),
            RESERVED_KEYS.iter().map(|k| (*k).to_owned()).collect()
        );
        let _r = env
            .register(contributor("half", &["DSH_FINE"], &[]))
            .expect("name and key are still free");
    }

    // --- collect refusals -------------------------------------------------------------

    #[test]
    fn undeclared_returned_key_fails_collect() {
        let env = env();
        let _r = env
            .register(contributor(
                "sneaky",
                &["DSH_OK"],
                &[("DSH_OK", "1"), ("DSH_OTHER", "2")],
            ))
            .expect("register");
        let e = env
            .collect(&ExecContext::default())
            .expect_err("collect should fail");
        assert_eq!(
            (e.code(), e.message()),
            (
                ErrorCode::ShellEnvInvalid,
                "bash env contributor \"sneaky\" returned undeclared key \"DSH_OTHER\""
            )
        );
    }

    #[test]
    fn returning_a_builtin_key_fails_collect() {
        let env = env();
        let _r = env
            .register(contributor("hijack", &["DSH_OK"], &[("DSH_HOME", "/evil")]))
            .expect("register");
        let e = env
            .collect(&ExecContext::default())
            .expect_err("collect should fail");
        assert_eq!(
            e.message(),
            "bash env contributor \"hijack\" returned undeclared key \"DSH_HOME\""
        );
    }

    #[test]
    fn value_with_a_nul_byte_fails_collect() {
        let env = env();
        let _r = env
            .register(contributor("nul", &["DSH_NUL"], &[("DSH_NUL", "a\0b")]))
            .expect("register");
        let e = env
            .collect(&ExecContext::default())
            .expect_err("collect should fail");
        assert_eq!(
            (e.code(), e.message()),
            (
                ErrorCode::ShellEnvInvalid,
                "bash env contributor \"nul\" returned a value with a NUL byte for \"DSH_NUL\""
            )
        );
    }

    // --- unregistering ------------------------------------------------------------------

    #[test]
    fn dropping_the_registration_removes_the_contributor() {
        let env = env();
        let r = env
            .register(contributor("gone", &["DSH_GONE"], &[("DSH_GONE", "x")]))
            .expect("register");
        drop(r);
        assert_eq!(env.list(), Vec::new());
        assert_eq!(
            env.collect(&ExecContext::default()).expect("collect"),
            map(&[("DSH_HOME", "/home/me/.dsh"), ("DSH_SHELL", "1")])
        );
    }

    #[test]
    fn explicit_unregister_frees_the_name_and_keys() {
        let env = env();
        let r = env
            .register(contributor("cycle", &["DSH_CYCLE"], &[]))
            .expect("register");
        assert_eq!(r.name(), "cycle");
        r.unregister();
        let _again = env
            .register(contributor("cycle", &["DSH_CYCLE"], &[]))
            .expect("re-register after unregister");
        let _other = env
            .register(contributor("other", &["DSH_OTHER"], &[]))
            .expect("register other");
        assert_eq!(env.list().len(), 2);
    }

    #[test]
    fn registration_outliving_the_registry_drops_quietly() {
        let env = env();
        let r = env
            .register(contributor("late", &["DSH_LATE"], &[]))
            .expect("register");
        drop(env);
        // The registration did not keep the registry alive, and dropping it now is a no-op
        // (no panic, no lock on freed state).
        assert!(
            r.registry.upgrade().is_none(),
            "the registry outlived its ShellEnv"
        );
        assert_eq!(r.name(), "late");
        drop(r);
    }

    #[test]
    fn stale_registration_cannot_remove_a_newer_contributor_with_the_same_name() {
        let env = env();
        let first = env
            .register(contributor("same", &["DSH_SAME"], &[]))
            .expect("register first");
        let stale = Registration {
            registry: first.registry.clone(),
            name: first.name.clone(),
            id: first.id,
        };
        first.unregister();
        let _second = env
            .register(contributor("same", &["DSH_SAME"], &[]))
            .expect("register second");
        drop(stale);
        assert_eq!(env.list().len(), 1);
    }

    #[test]
    fn contributor_may_call_back_into_the_registry_during_collect() {
        struct Reentrant(Arc<ShellEnv>);
        impl EnvContributor for Reentrant {
            fn name(&self) -> &str {
                "reentrant"
            }
            fn variables(&self) -> Vec<EnvVariable> {
                vec![EnvVariable::new("DSH_COUNT", "declarations listed")]
            }
            fn contribute(&self, _exec: &ExecContext) -> BTreeMap<String, String> {
                BTreeMap::from([("DSH_COUNT".to_owned(), self.0.list().len().to_string())])
            }
        }
        let env = Arc::new(env());
        let _r = env
            .register(Arc::new(Reentrant(env.clone())))
            .expect("register");
        let vars = env.collect(&ExecContext::default()).expect("collect");
        assert_eq!(vars.get("DSH_COUNT").map(String::as_str), Some("1"));
    }

    #[test]
    fn collected_map_is_unaffected_by_later_registrations() {
        let env = env();
        let before = env.collect(&ExecContext::default()).expect("collect");
        let _r = env
            .register(contributor("later", &["DSH_LATER"], &[("DSH_LATER", "x")]))
            .expect("register");
        assert!(!before.contains_key("DSH_LATER"));
    }
}
