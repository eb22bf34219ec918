//! The tools pipeline: a `bash` call of `true` against the bare confined `LocalBash::run`.

use crate::measure::{bench_world, median, ratio_figure, timed_call};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use dsh_sandbox::SandboxPolicy;
use dsh_shell::ShellRequest;
use std::time::Instant;

pub(crate) async fn tool_pipeline(runs: usize) -> Vec<Figure> {
    let Some((_dir, ws, world, session, shell)) = bench_world(SandboxMode::ReadOnly).await else {
        return Vec::new();
    };
    let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &ws);
    let bare = || async {
        let mut req = ShellRequest::new("true", policy.clone());
        req.workdir = Some(ws.clone());
        let start = Instant::now();
        let r = shell
            .run(shell.spec_for(req).expect("spec"))
            .await
            .expect("run");
        assert_eq!(r.exit_code, Some(0));
        start.elapsed()
    };
    let piped = |i: usize| timed_call(&world, &session, format!("b{i}"), "true");
    for i in 0..10 {
        bare().await;
        piped(i).await;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..runs {
        ours.push(piped(i + 10).await);
        base.push(bare().await);
    }
    let (o, b) = (median(ours), median(base));
    vec![ratio_figure(
        "tool: bash true, full pipeline",
        o,
        b,
        "<= 1.5x bare run()",
        Some(1.5),
    )]
}
