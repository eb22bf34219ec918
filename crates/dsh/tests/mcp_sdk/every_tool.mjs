// Drive every `dsh mcp` tool through the official MCP TypeScript SDK and let the SDK validate each
// result against the tool's outputSchema, error results included.
//
// Usage: node every_tool.mjs [--sdk v1|v2] DSH_BINARY SCRATCH_DIR
//   --sdk v1  @modelcontextprotocol/sdk (1.x: Client + StdioClientTransport)     (default; or env DSH_TS_SDK=v1)
//   --sdk v2  @modelcontextprotocol/client (2.x: Client + StdioClientTransport)  (or env DSH_TS_SDK=v2)
// The SDK is loaded from env DSH_TS_SDK_DIR (default /tmp/dsh-ts-sdk), a directory holding node_modules, e.g.
//   npm install --prefix /tmp/dsh-ts-sdk @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/client@2.4.0
//
// Three sessions: read-only, workspace-write, and workspace-write with `--bash persistent`. In each, every
// tool is called for a success and for an error (terminal_list and job_list ignore their arguments and have
// no error a client can provoke). A call fails the run when the SDK rejects its result (callTool throws), when
// the result is not what the case expects (an error or not), when structuredContent is missing, when
// structuredContent.text is not the content's text blocks joined with "\n\n", or when an error result lacks
// `error: {name, code}`. The SDK's `callTool` skips validation of error results in v2 (`!result.isError`), so
// every result is also checked with the SDK's own validator for the listed outputSchema. Exits non-zero,
// naming each failed session/tool/case.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

// Tools whose successes are content only (an image) and which declare no outputSchema.
const CONTENT_ONLY = new Set(['read_image']);

const argv = process.argv.slice(2);
let SDK = process.env.DSH_TS_SDK || 'v1';
const positional = [];
for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--sdk') SDK = argv[++i];
    else if (argv[i].startsWith('--sdk=')) SDK = argv[i].slice(6);
    else positional.push(argv[i]);
}
if (positional.length !== 2 || !['v1', 'v2'].includes(SDK)) {
    console.error('usage: node every_tool.mjs [--sdk v1|v2] DSH_BINARY SCRATCH_DIR');
    process.exit(2);
}
const DSH = path.resolve(positional[0]);
const SCRATCH = path.resolve(positional[1]);
const SDK_DIR = path.resolve(process.env.DSH_TS_SDK_DIR || '/tmp/dsh-ts-sdk');
const req = createRequire(path.join(SDK_DIR, 'noop.js'));

function loadSdk() {
    if (SDK === 'v1') {
        const { Client } = req('@modelcontextprotocol/sdk/client/index.js');
        const { StdioClientTransport } = req('@modelcontextprotocol/sdk/client/stdio.js');
        let version = '1.x';
        try {
            const main = req.resolve('@modelcontextprotocol/sdk/client/index.js'); // …/dist/cjs/client/index.js
            version = JSON.parse(fs.readFileSync(path.join(main, '..', '..', '..', '..', 'package.json'), 'utf8')).version;
        } catch {}
        return { Client, StdioClientTransport, version };
    }
    const { Client } = req('@modelcontextprotocol/client');
    const { StdioClientTransport } = req('@modelcontextprotocol/client/stdio');
    // The validator the v2 Client uses by default on Node.
    const { DefaultJsonSchemaValidator } = req('@modelcontextprotocol/client/_shims');
    let version = '2.x';
    try {
        const main = req.resolve('@modelcontextprotocol/client');
        version = JSON.parse(fs.readFileSync(path.join(main, '..', '..', 'package.json'), 'utf8')).version;
    } catch {}
    return { Client, StdioClientTransport, DefaultJsonSchemaValidator, version };
}
const sdk = loadSdk();
const LABEL = `typescript-sdk ${SDK}`;

