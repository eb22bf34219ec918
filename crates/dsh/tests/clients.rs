//! The agent clients people use (Claude Code, Codex, Gemini CLI) run headless against
//! `dsh mcp`, each talking to a scripted model on 127.0.0.1 (`clients/model.rs`). The
//! verdict is what the client passed back to the model in its next model request: the
//! text dsh rendered must reach the model, whatever the client does on the way.
//!
//! Needs `DSH_CLIENTS_BIN`: a directory holding `claude`, `codex` and `gemini`. Without a
//! client the test records a skip with `dsh_testkit` (a failure where the clients are required).

#[path = "clients/model.rs"]
mod model;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use model::{Api, Call, ModelServer};
use serde_json::{json, Value};

/// How long one client run may take before it is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// A line the read-only scenario's `read` and `grep` must find.
const MARKER: &str = "unique-marker-5e1f";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    ClaudeCode,
    Codex,
    GeminiCli,
}

impl Client {
    fn program(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude",
            Client::Codex => "codex",
            Client::GeminiCli => "gemini",
        }
    }

    fn api(self) -> Api {
        match self {
            Client::ClaudeCode => Api::Anthropic,
            Client::Codex => Api::Responses,
            Client::GeminiCli => Api::Gemini,
        }
    }

    /// Whether the client declares MCP elicitation (dsh then offers escalation after a
    /// denial; otherwise it says nobody can approve a wider mode).
    fn declares_elicitation(self) -> bool {
        self != Client::GeminiCli
    }

    /// The client's binary in `DSH_CLIENTS_BIN`; when it is missing, `None` after
    /// `dsh_testkit::skip` (a failure where the clients are required).
    fn find(self) -> Option<PathBuf> {
        let name = self.program();
        let found = std::env::var_os("DSH_CLIENTS_BIN")
            .map(|dir| PathBuf::from(dir).join(name))
            .filter(|p| p.is_file());
        if found.is_none() {
            dsh_testkit::skip(
                dsh_testkit::Need::Clients,
                &format!(
                    "{name} is not in DSH_CLIENTS_BIN ({:?}; see .ci/run)",
                    std::env::var_os("DSH_CLIENTS_BIN")
                ),
            );
        }
        found
    }

    /// The headless command, its configuration written under `s.home`, that serves
    /// `dsh_args` as the MCP server `dsh` and talks to the model at `url`.
    fn command(self, bin: &Path, s: &Session, url: &str, dsh_args: &[String]) -> Command {
        let dsh = env!("CARGO_BIN_EXE_dsh");
        let prompt = "Use the dsh tools as instructed.";
        let mut c = Command::new(bin);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &s.home)
            .env("TERM", "dumb");
        match self {
            Client::ClaudeCode => {
                let config = s.home.join("mcp.json");
                let servers = json!({"mcpServers": {"dsh": {
                    "type": "stdio", "command": dsh, "args": dsh_args}}});
                write(&config, &servers.to_string());
                c.args(["-p", prompt, "--mcp-config"])
                    .arg(&config)
                    .args([
                        "--strict-mcp-config",
                        "--allowedTools",
                        "mcp__dsh",
                        "--model",
                        "claude-sonnet-5-5",
                        "--output-format",
                        "json",
                    ])
                    .env("CLAUDE_CONFIG_DIR", s.home.join(".claude"))
                    .env("ANTHROPIC_BASE_URL", url)
                    .env("ANTHROPIC_API_KEY", "sk-ant-dummy")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_ERROR_REPORTING", "1")
                    .env("CLAUDE_CODE_ENABLE_TELEMETRY", "0")
                    // Otherwise the MCP tools are deferred behind a tool-search tool.
                    .env("ENABLE_TOOL_SEARCH", "false");
            }
            Client::Codex => {
                // JSON strings are valid TOML basic strings.
                let q = |v: &str| Value::from(v).to_string();
                let args: Vec<String> = dsh_args.iter().map(|a| q(a)).collect();
                let config = format!(
                    "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\n\
                     approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
                     check_for_update_on_startup = false\n\n\
                     [features]\nplugins = false\n\n\
                     [analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n\
                     [model_providers.scripted]\nname = \"scripted\"\nbase_url = {}\n\
                     wire_api = \"responses\"\nenv_key = \"SCRIPTED_API_KEY\"\n\
                     request_max_retries = 0\nstream_max_retries = 0\n\n\
                     [mcp_servers.dsh]\ncommand = {}\nargs = [{}]\n\
                     default_tools_approval_mode = \"approve\"\n\
                     startup_timeout_sec = 30\ntool_timeout_sec = 120\n",
                    q(&format!("{url}/v1")),
                    q(dsh),
                    args.join(", ")
                );
                write(&s.home.join("config.toml"), &config);
                c.args([
                    "exec",
                    "--strict-config",
                    "--skip-git-repo-check",
                    "--json",
                    prompt,
                ])
                .env("CODEX_HOME", &s.home)
                .env("SCRIPTED_API_KEY", "dummy")
                .env("RUST_LOG", "warn");
            }
            Client::GeminiCli => {
                let settings = json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"},
                                 "folderTrust": {"enabled": false}},
                    "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
                    "privacy": {"usageStatisticsEnabled": false},
                    "telemetry": {"enabled": false},
                    "ide": {"enabled": false},
                    "mcpServers": {"dsh": {"command": dsh, "args": dsh_args, "trust": true}}
                });
                std::fs::create_dir_all(s.home.join(".gemini")).expect("gemini dir");
                write(&s.home.join(".gemini/settings.json"), &settings.to_string());
                // A model named up front: no routing request.
                c.args([
                    "-p",
                    prompt,
                    "-m",
                    "gemini-2.5-flash",
                    "--output-format",
                    "json",
                ])
                .env("GEMINI_API_KEY", "dummy")
                .env("GOOGLE_GEMINI_BASE_URL", url)
                .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
                .env("GEMINI_TELEMETRY_ENABLED", "false")
                .env("NO_BROWSER", "1");
            }
        }
        c
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A run's directories: the workspace, the client's home, dsh's state.
struct Session {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    home: PathBuf,
}

