//! Which directory a connection works in, and opening its World and session there.
//!
//! The workspace is `-C DIR` when given. Otherwise, if the client offers MCP roots
//! (protocol versions before `2026-07-28`, which deprecates them), it is the first `file:`
//! root that is a directory; else the directory the server was started in. The World and
//! the session are opened once, at the connection's first `tools/list` or `tools/call`,
//! so the roots can be asked first.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use dsh_core::HarnessError;
use dsh_store::session::Session;
use dsh_tools::World;
use rmcp::service::RequestContext;
use rmcp::RoleServer;

/// How long the client's roots are waited for before the server's directory is used: the
/// first call waits this long at most.
const ROOTS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What an [`Opener`] returns: the connection's World and its session, whose turn is open.
pub type Opened = (Arc<World>, Arc<Session>);

/// Opens the World and session of a connection in a workspace directory.
pub type Opener = Arc<
    dyn Fn(PathBuf) -> Pin<Box<dyn Future<Output = Result<Opened, HarnessError>> + Send>>
        + Send
        + Sync,
>;

/// Where a connection works: a directory, and whether the user chose it (`-C`).
#[derive(Clone, Debug)]
pub struct Workspace {
    /// `-C DIR`, or the server's working directory.
    pub dir: PathBuf,
    /// Whether `dir` was given with `-C` (then the client's roots are not asked).
    pub explicit: bool,
}

impl Workspace {
    /// The workspace root this connection works in. See the [module docs](self).
    pub(crate) async fn choose_root(&self, context: &RequestContext<RoleServer>) -> PathBuf {
        if self.explicit {
            return self.dir.clone();
        }
        let offers_roots = context
            .client_capabilities()
            .is_some_and(|c| c.roots.is_some());
        if !offers_roots {
            return self.dir.clone();
        }
        // Roots are deprecated from 2026-07-28, where this request is refused; the
        // fallback is then the server's directory.
        // A client that does not answer soon is not waited for.
        #[allow(deprecated)]
        let why = tokio::select! {
            r = context.peer.list_roots() => match r {
                Ok(r) => match r
                    .roots
                    .iter()
                    .filter_map(|root| file_uri_path(&root.uri))
                    .find(|p| p.is_dir())
                {
                    Some(dir) => return dir,
                    None if r.roots.is_empty() => "the client's roots list is empty".to_owned(),
                    None => "the client's roots name no directory on this machine".to_owned(),
                },
                Err(e) => format!("the client declares roots but could not list them ({e})"),
            },
            () = tokio::time::sleep(ROOTS_WAIT) => format!(
                "the client declares roots but did not list them within {} s",
                ROOTS_WAIT.as_secs()
            ),
            () = context.ct.cancelled() => "the first call was cancelled before the client listed its roots".to_owned(),
        };
        eprintln!(
            "dsh mcp: {why}; working in {} (pass -C DIR to choose)",
            self.dir.display()
        );
        self.dir.clone()
    }
}

/// The absolute path a `file:` URI names (`file:///a%20b` → `/a b`), if it names a local one.
pub(crate) fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    use std::os::unix::ffi::OsStringExt;
    let p = PathBuf::from(std::ffi::OsString::from_vec(out));
    Some(std::path::absolute(Path::new(&p)).unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::file_uri_path;
    use std::path::PathBuf;

    #[test]
    fn file_uris_become_paths_and_others_do_not() {
        assert_eq!(
            file_uri_path("file:///home/a%20b/x"),
            Some(PathBuf::from("/home/a b/x"))
        );
        assert_eq!(
            file_uri_path("file://localhost/srv"),
            Some(PathBuf::from("/srv"))
        );
        assert_eq!(file_uri_path("https://example.com/x"), None);
        assert_eq!(file_uri_path("file://host/share"), None);
        assert_eq!(file_uri_path("file:///a%00b"), None);
        assert_eq!(file_uri_path("file:///a%zz"), None);
    }
}
