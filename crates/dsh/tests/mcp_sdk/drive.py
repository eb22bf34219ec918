"""Drive `dsh mcp` through the official MCP Python SDK, as an agent's client would.

Usage: python drive.py DSH_BINARY MODE SCRATCH_DIR
MODE is the SDK's connect mode: `legacy` (the initialize handshake, elicitation as a
server-to-client request) or `auto` (2026-07-28 when the server offers it, elicitation
through InputRequiredResult and a retry). Exits non-zero, saying what failed.

It also runs the every-tool pass of `every_tool.py` (each of the 16 tools, a success and an
error each, in read-only, workspace-write and persistent-bash sessions) through this Client
and MODE: every result, error results included, must validate against its outputSchema.
"""

import json
import os
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters, types

sys.path.insert(0, str(Path(__file__).resolve().parent))
import every_tool  # noqa: E402  (the every-tool pass, shared with every_tool.py for mcp 1.x)

DSH, MODE, SCRATCH = sys.argv[1], sys.argv[2], Path(sys.argv[3])
TOOLS = {
    "bash", "edit", "glob", "grep", "read", "read_image", "write",
    "terminal_open", "terminal_send", "terminal_read", "terminal_signal", "terminal_close", "terminal_list",
    "job_output", "job_list", "job_kill",
}


def server(ws: Path | None, *flags: str, cwd: Path | None = None) -> StdioServerParameters:
    where = ["-C", str(ws)] if ws is not None else []
    return StdioServerParameters(
        command=DSH,
        args=["mcp", *where, "--state", str(SCRATCH / "state"), *flags],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=cwd,
    )


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def code(result: types.CallToolResult) -> str | None:
    sc = result.structured_content or {}
    return (sc.get("error") or {}).get("code")


def check(cond: bool, what: str, result=None) -> None:
    if not cond:
        raise AssertionError(f"[{MODE}] {what}" + (f": {result!r}" if result is not None else ""))


def workspace(name: str) -> Path:
    ws = SCRATCH / MODE / name
    ws.mkdir(parents=True)
    return ws.resolve()


async def tools_and_file_work() -> None:
    ws = workspace("write")
    async with Client(server(ws, "--mode", "workspace-write"), mode=MODE) as c:
        listed = (await c.list_tools()).tools
        check({t.name for t in listed} == TOOLS, "the tool names", [t.name for t in listed])
        for t in listed:
            check(t.input_schema.get("type") == "object", f"{t.name} has an object schema", t.input_schema)
            check(bool(t.description), f"{t.name} has a description")
        bash = next(t for t in listed if t.name == "bash")
        check("command" in bash.input_schema.get("required", []), "bash requires command", bash.input_schema)
        check(next(t for t in listed if t.name == "read").annotations.read_only_hint is True, "read is read-only")

        r = await c.call_tool("bash", {"command": "echo hi", "description": "say hi"})
        check(not r.is_error and text(r) == "hi\n", "bash echo", r)
        r = await c.call_tool("write", {"file_path": "notes.txt", "content": "alpha\nbeta\n"})
        check(not r.is_error and (ws / "notes.txt").read_text() == "alpha\nbeta\n", "write", r)
        r = await c.call_tool("read", {"file_path": "notes.txt"})
        check(not r.is_error and "2: beta" in text(r), "read", r)
        r = await c.call_tool("edit", {"file_path": "notes.txt", "old_string": "beta", "new_string": "gamma"})
        check(not r.is_error and (ws / "notes.txt").read_text() == "alpha\ngamma\n", "edit", r)
        r = await c.call_tool("grep", {"pattern": "gam+a"})
        check(not r.is_error and "notes.txt" in text(r), "grep", r)
        r = await c.call_tool("write", {"file_path": "/etc/dsh-mcp-test", "content": "x"})
        check(r.is_error and "[sandbox: file access denied under workspace-write mode]" in text(r),
              "a write outside the workspace is denied with the sandbox marker", r)
        check(not Path("/etc/dsh-mcp-test").exists(), "nothing was written outside")


async def escalations_are_elicited() -> None:
    ws = workspace("escalate")
    asked: list[str] = []
    answers = ["accept", "decline"]

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=answers[len(asked) - 1], content={} if len(asked) == 1 else None)

    async with Client(server(ws), mode=MODE, elicitation_callback=on_elicit) as c:
        r = await c.call_tool("write", {"file_path": "denied.txt", "content": "x"})
        check(r.is_error and "[sandbox: file access denied under read-only mode]" in text(r),
              "a write under read-only is denied with the sandbox marker", r)
        check(code(r) == "FS_SANDBOX_DENIED", "the denial carries its code", r)

        def escalate(name: str) -> dict:
            return {"command": f"touch {name}", "description": "make a file",
                    "sandbox_permissions": "workspace-write", "justification": f"needs to create {name}"}

        r = await c.call_tool("bash", escalate("once"))
        check(not r.is_error and (ws / "once").exists(), "an accepted escalation runs in the wider mode", r)
        check(len(asked) == 1 and "workspace-write" in asked[0] and "needs to create once" in asked[0],
              "the user is told what, why and which mode", asked)
        r = await c.call_tool("bash", escalate("never"))
        check(r.is_error and code(r) == "APPROVAL_REJECTED" and not (ws / "never").exists(),
              "a declined escalation runs nothing", r)
        check(len(asked) == 2, "one question per escalation", asked)
        r = await c.call_tool("bash", {"command": "touch plain", "description": "x"})
        check("[sandbox: file access denied under read-only mode]" in text(r) and not (ws / "plain").exists(),
              "an accepted escalation does not widen later calls", r)
        r = await c.call_tool("bash", {"command": f"sleep 0.3; echo {c.protocol_version}", "description": "v"})
        print(f"[{MODE}] protocol {text(r).strip()}: escalation accepted once, declined once")