impl Session {
    fn new() -> Session {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(tmp.path()).expect("canonical tempdir");
        let ws = base.join("ws");
        let home = base.join("home");
        std::fs::create_dir_all(&ws).expect("workspace");
        std::fs::create_dir_all(&home).expect("home");
        Session {
            _tmp: tmp,
            base,
            ws,
            home,
        }
    }
}

/// What the model must see in one call's result.
enum Expect {
    /// The text occurs.
    Has(String),
    /// The line after the first line holding `.0` holds `.1`.
    LineAfter(String, String),
    /// The text occurs in this result or the one before.
    HereOrBefore(String),
}

fn has(s: &str) -> Expect {
    Expect::Has(s.to_owned())
}

/// One scripted call and what its result must show the model.
struct Step {
    call: Call,
    expect: Vec<Expect>,
}

fn step(tool: &'static str, args: Value, expect: Vec<Expect>) -> Step {
    Step {
        call: Call { tool, args },
        expect,
    }
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "test step"})
}

/// Read-only session: command output, exit codes, a sandbox denial, the file tools, an
/// error, a terminal, a background job's end notice and a huge output.
fn read_only_steps(client: Client) -> Vec<Step> {
    let after_denial = if client.declares_elicitation() {
        "escalation available"
    } else {
        "nobody can approve a wider mode"
    };
    vec![
        step(
            "bash",
            bash("echo hello-from-dsh"),
            vec![has("hello-from-dsh")],
        ),
        step("bash", bash("exit 3"), vec![has("[exit code: 3]")]),
        step(
            "bash",
            bash("touch x"),
            vec![Expect::LineAfter(
                "[sandbox: file access denied under read-only mode]".into(),
                after_denial.into(),
            )],
        ),
        step("read", json!({"file_path": "notes.txt"}), vec![has(MARKER)]),
        step("grep", json!({"pattern": MARKER}), vec![has("notes.txt")]),
        step("glob", json!({"pattern": "*.txt"}), vec![has("notes.txt")]),
        step(
            "read",
            json!({"file_path": "missing.txt"}),
            vec![has("Error:"), has("not found")],
        ),
        step("terminal_open", json!({"type": "shell"}), vec![has("pty-1")]),
        // Computed on screen, so the typed line's echo cannot pass for the output.
        step(
            "terminal_send",
            json!({"sessionId": "pty-1", "text": "echo screen-$((6*7))"}),
            vec![has("screen-42")],
        ),
        step(
            "bash",
            json!({"command": "echo bg-done", "description": "test step",
                   "run_in_background": true}),
            vec![has("started background job bash-1")],
        ),
        // The job's end notice rides on the first result after it ends: the start
        // result itself when it ended at once, else this one (it ends during the sleep).
        step(
            "bash",
            bash("sleep 1"),
            vec![Expect::HereOrBefore(
                "background job bash-1 (bash: echo bg-done) finished [status: completed, exit code: 0]"
                    .into(),
            )],
        ),
        // dsh cuts it and names the spill file at the start, where a client's own cut
        // (a preview, a head-and-tail) keeps it.
        step(
            "bash",
            bash("head -c 10000000 /dev/zero | tr '\\0' a"),
            vec![has("[output truncated"), has("dsh-spill")],
        ),
    ]
}

