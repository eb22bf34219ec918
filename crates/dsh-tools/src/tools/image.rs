//! The `read_image` tool: a PNG, JPEG, GIF or WebP file as an image content block.
//!
//! The extension must name one of those formats, and the file's own signature must agree
//! with it (a `.png` that is a JPEG is refused, with what it really is). The file is read
//! whole up to [`IMAGE_MAX_BYTES`] (`FS_TOO_LARGE` past it). The result is a short text
//! envelope and the image itself, with its MIME type.

use std::path::Path;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::schema::bounds::{self, Bound, Bounded};
use crate::{CallContext, Image, Tool, ToolOutput, World};

/// The largest image `read_image` returns.
pub const IMAGE_MAX_BYTES: u64 = 5 << 20;

/// The `read_image` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct ReadImageTool;

/// The arguments of a `read_image` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReadImageArgs {
    /// The image file (`.png`, `.jpg`, `.jpeg`, `.gif`, `.webp`), absolute or relative to
    /// the session's workspace.
    file_path: String,
}

impl Bounded for ReadImageArgs {
    const BOUNDS: &'static [Bound] = &[bounds::FILE_PATH];
}

/// The MIME type an extension promises.
fn by_extension(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

/// The MIME type the bytes themselves say.
fn by_signature(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[async_trait]
impl Tool for ReadImageTool {
    fn name(&self) -> &str {
        "read_image"
    }

    fn title(&self) -> &str {
        "View an image"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints::READ_ONLY
    }

    fn is_structured(&self) -> bool {
        false
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("mimeType", serde_json::json!({"type": "string"})),
                ("bytes", serde_json::json!({"type": "integer"})),
            ],
            &["path", "mimeType", "bytes"],
        )
    }

    fn description(&self, _world: &World) -> String {
        "Look at an image file (PNG, JPEG, GIF, WebP; at most 5 MiB): it is returned as an \
         image you can see."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<ReadImageArgs>()
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: ReadImageArgs = crate::parse_args(args)?;
        if a.file_path.trim().is_empty() {
            return Err(HarnessError::new(
                ErrorCode::InvalidArgs,
                "file_path must be a non-empty string",
            ));
        }
        let Some(promised) = by_extension(Path::new(&a.file_path)) else {
            return Err(HarnessError::new(
                ErrorCode::InvalidArgs,
                format!(
                    "cannot read \"{}\": read_image only accepts PNG/JPEG/WebP/GIF paths",
                    a.file_path
                ),
            ));
        };
        let fs = ctx.world.fs().ok_or_else(|| {
            HarnessError::config_invalid(
                "this World has no filesystem provider; read_image needs one",
            )
        })?;
        let target = fs
            .target_of(&a.file_path, Some(&ctx.workspace_root()))
            .await?;
        let (bytes, _) = fs
            .read_bytes(&target, IMAGE_MAX_BYTES, &ctx.read_policy().await)
            .await?;
        let d = target.display().display();
        let actual = by_signature(&bytes).ok_or_else(|| {
            HarnessError::new(
                ErrorCode::FsNotText,
                format!("cannot read \"{d}\": it is not a PNG, JPEG, GIF or WebP image"),
            )
        })?;
        if actual != promised {
            return Err(HarnessError::new(
                ErrorCode::InvalidArgs,
                format!("cannot read \"{d}\": its extension says {promised} but the file is {actual}; rename it"),
            ));
        }
        Ok(ToolOutput {
            text: format!(
                "<path>{d}</path>\n<type>image</type>\n<content>\n[image: {actual}, {} bytes]\n</content>",
                bytes.len()
            ),
            meta: Some(json!({"path": target.display(), "mimeType": actual, "bytes": bytes.len()})),
            image: Some(Image {
                mime_type: actual,
                data: bytes,
            }),
        })
    }
}
