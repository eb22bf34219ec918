//! The `write` tool: a whole file, created or replaced at the version the session read.

use async_trait::async_trait;
use dsh_approval::Action;
use dsh_core::HarnessError;
use dsh_fs::observations::Observation;
use dsh_fs::WriteIntent;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::diff::line_diff;
use super::{
    check_path, envelope, file_action_of, fs_of, observation, remediate, schema_of,
    target_and_policy, with_seen,
};
use crate::policy::Escalation;
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{parse_args, CallContext, Tool, ToolOutput, World};

/// The `write` tool. See the [file tools](super).
#[derive(Debug, Default)]
pub struct WriteTool;

/// The arguments of a `write` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file, absolute or relative to the session's workspace.
    file_path: String,
    /// The whole new content.
    content: String,
    /// A wider sandbox mode for this one operation; needs `justification`, and the user is
    /// asked.
    sandbox_permissions: Option<Escalation>,
    /// Why the wider mode is needed, in one sentence the user will read.
    justification: Option<String>,
}

impl Bounded for WriteArgs {
    const BOUNDS: &'static [Bound] = &[
        bounds::FILE_PATH,
        Bound {
            arg: "content",
            max: bounds::WRITE_MAX_BYTES,
            advice: "write a smaller file, or build a large one from parts with bash",
        },
        bounds::JUSTIFICATION,
    ];
}

#[async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn title(&self) -> &str {
        "Write a file"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        }
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("key", serde_json::json!({"type": "string"})),
                (
                    "operation",
                    serde_json::json!({"type": "string", "enum": ["create", "update"]}),
                ),
                ("version", serde_json::json!({"type": "string"})),
                (
                    "diff",
                    serde_json::json!({"type": "object", "properties": {"firstLine": {"type": "integer"}, "removed": {"type": "integer"}, "added": {"type": "integer"}}}),
                ),
            ],
            &["path", "key", "operation", "version"],
        )
    }

    fn action(&self, args: &Value) -> Action {
        file_action_of(args)
    }

    fn description(&self, _world: &World) -> String {
        "Create a file, or replace one you have read, with `content` (parent directories are \
         made). The write is atomic: the file holds the old or the new content, never a mix. \
         A file you have not read in this session cannot be overwritten."
            .into()
    }

    fn parameters(&self, world: &World) -> Value {
        schema_of::<WriteArgs>(world)
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: WriteArgs = parse_args(args)?;
        check_path(&a.file_path)?;
        let (target, policy) = target_and_policy(
            ctx,
            &a.file_path,
            a.sandbox_permissions,
            a.justification.as_deref(),
            "write",
            file_action_of(args),
        )
        .await?;
        let can_ask = ctx.world.can_ask(ctx.session.map(|s| &**s)).await;
        let intent = match observation(ctx, target.key()).await {
            Some(Observation::Present(v)) => WriteIntent::ReplaceIfVersion(v),
            _ => WriteIntent::CreateIfAbsent,
        };
        let fs = fs_of(ctx.world)?;
        let out = fs
            .write_text(&target, &a.content, Some(intent), &policy)
            .await
            .map_err(|e| remediate(e, policy.mode, can_ask))?;
        ctx.saw(&target, &out.version);
        let what = if out.created {
            "Created file"
        } else {
            "Updated file"
        };
        // A repository (config, HEAD, objects/, refs/) made with writes alone gets the
        // check after the call too: the policy armed it.
        let text = envelope(target.display(), what);
        Ok(ToolOutput {
            image: None,
            text,
            meta: Some(with_seen(
                json!({
                    "path": target.display(),
                    "operation": if out.created { "create" } else { "update" },
                    "diff": out.before.as_deref().map(|b| line_diff(b, &out.after)),
                }),
                &target,
                &out.version,
            )),
        })
    }
}