/// Workspace-write session with a persistent shell: write, read back, edit, `cat`, and
/// `cd`/`export` carried from one call to the next.
fn writable_steps() -> Vec<Step> {
    vec![
        step(
            "write",
            json!({"file_path": "new.txt", "content": "written-marker\n"}),
            vec![has("new.txt")],
        ),
        step(
            "read",
            json!({"file_path": "new.txt"}),
            vec![has("written-marker")],
        ),
        step(
            "edit",
            json!({"file_path": "new.txt", "old_string": "written", "new_string": "edited"}),
            vec![has("has been updated successfully")],
        ),
        step("bash", bash("cat new.txt"), vec![has("edited-marker")]),
        // The check after the call, which the pipeline adds to the result, reaches the
        // model too.
        step(
            "bash",
            bash("git init -q sub && printf '#!/bin/sh\\n' > sub/.git/hooks/pre-commit"),
            vec![has("[sandbox: this call made"), has("sub/.git")],
        ),
        step(
            "bash",
            bash("cd /tmp && export X=persist-marker"),
            vec![has("(no output)")],
        ),
        step(
            "bash",
            bash("echo $X; pwd"),
            vec![has("persist-marker"), has("/tmp")],
        ),
    ]
}

/// What the model reads in a raw result: Claude and Codex pass dsh's structuredContent
/// as JSON, whose `text` is the rendered result (Codex after a `Wall time: …\nOutput:`
/// header, kept); anything else is taken as it is.
fn visible(raw: &str) -> String {
    let starts = std::iter::once(0).chain(raw.match_indices('\n').map(|(i, _)| i + 1));
    for start in starts {
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&raw[start..]) else {
            continue;
        };
        if let Some(Value::String(text)) = o.get("text") {
            return format!("{}{text}", &raw[..start]);
        }
    }
    raw.to_owned()
}

/// Checks `expect` against `seen` (the results so far, this one last).
fn check(expect: &Expect, seen: &[String]) -> Result<(), String> {
    let here = seen.last().map_or("", String::as_str);
    match expect {
        Expect::HereOrBefore(s) => {
            let window = &seen[seen.len().saturating_sub(2)..];
            if window.iter().any(|r| r.contains(s.as_str())) {
                Ok(())
            } else {
                Err(format!("no {s:?} here nor in the result before"))
            }
        }
        Expect::Has(s) if here.contains(s.as_str()) => Ok(()),
        Expect::Has(s) => Err(format!("no {s:?}")),
        Expect::LineAfter(first, then) => {
            let mut lines = here.lines().skip_while(|l| !l.contains(first.as_str()));
            match (lines.next(), lines.next()) {
                (Some(_), Some(next)) if next.contains(then.as_str()) => Ok(()),
                (Some(_), next) => Err(format!("the line after {first:?} is {next:?}")),
                (None, _) => Err(format!("no {first:?}")),
            }
        }
    }
}

