//! `dsh doctor` says how each mode enforces the protected paths and the read denials.

use crate::support::{text, Fixture};

#[test]
fn doctor_reports_protected_paths_and_read_denial_per_mode() {
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    std::fs::create_dir_all(fx.home.join(".ssh")).expect("ssh");
    std::fs::write(fx.home.join(".ssh/id_ed25519"), "key\n").expect("key");
    let out = fx.dsh_in(&fx.ws, &["doctor", "--json"]);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("json: {e}: {}", text(&out)));
    let modes = v["modes"].as_array().expect("modes");
    let mode = |m: &str| {
        modes
            .iter()
            .find(|x| x["mode"] == m)
            .unwrap_or_else(|| panic!("no {m} in {v}"))
    };
    let key = fx.home.join(".ssh").display().to_string();
    for m in ["read-only", "workspace-write"] {
        let r = mode(m);
        if r.get("error").is_some() {
            println!("{m} unavailable here: {r}");
            continue;
        }
        assert_eq!(r["read_denial"]["enforced"], true, "{r}");
        let paths = r["read_denial"]["paths"].as_array().expect("paths");
        assert!(paths.contains(&serde_json::json!(key)), "{r}");
        // Nothing else of the fixture's home is listed but dsh's state directory (denied
        // by construction; deciding a workspace-write policy looks for unsettled records
        // there): the rest of it is closed.
        let home = fx.home.display().to_string();
        let state = fx.home.join(".local/state/dsh").display().to_string();
        assert!(
            paths.iter().all(|p| p == &serde_json::json!(key)
                || p == &serde_json::json!(state)
                || !p.as_str().unwrap_or("").starts_with(&home)),
            "{r}"
        );
        let closed = r["read_denial"]["closed"].as_array().expect("closed");
        assert!(closed.contains(&serde_json::json!(home)), "{r}");
        assert!(r["runs"].is_boolean(), "{r}");
    }
    assert!(mode("read-only")["protected_paths"].is_null());
    let ww = mode("workspace-write");
    if ww.get("error").is_none() {
        let p = &ww["protected_paths"];
        assert!(p["count"].as_u64().is_some_and(|n| n > 10), "{ww}");
        assert_eq!(
            p["git_dirs"],
            serde_json::json!([fx.ws.join(".git")]),
            "{ww}"
        );
        assert_eq!(p["enforced"], ww["runner"] != "landlock", "{ww}");
    }
}
