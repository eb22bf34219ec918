"""Drive every `dsh mcp` tool through the official MCP Python SDK and validate each result against the
tool's outputSchema, error results included.

Usage: python every_tool.py DSH_BINARY SCRATCH_DIR [--client session|legacy|auto]
  session  ClientSession + stdio_client (the default): mcp 1.x and 2.x
  legacy   mcp.Client(mode="legacy") (mcp 2.x), as drive.py does
  auto     mcp.Client(mode="auto")   (mcp 2.x; 2026-07-28 when the server offers it)
drive.py runs the same pass (`every_tool.run`) with its own Client and mode.

Three sessions: read-only, workspace-write, and workspace-write with `--bash persistent`. In each, every
tool is called for a success and for an error (terminal_list and job_list ignore their arguments and have
no error a client can provoke). The SDK validates a result in `call_tool` only when it is not an error
(`if not result.isError` in 1.x, `not result.is_error` in 2.x), so every result is also passed to the
SDK's own validator (`ClientSession._validate_tool_result` in 1.x, `validate_tool_result` in 2.x) against
the schema it cached from `list_tools`. A case fails when the SDK raises, when the result is not what the
case expects (an error or not), when structuredContent is missing, when structuredContent.text is not the
content's text blocks joined with "\\n\\n", or when an error result lacks `error: {name, code}`. Exits
non-zero, naming each failed session/tool/case.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

SDK_VERSION = dist_version("mcp")
# Tools whose successes are content only (an image) and which declare no outputSchema.
CONTENT_ONLY = {"read_image"}
TOOLS = [
    "bash", "read", "write", "edit", "glob", "grep", "read_image",
    "terminal_open", "terminal_send", "terminal_read", "terminal_signal", "terminal_close", "terminal_list",
    "job_output", "job_list", "job_kill",
]
# No argument makes these fail: they take no arguments and ignore unknown ones.
NO_ERROR_PATH = {"terminal_list", "job_list"}
PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
SESSIONS = [
    ("read-only", ["--mode", "read-only"]),
    ("workspace-write", ["--mode", "workspace-write"]),
    ("persistent-bash", ["--mode", "workspace-write", "--bash", "persistent"]),
]


def is_error(r: Any) -> bool:
    return bool(r.is_error if hasattr(r, "is_error") else r.isError)


def structured(r: Any) -> Any:
    return r.structured_content if hasattr(r, "structured_content") else r.structuredContent


def text_of(r: Any) -> str:
    return "\n\n".join(b.text for b in r.content if getattr(b, "type", None) == "text")


class Run:
    """The tally of one driver run over all sessions."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.failures: list[str] = []
        self.seen: dict[str, list[int]] = {}  # tool -> [ok, error]
        self.validated = 0

    def fail(self, where: str, what: str, detail: Any = None) -> None:
        msg = f"[{self.label}] {where}: {what}" + ("" if detail is None else f": {json.dumps(detail, default=str)}")
        self.failures.append(msg)
        print(f"FAIL {msg}", file=sys.stderr, flush=True)

    def finish(self) -> int:
        for t in TOOLS:
            ok, err = self.seen.get(t, [0, 0])
            if ok == 0:
                self.failures.append(f"[{self.label}] {t}: no successful call")
            if err == 0 and t not in NO_ERROR_PATH:
                self.failures.append(f"[{self.label}] {t}: no error result")
        per_tool = " ".join(f"{t}={self.seen.get(t, [0, 0])[0]}/{self.seen.get(t, [0, 0])[1]}" for t in TOOLS)
        print(f"[{self.label}] per tool (ok/error): {per_tool}")
        if self.failures:
            print(f"{self.label}: {len(self.failures)} failure(s):", file=sys.stderr)
            for f in self.failures:
                print(f"  {f}", file=sys.stderr)
            print(f"{self.label}: FAILED ({self.validated} calls returned, {len(self.failures)} failures)")
            return 1
        print(f"{self.label}: {self.validated} calls validated")
        return 0


