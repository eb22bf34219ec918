//! The `edit` tool: one replacement (or all), at the version the session read.

use async_trait::async_trait;
use dsh_approval::Action;
use dsh_core::{ErrorCode, HarnessError};
use dsh_fs::observations::Observation;
use dsh_fs::EditRequest;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::diff::line_diff;
use super::{
    check_path, file_action_of, fs_of, observation, remediate, schema_of, target_and_policy,
    with_seen,
};
use crate::policy::Escalation;
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{invalid_args, parse_args, CallContext, Tool, ToolOutput, World};

/// The `edit` tool. See the [file tools](super).
#[derive(Debug, Default)]
pub struct EditTool;

/// The arguments of an `edit` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct EditArgs {
    /// The file, absolute or relative to the session's workspace.
    file_path: String,
    /// The exact text to replace (it must occur exactly once unless `replace_all`).
    old_string: String,
    /// The text to put there instead (literal).
    new_string: String,
    /// Replace every occurrence. Default false.
    replace_all: Option<bool>,
    /// A wider sandbox mode for this one operation; needs `justification`, and the user is
    /// asked.
    sandbox_permissions: Option<Escalation>,
    /// Why the wider mode is needed, in one sentence the user will read.
    justification: Option<String>,
}

impl Bounded for EditArgs {
    const BOUNDS: &'static [Bound] = &[
        bounds::FILE_PATH,
        Bound {
            arg: "old_string",
            max: bounds::EDIT_MAX_BYTES,
            advice: "replace a shorter, unique part of the text",
        },
        Bound {
            arg: "new_string",
            max: bounds::EDIT_MAX_BYTES,
            advice: "make the change in several smaller edits",
        },
        bounds::JUSTIFICATION,
    ];
}

#[async_trait]
impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn title(&self) -> &str {
        "Edit a file"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        }
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("key", serde_json::json!({"type": "string"})),
                ("replaced", serde_json::json!({"type": "integer"})),
                ("version", serde_json::json!({"type": "string"})),
                (
                    "diff",
                    serde_json::json!({"type": "object", "properties": {"firstLine": {"type": "integer"}, "removed": {"type": "integer"}, "added": {"type": "integer"}}}),
                ),
            ],
            &["path", "key", "replaced", "version"],
        )
    }

    fn action(&self, args: &Value) -> Action {
        file_action_of(args)
    }

    fn description(&self, _world: &World) -> String {
        "Replace `old_string` with `new_string` in a file you have read (exactly one \
         occurrence unless `replace_all`). The match is literal; CRLF files stay CRLF. If \
         the file changed since you read it, read it again."
            .into()
    }

    fn parameters(&self, world: &World) -> Value {
        schema_of::<EditArgs>(world)
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: EditArgs = parse_args(args)?;
        check_path(&a.file_path)?;
        if a.old_string.is_empty() {
            return Err(invalid_args("old_string must be a non-empty string"));
        }
        if a.old_string == a.new_string {
            return Err(invalid_args("old_string and new_string must differ"));
        }
        // The version the model had read when it made the call: an edit that waits for an
        // approval is checked against it, never against what another call wrote meanwhile.
        let fs = fs_of(ctx.world)?;
        let observed = match fs
            .target_of(&a.file_path, Some(&ctx.workspace_root()))
            .await
        {
            Ok(target) => observation(ctx, target.key()).await,
            Err(_) => None,
        };
        let (target, policy) = target_and_policy(
            ctx,
            &a.file_path,
            a.sandbox_permissions,
            a.justification.as_deref(),
            "edit",
            file_action_of(args),
        )
        .await?;
        let can_ask = ctx.world.can_ask(ctx.session.map(|s| &**s)).await;
        let d = target.display().display().to_string();
        let expected = match observed {
            Some(Observation::Present(v)) => v,
            Some(Observation::Absent) => {
                return Err(HarnessError::new(
                    ErrorCode::FsNotFound,
                    format!("cannot edit \"{d}\": not found"),
                ))
            }
            None => {
                return Err(remediate(
                    HarnessError::new(
                        ErrorCode::FsNotObserved,
                        format!("edit requires reading \"{d}\" first"),
                    ),
                    policy.mode,
                    can_ask,
                ))
            }
        };
        let all = a.replace_all.unwrap_or(false);
        let req = EditRequest {
            old: a.old_string,
            new: a.new_string,
            replace_all: all,
        };
        let out = fs
            .edit_text(&target, &req, Some(&expected), &policy)
            .await
            .map_err(|e| remediate(e, policy.mode, can_ask))?;
        ctx.saw(&target, &out.version);
        let text = if all {
            format!("The file {d} has been updated. All occurrences were successfully replaced.")
        } else {
            format!("The file {d} has been updated successfully.")
        };
        Ok(ToolOutput {
            image: None,
            text,
            meta: Some(with_seen(
                json!({
                    "path": target.display(),
                    "replaced": out.replaced,
                    "diff": edit_diff(&out),
                }),
                &target,
                &out.version,
            )),
        })
    }
}

/// [`line_diff`] of the lines an edit touched, numbered as in the file.
pub(super) fn edit_diff(out: &dsh_fs::EditOutcome) -> Value {
    let mut d = line_diff(&out.before, &out.after);
    if let Some(n) = d["firstLine"].as_u64() {
        d["firstLine"] = json!(n as usize + out.first_line - 1);
    }
    d
}
