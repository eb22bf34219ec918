//! [`serve`]: the far side of a remote world, answering the [`wire`] protocol
//! on a byte stream (`dsh serve --stdio`: its stdin and stdout).

use dsh_core::HarnessError;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::wire::{self, incompatible, PROTOCOL};
use crate::ServerInfo;

/// Answers requests read from `input` on `output` until `input` ends, as `info` describes
/// this side. The first request must be `initialize` with this protocol's number; then
/// `ping` answers `{}`. A request it does not know is answered `REMOTE_INCOMPATIBLE` and
/// the channel goes on.
///
/// # Errors
/// `REMOTE_INCOMPATIBLE` for a broken frame from the near side, `REMOTE_DISCONNECTED` when
/// `output` is closed: the loop ends (what it started ends with it).
///
/// # Cancel safety
/// Not cancel safe: dropped mid-frame, the streams are left inside a frame.
pub async fn serve<R, W>(mut input: R, mut output: W, info: &ServerInfo) -> Result<(), HarnessError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut initialized = false;
    while let Some(message) = wire::read_frame(&mut input).await? {
        let Some(id) = message["id"].as_u64() else {
            // A notification: none is defined yet in protocol 1.
            continue;
        };
        let method = message["method"].as_str().unwrap_or_default();
        let answer = match (method, initialized) {
            ("initialize", _) => match message["params"]["protocol"].as_u64() {
                Some(PROTOCOL) => {
                    initialized = true;
                    Ok(info.to_json())
                }
                other => Err(incompatible(format!(
                    "the near side speaks protocol {}, this dsh {} speaks {PROTOCOL}",
                    other.map_or_else(|| "none".to_owned(), |p| p.to_string()),
                    info.version
                ))),
            },
            (_, false) => Err(incompatible("a request came before initialize")),
            ("ping", true) => Ok(json!({})),
            (other, true) => Err(incompatible(format!(
                "this dsh {} does not know the request {other:?}",
                info.version
            ))),
        };
        let reply: Value = match answer {
            Ok(result) => wire::result(id, result),
            Err(e) => wire::error(id, &e),
        };
        wire::write_frame(&mut output, &reply).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::ErrorCode;

    async fn ask(
        stream: &mut tokio::io::DuplexStream,
        id: u64,
        method: &str,
        params: Value,
    ) -> Value {
        wire::write_frame(
            stream,
            &json!({"id": id, "method": method, "params": params}),
        )
        .await
        .expect("write");
        wire::read_frame(stream)
            .await
            .expect("read")
            .expect("an answer")
    }

    #[tokio::test]
    async fn initialize_comes_first_then_requests_are_answered_by_id() {
        let (mut near, far) = tokio::io::duplex(1 << 16);
        let info = ServerInfo::of_this_process();
        let (far_in, far_out) = tokio::io::split(far);
        let server = tokio::spawn(async move { serve(far_in, far_out, &info).await });
        let early = ask(&mut near, 1, "ping", json!({})).await;
        assert_eq!(early["error"]["code"], "REMOTE_INCOMPATIBLE", "{early}");
        let wrong = ask(&mut near, 2, "initialize", json!({"protocol": 99})).await;
        assert_eq!(wrong["error"]["code"], "REMOTE_INCOMPATIBLE", "{wrong}");
        let hello = ask(&mut near, 3, "initialize", json!({"protocol": PROTOCOL})).await;
        assert_eq!(hello["id"], 3);
        assert_eq!(hello["result"]["protocol"], PROTOCOL, "{hello}");
        assert_eq!(
            ask(&mut near, 4, "ping", json!({})).await["result"],
            json!({})
        );
        let unknown = ask(&mut near, 5, "fs/teleport", json!({})).await;
        let e = wire::error_of(&unknown["error"]);
        assert_eq!(e.code(), ErrorCode::RemoteIncompatible);
        assert!(e.message().contains("fs/teleport"), "{e}");
        // The near side's end is the server's end.
        drop(near);
        server.await.expect("join").expect("a clean end");
    }
}