class Caller:
    """Calls tools through `call_tool` (a ClientSession's or a Client's) and checks each result."""

    def __init__(self, run: Run, name: str, ws: Path, call_tool, session: Any) -> None:
        self.run, self.name, self.ws, self.call_tool, self.session = run, name, ws, call_tool, session

    def fail(self, tool: str, what: str, detail: Any = None) -> None:
        self.run.fail(f"{self.name} {tool}", what, detail)

    async def listed(self, tools: list[Any]) -> None:
        names = sorted(t.name for t in tools)
        if names != sorted(TOOLS):
            self.fail("tools/list", "the tool names", names)
        self.schemas = {t.name: (t.output_schema if hasattr(t, "output_schema") else t.outputSchema) for t in tools}
        # The SDK validates only tools whose schema it cached from list_tools: check it holds every one.
        cached = getattr(self.session, "_tool_output_schemas", None)
        for t in TOOLS:
            if t in CONTENT_ONLY:
                if self.schemas.get(t):
                    self.fail(t, "declares no outputSchema (its image is content only)")
                continue
            if not self.schemas.get(t):
                self.fail(t, "declares an outputSchema")
            if cached is None or not cached.get(t):
                self.fail(t, "the SDK cached its outputSchema (so call_tool validates)", cached and sorted(cached))

    async def sdk_validate(self, tool: str, result: Any) -> None:
        validate = getattr(self.session, "validate_tool_result", None) or self.session._validate_tool_result
        await validate(tool, result)

    async def __call__(self, tool: str, args: dict, expect: str, *, code: str | None = None,
                       check=None, label: str | None = None) -> Any:
        what = label or f"{expect} {json.dumps(args)}"
        try:
            result = await self.call_tool(tool, args)
        except Exception as e:  # the SDK's validation raises RuntimeError; a protocol error McpError
            self.fail(tool, f"{what}: call_tool raised (SDK validation or protocol error)", f"{type(e).__name__}: {e}")
            return None
        self.run.validated += 1
        err = is_error(result)
        self.run.seen.setdefault(tool, [0, 0])[1 if err else 0] += 1
        sc = structured(result)
        if tool in CONTENT_ONLY and not err:
            # Its success is its content (an image): clients that pass the structured form
            # to the model would drop it.
            if sc is not None:
                self.fail(tool, f"{what}: a content-only success carries structuredContent", sc)
            return result
        if not isinstance(sc, dict):
            self.fail(tool, f"{what}: no structuredContent", repr(result))
            return result
        try:
            if tool not in CONTENT_ONLY:
                await self.sdk_validate(tool, result)
        except Exception as e:
            self.fail(tool, f"{what}: the SDK's validator rejects it ({type(e).__name__}: {e})",
                      {"structuredContent": sc, "outputSchema": self.schemas.get(tool)})
        if sc.get("text") != text_of(result):
            self.fail(tool, f"{what}: structuredContent.text is not the content's text",
                      {"text": sc.get("text"), "content": text_of(result)})
        if next(iter(sc), None) != "text":
            self.fail(tool, f"{what}: text is not the first field", list(sc))
        if expect == "ok" and err:
            self.fail(tool, f"{what}: expected success", sc)
        if expect == "error" and not err:
            self.fail(tool, f"{what}: expected an error", sc)
        if err:
            e = sc.get("error")
            if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("code"), str):
                self.fail(tool, f"{what}: an error without error {{name, code}}", sc)
            elif code and e["code"] != code:
                self.fail(tool, f"{what}: expected code {code}", sc)
        elif "error" in sc:
            self.fail(tool, f"{what}: a success carrying error", sc)
        if check is not None:
            try:
                ok = check(result, sc)
            except Exception as e:
                ok = False
                what = f"{what} ({type(e).__name__}: {e})"
            if not ok:
                self.fail(tool, f"{what}: check", sc)
        return result


def workspace(scratch: Path, label: str, name: str) -> Path:
    ws = scratch / label / name
    shutil.rmtree(ws, ignore_errors=True)
    (ws / "sub").mkdir(parents=True)
    (ws / "hello.txt").write_text("alpha\nbeta\nalpha\n")
    (ws / "sub" / "a.rs").write_text("fn main() {}\n")
    (ws / "img.png").write_bytes(PNG_1X1)
    return ws.resolve()


