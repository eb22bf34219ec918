//! [`serve`]: the far side of a remote world, answering the [`wire`] protocol
//! on a byte stream (`dsh serve --stdio`: its stdin and stdout).

use dsh_core::HarnessError;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::wire::{self, near_incompatible, PROTOCOL};
use crate::ServerInfo;

/// What the far side does for the requests past the handshake: the ones the binary that
/// serves knows (`doctor`, and the seams' operations as they come).
#[async_trait::async_trait]
pub trait Handler: Send + Sync {
    /// The answer to request `method` with `params`; `None` when this side does not know
    /// `method`.
    async fn handle(&self, method: &str, params: &Value) -> Option<Result<Value, HarnessError>>;
}

/// A handler that knows no request beyond the protocol's own.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRequests;

#[async_trait::async_trait]
impl Handler for NoRequests {
    async fn handle(&self, _: &str, _: &Value) -> Option<Result<Value, HarnessError>> {
        None
    }
}

/// Answers requests read from `input` on `output` until `input` ends, as `info` describes
/// this side. The first request must be `initialize` with this protocol's number; then
/// `ping` answers `{}`, and any other request is `handler`'s. A request nobody knows is
/// answered `REMOTE_INCOMPATIBLE` and the channel goes on. Requests are answered one at a
/// time, in order.
///
/// # Errors
/// `REMOTE_INCOMPATIBLE` for a broken frame from the near side, `REMOTE_DISCONNECTED` when
/// `output` is closed: the loop ends (what it started ends with it).
///
/// # Cancel safety
/// Not cancel safe: dropped mid-frame, the streams are left inside a frame.
pub async fn serve<R, W>(
    mut input: R,
    mut output: W,
    info: &ServerInfo,
    handler: &dyn Handler,
) -> Result<(), HarnessError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut initialized = false;
    while let Some(message) = wire::read_frame_as(&mut input, wire::near_broken).await? {
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
                other => Err(near_incompatible(format!(
                    "it speaks protocol {}, this dsh {} speaks {PROTOCOL}",
                    other.map_or_else(|| "none".to_owned(), |p| p.to_string()),
                    info.version
                ))),
            },
            (_, false) => Err(near_incompatible("a request came before initialize")),
            ("ping", true) => Ok(json!({})),
            (other, true) => match handler.handle(other, &message["params"]).await {
                Some(answer) => answer,
                None => Err(near_incompatible(format!(
                    "this dsh {} does not know the request {:?}",
                    info.version,
                    wire::peer_text(other)
                ))),
            },
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
        struct Echo;
        #[async_trait::async_trait]
        impl Handler for Echo {
            async fn handle(
                &self,
                method: &str,
                params: &Value,
            ) -> Option<Result<Value, HarnessError>> {
                (method == "echo").then(|| Ok(params.clone()))
            }
        }
        let server = tokio::spawn(async move { serve(far_in, far_out, &info, &Echo).await });
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
        let echoed = ask(&mut near, 6, "echo", json!({"a": [1, 2]})).await;
        assert_eq!(echoed["result"], json!({"a": [1, 2]}), "{echoed}");
        let unknown = ask(&mut near, 5, "fs/teleport", json!({})).await;
        let e = wire::error_of(&unknown["error"]);
        assert_eq!(e.code(), ErrorCode::RemoteIncompatible);
        assert!(e.message().contains("fs/teleport"), "{e}");
        // The near side's end is the server's end.
        drop(near);
        server.await.expect("join").expect("a clean end");
    }
}
