//! The crates form layers (ARCHITECTURE.md §2): each depends, normally or for its tests,
//! only on crates below it in the list, never on one above.

use std::path::Path;

/// ARCHITECTURE.md's order, lowest first.
const LAYERS: &[&str] = &[
    "dsh-testkit",
    "dsh-core",
    "dsh-sandbox",
    "dsh-protect",
    "dsh-process",
    "dsh-shell",
    "dsh-fs",
    "dsh-store",
    "dsh-terminal",
    "dsh-jobs",
    "dsh-approval",
    "dsh-remote",
    "dsh-tools",
    "dsh-mcp",
    "dsh",
    "dsh-bench",
];

/// Every dsh crate named in a dependency table of `manifest` (target-specific tables too).
fn dsh_dependencies(manifest: &toml::Table) -> Vec<(String, &'static str)> {
    let mut tables: Vec<(&toml::Table, &'static str)> = Vec::new();
    for (key, kind) in [
        ("dependencies", "normal"),
        ("dev-dependencies", "dev"),
        ("build-dependencies", "build"),
    ] {
        if let Some(t) = manifest.get(key).and_then(toml::Value::as_table) {
            tables.push((t, kind));
        }
        for target in manifest
            .get("target")
            .and_then(toml::Value::as_table)
            .into_iter()
            .flat_map(|t| t.values())
        {
            if let Some(t) = target.get(key).and_then(toml::Value::as_table) {
                tables.push((t, kind));
            }
        }
    }
    let mut out = Vec::new();
    for (table, kind) in tables {
        for (name, spec) in table {
            let real = spec
                .get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(name);
            if real == "dsh" || real.starts_with("dsh-") {
                out.push((real.to_owned(), kind));
            }
        }
    }
    out
}

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates dir");
    let mut seen = 0;
    let mut upward = Vec::new();
    for entry in std::fs::read_dir(crates).expect("read crates") {
        let manifest_path = entry.expect("entry").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest_path) else {
            continue;
        };
        let manifest: toml::Table = toml::from_str(&text).expect("manifest");
        let name = manifest["package"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let Some(level) = LAYERS.iter().position(|l| *l == name) else {
            panic!("{name} is not in ARCHITECTURE.md's list of layers: add it there and here");
        };
        seen += 1;
        for (dep, kind) in dsh_dependencies(&manifest) {
            let dep_level = LAYERS
                .iter()
                .position(|l| *l == dep)
                .unwrap_or_else(|| panic!("{dep} (used by {name}) is not a known layer"));
            if dep_level >= level {
                upward.push(format!("{name} -> {dep} ({kind})"));
            }
            // The test support is for tests alone.
            if dep == "dsh-testkit" && kind != "dev" {
                upward.push(format!("{name} -> {dep} ({kind}: only tests may use it)"));
            }
        }
    }
    assert!(
        seen >= 10,
        "found only {seen} crates in {}",
        crates.display()
    );
    assert!(upward.is_empty(), "dependencies pointing up: {upward:#?}");
}

/// The folders of `dsh-tools` (ARCHITECTURE.md §Layers), lowest first: each may use the
/// crate root's definitions and the folders before it, never one after it.
const TOOLS_FOLDERS: &[&str] = &["schema", "policy", "tools", "world"];

/// Every `.rs` file under `dir`, and `dir.rs` beside it.
fn module_files(src: &Path, folder: &str) -> Vec<std::path::PathBuf> {
    let mut out = vec![src.join(format!("{folder}.rs"))];
    let mut stack = vec![src.join(folder)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read folder").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_tools_folders_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dsh-tools/src");
    let mut upward = Vec::new();
    for (level, folder) in TOOLS_FOLDERS.iter().enumerate() {
        let files = module_files(&src, folder);
        assert!(files.len() > 1, "dsh-tools/src/{folder}/ has no modules");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read module");
            for above in &TOOLS_FOLDERS[level + 1..] {
                if text.contains(&format!("crate::{above}")) {
                    upward.push(format!("{} uses crate::{above}", file.display()));
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports pointing up: {upward:#?}");
}