async def no_elicitation_fails_closed() -> None:
    ws = workspace("closed")
    async with Client(server(ws), mode=MODE) as c:
        r = await c.call_tool("bash", {"command": "touch x", "description": "x",
                                       "sandbox_permissions": "workspace-write", "justification": "x"})
        check(r.is_error and code(r) == "APPROVAL_UNAVAILABLE", "no elicitation: unavailable", r)
        check("--mode workspace-write" in text(r), "the message says how to allow it instead", r)
        check(not (ws / "x").exists(), "nothing ran")


async def the_workspace_is_the_first_root() -> None:
    root, started_in = workspace("root"), workspace("started-in")

    async def roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri())])

    async with Client(server(None, cwd=started_in), mode=MODE, list_roots_callback=roots) as c:
        r = await c.call_tool("bash", {"command": "pwd", "description": "where"})
        # Roots are deprecated from 2026-07-28: there the server's directory is the workspace.
        want = started_in if c.protocol_version >= "2026-07-28" else root
        check(text(r) == f"{want}\n", f"the workspace is {want}", r)
    async with Client(server(started_in, cwd=SCRATCH), mode=MODE, list_roots_callback=roots) as c:
        r = await c.call_tool("bash", {"command": "pwd", "description": "where"})
        check(text(r) == f"{started_in}\n", "-C wins over the roots", r)


async def a_client_gone_while_asked_cancels_the_call() -> None:
    """2026-07-28 only: the call waits server-side for a retry that never comes."""
    ws = workspace("gone")

    async def on_elicit(context, params):
        return types.ElicitResult(action="accept", content={})

    async with Client(server(ws), mode=MODE, elicitation_callback=on_elicit) as c:
        if c.protocol_version < "2026-07-28":
            return
        first = await c.session.call_tool(
            "bash",
            {"command": "touch parked", "description": "x", "sandbox_permissions": "workspace-write",
             "justification": "x"},
            allow_input_required=True,
        )
        check(isinstance(first, types.InputRequiredResult) and first.request_state,
              "an escalation on 2026-07-28 is an InputRequiredResult", first)
    check(not (ws / "parked").exists(), "a call whose client left runs nothing")
    events = []
    listed = await anyio.run_process([DSH, "session", "list", "--state", str(SCRATCH / "state")])
    for line in listed.stdout.decode().splitlines():
        sid, *_, cwd = line.split()
        if cwd == str(ws):
            shown = await anyio.run_process([DSH, "session", "show", "--json", "--state", str(SCRATCH / "state"), sid])
            events = [json.loads(e) for e in shown.stdout.decode().splitlines()]
    kinds = [(e["type"], e["data"].get("outcome") or (e["data"].get("error") or {}).get("code")) for e in events]
    check(("approval/decided", "cancelled") in kinds and ("tool/result", "APPROVAL_CANCELLED") in kinds
          and kinds[-1][0] == "turn/end", "the log says the approval was cancelled, then the turn ended", kinds)


async def a_background_job_is_noticed() -> None:
    ws = workspace("jobs")
    got = []

    async def on_log(params) -> None:
        got.append(params)

    async with Client(server(ws), mode=MODE, logging_callback=on_log, log_level="info") as c:
        r = await c.call_tool("bash", {"command": "sleep 0.2; echo bg", "description": "bg",
                                       "run_in_background": True})
        check(not r.is_error and text(r) == "started background job bash-1", "a background start", r)
        for _ in range(200):
            if got:
                break
            await anyio.sleep(0.05)
        want = ("background job bash-1 (bash: sleep 0.2; echo bg) finished "
                "[status: completed, exit code: 0]. Read its output with job_output.")
        check(len(got) == 1 and got[0].logger == "dsh.jobs" and got[0].level == "info"
              and got[0].data == want, "the job's notice", got)
        r = await c.call_tool("job_output", {"job_id": "bash-1"})
        check(text(r) == "bg\n[status: completed, exit code: 0]", "its output", r)
        r = await c.call_tool("job_list", {})
        check(text(r) == "bash-1 [bash] completed — sleep 0.2; echo bg", "the job list", r)


async def every_tool_validates_against_its_output_schema() -> None:
    failed = await every_tool.run(DSH, SCRATCH / MODE / "every-tool", client=MODE)
    check(failed == 0, "every tool's results, error results included, validate against their outputSchema")


async def main() -> None:
    await the_workspace_is_the_first_root()
    await a_background_job_is_noticed()
    await tools_and_file_work()
    await escalations_are_elicited()
    await no_elicitation_fails_closed()
    await a_client_gone_while_asked_cancels_the_call()
    await every_tool_validates_against_its_output_schema()
    print(f"[{MODE}] ok")


anyio.run(main)