const TOOLS = [
    'bash', 'read', 'write', 'edit', 'glob', 'grep', 'read_image',
    'terminal_open', 'terminal_send', 'terminal_read', 'terminal_signal', 'terminal_close', 'terminal_list',
    'job_output', 'job_list', 'job_kill',
];
// No argument makes these fail: they take no arguments and ignore unknown ones.
const NO_ERROR_PATH = new Set(['terminal_list', 'job_list']);
const PNG_1X1 = Buffer.from(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

const failures = [];
const seen = {}; // tool -> {ok, error}
let validated = 0;

function textOf(result) {
    return (result.content || []).filter((b) => b.type === 'text').map((b) => b.text).join('\n\n');
}

function workspace(name) {
    const ws = path.join(SCRATCH, `ts-${SDK}`, name);
    fs.rmSync(ws, { recursive: true, force: true });
    fs.mkdirSync(path.join(ws, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'hello.txt'), 'alpha\nbeta\nalpha\n');
    fs.writeFileSync(path.join(ws, 'sub', 'a.rs'), 'fn main() {}\n');
    fs.writeFileSync(path.join(ws, 'img.png'), PNG_1X1);
    return fs.realpathSync(ws);
}

class Session {
    constructor(name, ws, flags) {
        this.name = name;
        this.ws = ws;
        this.flags = flags;
        this.stderr = '';
    }

    async open() {
        const transport = new sdk.StdioClientTransport({
            command: DSH,
            args: ['mcp', '-C', this.ws, '--state', path.join(SCRATCH, `ts-${SDK}`, 'state'), ...this.flags],
            env: { PATH: process.env.PATH || '/usr/bin:/bin', HOME: process.env.HOME || '/tmp' },
            stderr: 'pipe',
        });
        transport.stderr?.on('data', (d) => { this.stderr += d; });
        this.client = new sdk.Client({ name: 'dsh-every-tool', version: '1' }, { capabilities: {} });
        await this.client.connect(transport);
        const { tools } = await this.client.listTools();
        this.tools = new Map(tools.map((t) => [t.name, t]));
        const names = [...this.tools.keys()].sort();
        if (JSON.stringify(names) !== JSON.stringify([...TOOLS].sort())) {
            this.fail('tools/list', 'the tool names', names);
        }
        // Our own copy of the SDK's validator per tool, and a check that the SDK holds one for each tool
        // (that is, that callTool will validate).
        this.validators = new Map();
        for (const t of tools) {
            if (CONTENT_ONLY.has(t.name)) {
                if (t.outputSchema) this.fail(t.name, 'declares no outputSchema (its image is content only)', t);
                continue;
            }
            if (!t.outputSchema) {
                this.fail(t.name, 'declares an outputSchema', t);
                continue;
            }
            if (SDK === 'v1') {
                const v = this.client.getToolOutputValidator(t.name);
                if (!v) this.fail(t.name, 'the v1 SDK cached an output validator after listTools');
                this.validators.set(t.name, v);
            } else {
                if (typeof this.client._cache?.outputValidator === 'function') {
                    const held = await this.client._cache.outputValidator(
                        t.name, (tool) => this.client._compileOutputValidator(tool));
                    if (!held || !held.ok) this.fail(t.name, 'the v2 SDK holds a compiled output validator', held);
                }
                this.validators.set(t.name, new sdk.DefaultJsonSchemaValidator().getValidator(t.outputSchema));
            }
        }
    }

    async close() {
        await this.client.close();
    }

    fail(tool, what, detail) {
        const msg = `[${LABEL}] ${this.name} ${tool}: ${what}` +
            (detail === undefined ? '' : `: ${JSON.stringify(detail)}`);
        failures.push(msg);
        console.error(`FAIL ${msg}`);
    }

    // Call one tool. `expect` is 'ok', 'error' or 'any'; `code` the error code an error must carry.
    async call(tool, args, expect, { code, check, label } = {}) {
        const what = label || `${expect} ${JSON.stringify(args)}`;
        let result;
        try {
            const params = { name: tool, arguments: args };
            const options = { timeout: 60000 };
            // v1: callTool(params, resultSchema, options); v2: callTool(params, options).
            result = SDK === 'v1'
                ? await this.client.callTool(params, undefined, options)
                : await this.client.callTool(params, options);
        } catch (e) {
            this.fail(tool, `${what}: callTool threw (SDK validation or protocol error)`, String(e && e.message || e));
            return undefined;
        }
        validated++;
        const sc = result.structuredContent;
        const isError = result.isError === true;
        (seen[tool] ||= { ok: 0, error: 0 })[isError ? 'error' : 'ok']++;
        if (CONTENT_ONLY.has(tool) && !isError) {
            // Its success is its content (an image): clients that pass the structured form to the
            // model would drop it.
            if (sc !== undefined && sc !== null) this.fail(tool, `${what}: a content-only success carries structuredContent`, sc);
            return result;
        }
        if (sc === undefined || sc === null || typeof sc !== 'object') {
            this.fail(tool, `${what}: no structuredContent`, result);
            return result;
        }
        const v = this.validators.get(tool);
        if (v) {
            const r = v(sc);
            if (!r.valid) {
                this.fail(tool, `${what}: structuredContent does not match the outputSchema (${r.errorMessage})`,
                    { structuredContent: sc, outputSchema: this.tools.get(tool).outputSchema });
            }
        }
        if (sc.text !== textOf(result)) {
            this.fail(tool, `${what}: structuredContent.text is not the content's text`, { text: sc.text, content: textOf(result) });
        }
        if (Object.keys(sc)[0] !== 'text') this.fail(tool, `${what}: text is not the first field`, Object.keys(sc));
        if (expect === 'ok' && isError) this.fail(tool, `${what}: expected success`, sc);
        if (expect === 'error' && !isError) this.fail(tool, `${what}: expected an error`, sc);
        if (isError) {
            if (!sc.error || typeof sc.error.name !== 'string' || typeof sc.error.code !== 'string') {
                this.fail(tool, `${what}: an error without error {name, code}`, sc);
            } else if (code && sc.error.code !== code) {
                this.fail(tool, `${what}: expected code ${code}`, sc);
            }
        } else if (sc.error !== undefined) {
            this.fail(tool, `${what}: a success carrying error`, sc);
        }
        if (check) {
            try {
                const ok = check(result, sc);
                if (ok === false) this.fail(tool, `${what}: check`, sc);
            } catch (e) {
                this.fail(tool, `${what}: check threw ${e.message}`, sc);
            }
        }
        return result;
    }
}

async function everyTool(s, mode) {
    const writable = mode !== 'read-only';
    const persistent = s.flags.includes('persistent');
    const c = s.call.bind(s);

    // bash
    await c('bash', { command: 'echo hi', description: 'say hi' }, 'ok', { check: (_, sc) => sc.text === 'hi\n' });
    await c('bash', { description: 'no command' }, 'error', { code: 'INVALID_ARGS' });
    await c('bash', { command: 'echo x' }, 'error', { code: 'INVALID_ARGS', label: 'error missing description' });
    // One-shot: exitCode 3. Persistent: the shell itself exits and is reset (shellReset).
    await c('bash', { command: 'exit 3', description: 'fail' }, 'any',
        { check: (_, sc) => (persistent ? sc.shellReset === true : sc.exitCode === 3) });
    await c('bash', { command: '(exit 4)', description: 'fail' }, 'any', { check: (_, sc) => sc.exitCode === 4 });
    await c('bash', { command: 'touch made-by-bash', description: 'touch' }, 'any');
    await c('bash', { command: 'sleep 5', description: 'slow', timeout_ms: 300 }, 'any', { check: (_, sc) => sc.timedOut === true });
    await c('bash', { command: 'echo x', description: 'x', timeout_ms: 'soon' }, 'error', { code: 'INVALID_ARGS' });
    if (!writable) {
        await c('bash', { command: 'touch esc', description: 'x', sandbox_permissions: 'workspace-write', justification: 'x' },
            'error', { code: 'APPROVAL_UNAVAILABLE', label: 'error escalation without elicitation' });
    }
    await c('bash', { command: 'echo out; echo err >&2; head -c 70000 /dev/zero | tr "\\0" a', description: 'big' }, 'any');
    if (persistent) {
        await c('bash', { command: 'cd sub && export DSH_T=42', description: 'cd' }, 'ok');
        await c('bash', { command: 'echo "$PWD $DSH_T"', description: 'carry' }, 'ok',
            { check: (_, sc) => sc.text === `${s.ws}/sub 42\n` });
        await c('bash', { command: 'cd ..', description: 'back' }, 'ok');
    }

    // jobs: one-shot bash starts them with run_in_background; persistent bash refuses that, so there they are
    // sends typed into a terminal with run_in_background.
    let jobPty;
    if (persistent) {
        await c('bash', { command: 'sleep 0.2; echo bg', description: 'bg', run_in_background: true }, 'error',
            { code: 'INVALID_ARGS', label: 'error run_in_background under persistent bash' });
        jobPty = (await c('terminal_open', { type: 'shell', name: 'jobs' }, 'ok'))?.structuredContent?.sessionId;
    }
    const startJob = async (command) => {
        const r = persistent
            ? await c('terminal_send', { sessionId: jobPty, text: command, run_in_background: true }, 'ok')
            : await c('bash', { command, description: 'bg', run_in_background: true }, 'ok');
        return r?.structuredContent?.jobId || 'unknown';
    };
    const quick = await startJob('sleep 0.2; echo bg');
    await c('job_output', { job_id: quick, wait: true, timeout_ms: 10000 }, 'ok', { check: (_, sc) => sc.output.includes('bg') });
    await c('job_output', { job_id: 'bash-99' }, 'error', { code: 'NO_JOB' });
    await c('job_output', {}, 'error', { code: 'INVALID_ARGS' });
    if (persistent) await c('terminal_send', { sessionId: jobPty, text: '', timeout_ms: 5000 }, 'any', { label: 'wait for the prompt' });
    const slow = await startJob('sleep 30');
    await c('job_list', {}, 'ok', { check: (_, sc) => sc.jobs.length === 2 });
    await c('job_list', { unexpected: 1 }, 'any');
    await c('job_kill', { job_id: slow, reason: 'done' }, 'ok');
    await c('job_kill', { job_id: slow }, 'any', { label: 'kill an ended job' });
    await c('job_kill', { job_id: 'bash-99' }, 'error', { code: 'NO_JOB' });
    await c('job_kill', {}, 'error', { code: 'INVALID_ARGS' });
    await c('job_output', { job_id: slow }, 'ok');
    if (persistent) await c('terminal_close', { sessionId: jobPty }, 'ok');

    // read
    await c('read', { file_path: 'hello.txt' }, 'ok', { check: (_, sc) => sc.lines === 3 });
    await c('read', { file_path: 'hello.txt', offset: 2, limit: 1 }, 'ok');
    await c('read', { file_path: 'missing.txt' }, 'error', { code: 'FS_NOT_FOUND' });
    await c('read', { file_path: 'sub' }, 'error', { label: 'error read a directory' });
    await c('read', {}, 'error', { code: 'INVALID_ARGS' });
    await c('read', { file_path: 'hello.txt', offset: -1 }, 'error', { code: 'INVALID_ARGS' });
    await c('read', { file_path: '/etc/hostname' }, 'any', { label: 'read outside the workspace' });

    // write and edit
    if (writable) {
        await c('write', { file_path: 'new.txt', content: 'one\ntwo\n' }, 'ok', { check: (_, sc) => sc.operation === 'create' });
        await c('write', { file_path: 'new.txt', content: 'one\ntwo\nthree\n' }, 'any', { label: 'overwrite (read since its write)' });
        await c('read', { file_path: 'new.txt' }, 'ok');
        await c('write', { file_path: 'new.txt', content: 'uno\ntwo\nthree\n' }, 'ok', { check: (_, sc) => sc.operation === 'update' });
        await c('edit', { file_path: 'new.txt', old_string: 'two', new_string: 'dos' }, 'ok', { check: (_, sc) => sc.replaced === 1 });
        await c('edit', { file_path: 'new.txt', old_string: 'absent', new_string: 'x' }, 'error');
        await c('read', { file_path: 'hello.txt' }, 'ok');
        await c('edit', { file_path: 'hello.txt', old_string: 'alpha', new_string: 'x' }, 'error', { label: 'error not unique' });
        await c('edit', { file_path: 'hello.txt', old_string: 'alpha', new_string: 'omega', replace_all: true }, 'ok',
            { check: (_, sc) => sc.replaced === 2 });
        await c('write', { file_path: '/etc/dsh-every-tool', content: 'x' }, 'error', { code: 'FS_SANDBOX_DENIED' });
    } else {
        await c('write', { file_path: 'new.txt', content: 'x' }, 'error', { code: 'FS_SANDBOX_DENIED' });
        await c('read', { file_path: 'hello.txt' }, 'ok');
        await c('edit', { file_path: 'hello.txt', old_string: 'beta', new_string: 'gamma' }, 'error', { code: 'FS_SANDBOX_DENIED' });
    }
    fs.writeFileSync(path.join(s.ws, 'unread.txt'), 'never read\n');
    await c('edit', { file_path: 'unread.txt', old_string: 'never', new_string: 'now' }, 'error',
        { code: writable ? 'FS_NOT_OBSERVED' : undefined, label: 'error edit an unread file' });
    await c('edit', { file_path: 'hello.txt' }, 'error', { code: 'INVALID_ARGS' });
    await c('write', { file_path: 'x.txt' }, 'error', { code: 'INVALID_ARGS' });

    // glob and grep
    await c('glob', { pattern: '*.txt' }, 'ok', { check: (_, sc) => sc.total >= 1 });
    await c('glob', { pattern: '*.nothing' }, 'ok', { check: (_, sc) => sc.total === 0 });
    await c('glob', {}, 'error', { code: 'INVALID_ARGS' });
    await c('glob', { pattern: '*', path: 'no-such-dir' }, 'error');
    await c('grep', { pattern: 'beta|omega' }, 'ok');
    await c('grep', { pattern: 'fn main', include: '*.rs' }, 'ok', { check: (_, sc) => sc.matches === 1 });
    await c('grep', { pattern: '(' }, 'error');
    await c('grep', {}, 'error', { code: 'INVALID_ARGS' });

    // read_image
    await c('read_image', { file_path: 'img.png' }, 'ok', { check: (r, sc) => sc.mimeType === 'image/png' && r.content.some((b) => b.type === 'image') });
    await c('read_image', { file_path: 'missing.png' }, 'error');
    await c('read_image', { file_path: 'hello.txt' }, 'error', { label: 'error not an image' });
    await c('read_image', {}, 'error', { code: 'INVALID_ARGS' });

    // terminals
    // Under persistent bash the session's own shell is listed too.
    const before = (await c('terminal_list', {}, 'ok'))?.structuredContent?.sessions?.length ?? 0;
    const opened = await c('terminal_open', { type: 'shell', name: 'main' }, 'ok');
    const pty = opened?.structuredContent?.sessionId || 'pty-1';
    await c('terminal_open', { type: 'nope' }, 'error', { code: 'NO_BACKEND' });
    await c('terminal_open', {}, 'error', { code: 'INVALID_ARGS' });
    await c('terminal_open', { type: 'shell', name: 'main' }, 'error', { label: 'error a duplicate name' });
    await c('terminal_list', {}, 'ok', { check: (_, sc) => sc.sessions.length === before + 1 });
    await c('terminal_list', { bogus: true }, 'any');
    await c('terminal_send', { sessionId: pty, text: 'echo term-ok', timeout_ms: 10000 }, 'ok',
        { check: (_, sc) => sc.text.includes('term-ok') });
    await c('terminal_send', { sessionId: pty, text: 'sleep 0.3; echo later', run_in_background: true }, 'ok',
        { check: (_, sc) => typeof sc.jobId === 'string' });
    await c('terminal_send', { sessionId: 'pty-99', text: 'x' }, 'error');
    await c('terminal_send', { sessionId: pty }, 'error', { code: 'INVALID_ARGS' });
    await c('terminal_read', { sessionId: pty }, 'ok');
    await c('terminal_read', { sessionId: pty, offset: 1, count: 2 }, 'ok');
    await c('terminal_read', { sessionId: 'pty-99' }, 'error');
    await c('terminal_read', {}, 'error', { code: 'INVALID_ARGS' });
    await c('terminal_send', { sessionId: pty, text: 'sleep 20', timeout_ms: 300 }, 'any', { label: 'a send that times out' });
    await c('terminal_signal', { sessionId: pty, signal: 'SIGINT' }, 'ok');
    await c('terminal_signal', { sessionId: pty, signal: 'SIGFOO' }, 'error', { code: 'INVALID_ARGS' });
    await c('terminal_signal', { sessionId: 'pty-99', signal: 'SIGINT' }, 'error');
    await c('terminal_signal', { sessionId: pty }, 'error', { code: 'INVALID_ARGS' });
    await c('job_list', {}, 'ok');
    await c('terminal_close', { sessionId: pty }, 'ok');
    await c('terminal_close', { sessionId: pty }, 'any', { label: 'close twice' });
    await c('terminal_close', { sessionId: 'pty-99' }, 'error');
    await c('terminal_close', {}, 'error', { code: 'INVALID_ARGS' });
    await c('terminal_read', { sessionId: pty }, 'any', { label: 'read a closed terminal' });
    await c('terminal_send', { sessionId: pty, text: 'x' }, 'error', { label: 'error send to a closed terminal' });
    await c('terminal_list', {}, 'ok');
}

async function main() {
    fs.mkdirSync(SCRATCH, { recursive: true });
    const sessions = [
        ['read-only', ['--mode', 'read-only']],
        ['workspace-write', ['--mode', 'workspace-write']],
        ['persistent-bash', ['--mode', 'workspace-write', '--bash', 'persistent']],
    ];
    for (const [name, flags] of sessions) {
        const s = new Session(name, workspace(name), flags);
        try {
            await s.open();
            const mode = flags[flags.indexOf('--mode') + 1];
            await everyTool(s, mode);
        } catch (e) {
            s.fail('(session)', 'aborted', String(e && e.stack || e));
            if (s.stderr) console.error(s.stderr);
        } finally {
            await s.close().catch(() => {});
        }
    }
    for (const t of TOOLS) {
        const n = seen[t] || { ok: 0, error: 0 };
        if (n.ok === 0) failures.push(`[${LABEL}] ${t}: no successful call`);
        if (n.error === 0 && !NO_ERROR_PATH.has(t)) failures.push(`[${LABEL}] ${t}: no error result`);
    }
    const perTool = TOOLS.map((t) => `${t}=${(seen[t] || {}).ok || 0}/${(seen[t] || {}).error || 0}`).join(' ');
    console.log(`[${LABEL} ${sdk.version}] per tool (ok/error): ${perTool}`);
    if (failures.length) {
        console.error(`${LABEL}: ${failures.length} failure(s):`);
        for (const f of failures) console.error(`  ${f}`);
        console.log(`${LABEL}: FAILED (${validated} calls returned, ${failures.length} failures)`);
        process.exit(1);
    }
    console.log(`${LABEL}: ${validated} calls validated`);
}

main().catch((e) => {
    console.error(`[${LABEL}] aborted: ${e && e.stack || e}`);
    process.exit(1);
});