/// Runs `client` against `dsh mcp -C WS --state STATE --mode MODE EXTRA…` and a model
/// scripted with `steps`, then checks every step's model-visible result.
fn run(client: Client, mode: &str, extra: &[&str], steps: Vec<Step>, prepare: impl Fn(&Path)) {
    let Some(bin) = client.find() else { return };
    let s = Session::new();
    prepare(&s.ws);
    let mut dsh_args: Vec<String> = vec!["mcp".into(), "-C".into()];
    dsh_args.push(s.ws.display().to_string());
    dsh_args.extend(["--state".into(), s.base.join("state").display().to_string()]);
    dsh_args.extend(["--mode".into(), mode.into()]);
    dsh_args.extend(extra.iter().map(|a| (*a).to_owned()));

    let server = ModelServer::start(client.api(), steps.iter().map(|s| s.call.clone()).collect());
    let stdout_path = s.base.join("client.stdout");
    let stderr_path = s.base.join("client.stderr");
    let mut cmd = client.command(&bin, &s, &server.url(), &dsh_args);
    cmd.current_dir(&s.ws)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"));
    // Its own process group, so the client and everything it started (dsh mcp among
    // them) can be killed together.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let status = wait_bounded(&mut child, RUN_LIMIT);
    kill_group(&child);
    let elapsed = started.elapsed();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let context = || {
        format!(
            "\n-- requests:\n{}-- stdout (tail):\n{}\n-- stderr (tail):\n{}",
            server.summary(),
            tail(&stdout, 1500),
            tail(&stderr, 3000)
        )
    };
    let Some(status) = status else {
        panic!(
            "{} did not finish within {RUN_LIMIT:?}; killed{}",
            client.program(),
            context()
        );
    };
    println!(
        "{} ({mode} {extra:?}): {} calls in {elapsed:.1?}, {status}",
        client.program(),
        steps.len()
    );

    let results = server.results();
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    for (i, (step, raw)) in steps.iter().zip(&results).enumerate() {
        let label = format!("call {i}: {} {}", step.call.tool, step.call.args);
        let Some(raw) = raw else {
            failures.push(format!("{label}: the model never got its result"));
            seen.push(String::new());
            continue;
        };
        seen.push(visible(raw));
        let here = &seen[i];
        if std::env::var_os("DSH_CLIENTS_SHOW").is_some() {
            println!("{} {label}:\n{}\n", client.program(), head(here, 600));
        }
        for e in &step.expect {
            if let Err(why) = check(e, &seen) {
                failures.push(format!(
                    "{label}: {why}; the model saw:\n{}\n",
                    head(&seen[i], 2500)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} ({mode}): {} failed check(s), client {status}\n{}{}",
        client.program(),
        failures.len(),
        failures.join("\n"),
        context()
    );
    assert!(
        status.success(),
        "{} exited {status}{}",
        client.program(),
        context()
    );
}

/// Waits for `child` at most `limit`; on timeout kills its process group and reaps it.
fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            kill_group(child);
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills whatever is left in the client's process group (it leads the group).
fn kill_group(child: &std::process::Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

fn head(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn read_only(client: Client) {
    run(client, "read-only", &[], read_only_steps(client), |ws| {
        write(&ws.join("notes.txt"), &format!("first line\n{MARKER}\n"));
    });
}

fn writable_persistent(client: Client) {
    run(
        client,
        "workspace-write",
        &["--bash", "persistent"],
        writable_steps(),
        |_| {},
    );
}

#[test]
fn claude_code_passes_dsh_results_to_the_model_in_a_read_only_session() {
    read_only(Client::ClaudeCode);
}

#[test]
fn claude_code_passes_writes_edits_and_a_persistent_shell_to_the_model() {
    writable_persistent(Client::ClaudeCode);
}

#[test]
fn codex_passes_dsh_results_to_the_model_in_a_read_only_session() {
    read_only(Client::Codex);
}

#[test]
fn codex_passes_writes_edits_and_a_persistent_shell_to_the_model() {
    writable_persistent(Client::Codex);
}

#[test]
fn gemini_cli_passes_dsh_results_to_the_model_in_a_read_only_session() {
    read_only(Client::GeminiCli);
}

#[test]
fn gemini_cli_passes_writes_edits_and_a_persistent_shell_to_the_model() {
    writable_persistent(Client::GeminiCli);
}