def server(dsh: str, ws: Path, state: Path, flags: list[str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=dsh,
        args=["mcp", "-C", str(ws), "--state", str(state), *flags],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")},
    )


async def every_tool(c: Caller, mode: str, persistent: bool) -> None:
    writable = mode != "read-only"
    sc_ = lambda r: structured(r) if r is not None else {}  # noqa: E731

    # bash
    await c("bash", {"command": "echo hi", "description": "say hi"}, "ok", check=lambda r, sc: sc["text"] == "hi\n")
    await c("bash", {"description": "no command"}, "error", code="INVALID_ARGS")
    await c("bash", {"command": "echo x"}, "error", code="INVALID_ARGS", label="error missing description")
    # One-shot: exitCode 3. Persistent: the shell itself exits and is reset (shellReset).
    await c("bash", {"command": "exit 3", "description": "fail"}, "any",
            check=lambda r, sc: sc.get("shellReset") is True if persistent else sc.get("exitCode") == 3)
    await c("bash", {"command": "(exit 4)", "description": "fail"}, "any", check=lambda r, sc: sc.get("exitCode") == 4)
    await c("bash", {"command": "touch made-by-bash", "description": "touch"}, "any")
    await c("bash", {"command": "sleep 5", "description": "slow", "timeout_ms": 300}, "any",
            check=lambda r, sc: sc.get("timedOut") is True)
    await c("bash", {"command": "echo x", "description": "x", "timeout_ms": "soon"}, "error", code="INVALID_ARGS")
    if not writable:
        await c("bash", {"command": "touch esc", "description": "x", "sandbox_permissions": "workspace-write",
                         "justification": "x"}, "error", code="APPROVAL_UNAVAILABLE",
                label="error escalation without elicitation")
    await c("bash", {"command": 'echo out; echo err >&2; head -c 70000 /dev/zero | tr "\\0" a', "description": "big"}, "any")
    if persistent:
        await c("bash", {"command": "cd sub && export DSH_T=42", "description": "cd"}, "ok")
        await c("bash", {"command": 'echo "$PWD $DSH_T"', "description": "carry"}, "ok",
                check=lambda r, sc: sc["text"] == f"{c.ws}/sub 42\n")
        await c("bash", {"command": "cd ..", "description": "back"}, "ok")

    # jobs: one-shot bash starts them with run_in_background; persistent bash refuses that, so there they
    # are sends typed into a terminal with run_in_background.
    job_pty = None
    if persistent:
        await c("bash", {"command": "sleep 0.2; echo bg", "description": "bg", "run_in_background": True}, "error",
                code="INVALID_ARGS", label="error run_in_background under persistent bash")
        job_pty = sc_(await c("terminal_open", {"type": "shell", "name": "jobs"}, "ok")).get("sessionId")

    async def start_job(command: str) -> str:
        if persistent:
            r = await c("terminal_send", {"sessionId": job_pty, "text": command, "run_in_background": True}, "ok")
        else:
            r = await c("bash", {"command": command, "description": "bg", "run_in_background": True}, "ok")
        return sc_(r).get("jobId") or "unknown"

    quick = await start_job("sleep 0.2; echo bg")
    await c("job_output", {"job_id": quick, "wait": True, "timeout_ms": 10000}, "ok",
            check=lambda r, sc: "bg" in sc["output"])
    await c("job_output", {"job_id": "bash-99"}, "error", code="NO_JOB")
    await c("job_output", {}, "error", code="INVALID_ARGS")
    if persistent:
        await c("terminal_send", {"sessionId": job_pty, "text": "", "timeout_ms": 5000}, "any", label="wait for the prompt")
    slow = await start_job("sleep 30")
    await c("job_list", {}, "ok", check=lambda r, sc: len(sc["jobs"]) == 2)
    await c("job_list", {"unexpected": 1}, "any")
    await c("job_kill", {"job_id": slow, "reason": "done"}, "ok")
    await c("job_kill", {"job_id": slow}, "any", label="kill an ended job")
    await c("job_kill", {"job_id": "bash-99"}, "error", code="NO_JOB")
    await c("job_kill", {}, "error", code="INVALID_ARGS")
    await c("job_output", {"job_id": slow}, "ok")
    if persistent:
        await c("terminal_close", {"sessionId": job_pty}, "ok")

    # read
    await c("read", {"file_path": "hello.txt"}, "ok", check=lambda r, sc: sc["lines"] == 3)
    await c("read", {"file_path": "hello.txt", "offset": 2, "limit": 1}, "ok")
    await c("read", {"file_path": "missing.txt"}, "error", code="FS_NOT_FOUND")
    await c("read", {"file_path": "sub"}, "error", label="error read a directory")
    await c("read", {}, "error", code="INVALID_ARGS")
    await c("read", {"file_path": "hello.txt", "offset": -1}, "error", code="INVALID_ARGS")
    await c("read", {"file_path": "/etc/hostname"}, "any", label="read outside the workspace")

    # write and edit
    if writable:
        await c("write", {"file_path": "new.txt", "content": "one\ntwo\n"}, "ok",
                check=lambda r, sc: sc["operation"] == "create")
        await c("write", {"file_path": "new.txt", "content": "one\ntwo\nthree\n"}, "any",
                label="overwrite (read since its write)")
        await c("read", {"file_path": "new.txt"}, "ok")
        await c("write", {"file_path": "new.txt", "content": "uno\ntwo\nthree\n"}, "ok",
                check=lambda r, sc: sc["operation"] == "update")
        await c("edit", {"file_path": "new.txt", "old_string": "two", "new_string": "dos"}, "ok",
                check=lambda r, sc: sc["replaced"] == 1)
        await c("edit", {"file_path": "new.txt", "old_string": "absent", "new_string": "x"}, "error")
        await c("read", {"file_path": "hello.txt"}, "ok")
        await c("edit", {"file_path": "hello.txt", "old_string": "alpha", "new_string": "x"}, "error",
                label="error not unique")
        await c("edit", {"file_path": "hello.txt", "old_string": "alpha", "new_string": "omega", "replace_all": True},
                "ok", check=lambda r, sc: sc["replaced"] == 2)
        await c("write", {"file_path": "/etc/dsh-every-tool", "content": "x"}, "error", code="FS_SANDBOX_DENIED")
    else:
        await c("write", {"file_path": "new.txt", "content": "x"}, "error", code="FS_SANDBOX_DENIED")
        await c("read", {"file_path": "hello.txt"}, "ok")
        await c("edit", {"file_path": "hello.txt", "old_string": "beta", "new_string": "gamma"}, "error",
                code="FS_SANDBOX_DENIED")
    (c.ws / "unread.txt").write_text("never read\n")
    await c("edit", {"file_path": "unread.txt", "old_string": "never", "new_string": "now"}, "error",
            code="FS_NOT_OBSERVED" if writable else None, label="error edit an unread file")
    await c("edit", {"file_path": "hello.txt"}, "error", code="INVALID_ARGS")
    await c("write", {"file_path": "x.txt"}, "error", code="INVALID_ARGS")

    # glob and grep
    await c("glob", {"pattern": "*.txt"}, "ok", check=lambda r, sc: sc["total"] >= 1)
    await c("glob", {"pattern": "*.nothing"}, "ok", check=lambda r, sc: sc["total"] == 0)
    await c("glob", {}, "error", code="INVALID_ARGS")
    await c("glob", {"pattern": "*", "path": "no-such-dir"}, "error")
    await c("grep", {"pattern": "beta|omega"}, "ok")
    await c("grep", {"pattern": "fn main", "include": "*.rs"}, "ok", check=lambda r, sc: sc["matches"] == 1)
    await c("grep", {"pattern": "("}, "error")
    await c("grep", {}, "error", code="INVALID_ARGS")

    # read_image
    await c("read_image", {"file_path": "img.png"}, "ok",
            check=lambda r, sc: sc["mimeType"] == "image/png" and any(b.type == "image" for b in r.content))
    await c("read_image", {"file_path": "missing.png"}, "error")
    await c("read_image", {"file_path": "hello.txt"}, "error", label="error not an image")
    await c("read_image", {}, "error", code="INVALID_ARGS")

    # terminals (under persistent bash the session's own shell is listed too)
    before = len(sc_(await c("terminal_list", {}, "ok")).get("sessions", []))
    pty = sc_(await c("terminal_open", {"type": "shell", "name": "main"}, "ok")).get("sessionId") or "pty-1"
    await c("terminal_open", {"type": "nope"}, "error", code="NO_BACKEND")
    await c("terminal_open", {}, "error", code="INVALID_ARGS")
    await c("terminal_open", {"type": "shell", "name": "main"}, "error", label="error a duplicate name")
    await c("terminal_list", {}, "ok", check=lambda r, sc: len(sc["sessions"]) == before + 1)
    await c("terminal_list", {"bogus": True}, "any")
    await c("terminal_send", {"sessionId": pty, "text": "echo term-ok", "timeout_ms": 10000}, "ok",
            check=lambda r, sc: "term-ok" in sc["text"])
    await c("terminal_send", {"sessionId": pty, "text": "sleep 0.3; echo later", "run_in_background": True}, "ok",
            check=lambda r, sc: isinstance(sc.get("jobId"), str))
    await c("terminal_send", {"sessionId": "pty-99", "text": "x"}, "error")
    await c("terminal_send", {"sessionId": pty}, "error", code="INVALID_ARGS")
    await c("terminal_read", {"sessionId": pty}, "ok")
    await c("terminal_read", {"sessionId": pty, "offset": 1, "count": 2}, "ok")
    await c("terminal_read", {"sessionId": "pty-99"}, "error")
    await c("terminal_read", {}, "error", code="INVALID_ARGS")
    await c("terminal_send", {"sessionId": pty, "text": "sleep 20", "timeout_ms": 300}, "any", label="a send that times out")
    await c("terminal_signal", {"sessionId": pty, "signal": "SIGINT"}, "ok")
    await c("terminal_signal", {"sessionId": pty, "signal": "SIGFOO"}, "error", code="INVALID_ARGS")
    await c("terminal_signal", {"sessionId": "pty-99", "signal": "SIGINT"}, "error")
    await c("terminal_signal", {"sessionId": pty}, "error", code="INVALID_ARGS")
    await c("job_list", {}, "ok")
    await c("terminal_close", {"sessionId": pty}, "ok")
    await c("terminal_close", {"sessionId": pty}, "any", label="close twice")
    await c("terminal_close", {"sessionId": "pty-99"}, "error")
    await c("terminal_close", {}, "error", code="INVALID_ARGS")
    await c("terminal_read", {"sessionId": pty}, "any", label="read a closed terminal")
    await c("terminal_send", {"sessionId": pty, "text": "x"}, "error", label="error send to a closed terminal")
    await c("terminal_list", {}, "ok")


async def run(dsh: str, scratch: Path, client: str = "session") -> int:
    """The every-tool pass over the three sessions. `client`: `session` (ClientSession + stdio_client),
    or `legacy`/`auto` (mcp.Client with that mode, mcp 2.x)."""
    label = f"python-sdk {SDK_VERSION} {client}"
    tally = Run(label)
    tag = f"py-{SDK_VERSION}-{client}"
    state = scratch / tag / "state"
    for name, flags in SESSIONS:
        ws = workspace(scratch, tag, name)
        params = server(dsh, ws, state, flags)
        mode = flags[flags.index("--mode") + 1]
        try:
            if client == "session":
                async with stdio_client(params) as streams:
                    read, write = streams[0], streams[1]
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        c = Caller(tally, name, ws, session.call_tool, session)
                        await c.listed((await session.list_tools()).tools)
                        await every_tool(c, mode, "persistent" in flags)
                        await settle(session)
            else:
                async with mcp.Client(params, mode=client) as cl:
                    c = Caller(tally, name, ws, cl.call_tool, cl.session)
                    await c.listed((await cl.list_tools()).tools)
                    print(f"[{label}] {name}: protocol {cl.protocol_version}")
                    await every_tool(c, mode, "persistent" in flags)
                    await settle(cl.session)
        except Exception as e:  # noqa: BLE001
            tally.fail(f"{name} (session)", "aborted", describe(e))
    return tally.finish()


async def settle(session) -> None:
    """Lets what the last calls ended (a job a terminal's close killed) send its notice while
    the session still reads: the 1.x SDK's reader fails the whole session on a message that
    arrives after the session has closed."""
    await anyio.sleep(0.5)
    await session.list_tools()


def describe(e: BaseException) -> str:
    """An exception, with the ones an exception group holds (a task group's) named too."""
    inner = getattr(e, "exceptions", None)
    text = f"{type(e).__name__}: {e}"
    if inner:
        text += " [" + "; ".join(describe(x) for x in inner) + "]"
    return text


if __name__ == "__main__":
    argv = sys.argv[1:]
    which = "session"
    if "--client" in argv:
        i = argv.index("--client")
        which = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) != 2 or which not in ("session", "legacy", "auto"):
        sys.exit("usage: python every_tool.py DSH_BINARY SCRATCH_DIR [--client session|legacy|auto]")
    sys.exit(anyio.run(run, argv[0], Path(argv[1]).resolve(), which))
