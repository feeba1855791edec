// The model-facing `bash` tool end to end, with the native plugin as
// ctx.shell: a cordis composition of the published harness packages —
// dsh-subprocess-local (ctx.subprocess), dsh-system-prompt, dsh-tools
// (ctx.tools), dsh-shell-env (ctx.shellEnv), dsh-jobs-local (ctx.jobs),
// dsh-tool-jobs (job_output / job_kill) and dsh-tool-bash — with
// dsh-native/harness where dsh-bash-local would be. No stand-ins: every
// service tool-bash injects has a published provider here.

import test, { after, before } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { seam, harnessUrl } from './seam.mjs'

const { Context } = await seam('@deepseek-ai/cordis')
const { default: LocalSubprocessRuntime } = await seam('@deepseek-ai/dsh-subprocess-local')
const { default: SystemPrompt } = await seam('@deepseek-ai/dsh-system-prompt')
const { default: ToolRuntime } = await seam('@deepseek-ai/dsh-tools')
const ShellEnv = await seam('@deepseek-ai/dsh-shell-env')
const { default: LocalJobRegistry } = await seam('@deepseek-ai/dsh-jobs-local')
const ToolJobs = await seam('@deepseek-ai/dsh-tool-jobs')
const ToolBash = await seam('@deepseek-ai/dsh-tool-bash')
const { default: NativeShellPlugin } = await import(harnessUrl)
// DSH_PARITY_SUBPROCESS=native: the same composition over our ctx.subprocess.
const SUBPROCESS = process.env.DSH_PARITY_SUBPROCESS === 'native'
  ? (await import(new URL('../../bindings-node/subprocess.mjs', import.meta.url).href)).default
  : LocalSubprocessRuntime

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-tool-bash-'))
const workspace = path.join(base, 'workspace')
const dshHome = path.join(base, 'home')
fs.mkdirSync(workspace)
let root

before(async () => {
  root = new Context()
  await root.plugin(SUBPROCESS)
  await root.plugin(SystemPrompt)
  await root.plugin(ToolRuntime)
  await root.plugin(ShellEnv, { dshHome })
  await root.plugin(LocalJobRegistry)
  await root.plugin(ToolJobs)
  await root.plugin(NativeShellPlugin, { cwd: workspace, graceMs: 300, maxOutputBytes: 100 })
  await root.plugin(ToolBash)
})

after(async () => {
  await root.fiber.dispose()
  fs.rmSync(base, { recursive: true, force: true })
})

let calls = 0
/** One tool call, as the agent loop makes it (no agent: a host-level call). */
function call(name, args, signal = new AbortController().signal) {
  return root.tools.execute({ callId: `call-${++calls}`, name, arguments: args, signal })
}
const text = (result) => {
  assert.equal(result.content.length, 1)
  return result.content[0].text
}

/** Reads a job through job_output until `needle` has arrived (no event tells us). */
async function jobOutputUntil(jobId, needle) {
  let seen = ''
  const end = Date.now() + 20000
  while (Date.now() < end) {
    const r = await call('job_output', { job_id: jobId })
    assert.equal(r.isError, false, text(r))
    seen += r.value.text
    if (seen.includes(needle)) return seen
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`job ${jobId} never printed ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
}

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return !'ZX'.includes(stat.slice(stat.lastIndexOf(')') + 2)[0])
  } catch {
    return false
  }
}

test('the native plugin is ctx.shell, and the bash and job tools are registered', () => {
  assert.ok(root.shell instanceof NativeShellPlugin)
  assert.equal(root.shell.sandboxMode, undefined)
  for (const name of ['bash', 'job_output', 'job_kill']) assert.ok(root.tools.get(name), name)
})

test('foreground: stdout, a [stderr] section, the exit marker and the managed DSH_* variables', async () => {
  process.env.DSH_SESSION_ID = 'stale-from-the-host'
  try {
    const r = await call('bash', {
      command: 'pwd; echo "$DSH_SHELL $DSH_HOME ${DSH_SESSION_ID-none}"; echo warn >&2; exit 3',
      description: 'Print the workspace and fail',
    })
    assert.equal(r.isError, false)
    assert.equal(text(r), `${workspace}\n1 ${dshHome} none\n[stderr]\nwarn\n[exit code: 3]`)
    assert.deepEqual(r.value, {
      kind: 'foreground',
      exitCode: 3,
      signal: null,
      timedOut: false,
      aborted: false,
      timeoutMs: 120000,
      stdout: { text: `${workspace}\n1 ${dshHome} none\n`, truncated: false },
      stderr: { text: 'warn\n', truncated: false },
    })
  } finally {
    delete process.env.DSH_SESSION_ID
  }
})

test('foreground: a relative workdir is resolved against the workspace', async () => {
  fs.mkdirSync(path.join(workspace, 'sub'), { recursive: true })
  const r = await call('bash', { command: 'pwd', description: 'Print the directory', workdir: 'sub' })
  assert.equal(text(r), `${path.join(workspace, 'sub')}\n`)
})

test('foreground: truncated output names the spill file that holds all of it', async () => {
  const r = await call('bash', { command: 'seq 1 1000', description: 'Count to a thousand' })
  const full = Array.from({ length: 1000 }, (_, i) => `${i + 1}\n`).join('')
  assert.equal(r.value.stdout.truncated, true)
  assert.equal(r.value.stdout.text, full.slice(-100))
  const m = /\n\[output truncated; full output: (\/[^\]]+)\]$/.exec(text(r))
  assert.ok(m, text(r))
  assert.equal(m[1], r.value.stdout.spillPath)
  assert.equal(fs.readFileSync(m[1], 'utf8'), full)
})

test('foreground: a timeout is reported with the signal that ended the command', async () => {
  const r = await call('bash', { command: 'echo before; sleep 30', description: 'Sleep too long', timeoutMs: 300 })
  assert.equal(r.isError, false)
  assert.equal(text(r), 'before\n[timed out after 300ms]\n[killed by signal: SIGTERM]')
})

test('foreground: aborting the tool call kills the command and is an error result', async () => {
  const started = path.join(base, 'started')
  const ac = new AbortController()
  const pending = call('bash', { command: `echo $$ > ${started}.tmp; mv ${started}.tmp ${started}; sleep 30`, description: 'Wait to be aborted' }, ac.signal)
  await new Promise((resolve) => {
    const watcher = fs.watch(base, () => fs.existsSync(started) && (watcher.close(), resolve()))
    if (fs.existsSync(started)) watcher.close(), resolve()
  })
  const pid = Number(fs.readFileSync(started, 'utf8'))
  ac.abort()
  const r = await pending
  assert.equal(r.isError, true)
  assert.equal(alive(pid), false, 'the command is gone once the call settles')
})

test('background: start, read incrementally, kill, and read the ending', async () => {
  const started = await call('bash', { command: 'echo $$; echo up; sleep 30', description: 'Run a server', run_in_background: true })
  assert.equal(started.isError, false)
  assert.equal(started.value.kind, 'background')
  const jobId = started.value.jobId
  assert.equal(text(started), `started background job ${jobId}`)

  const first = await jobOutputUntil(jobId, 'up\n')
  const pid = Number(first.split('\n')[0])
  assert.ok(alive(pid))
  const idle = await call('job_output', { job_id: jobId })
  assert.equal(text(idle), '(no new output)\n[status: running]', 'reads never repeat output')

  const killed = await call('job_kill', { job_id: jobId })
  assert.equal(killed.isError, false)
  assert.equal(text(killed), `requested cancellation of job ${jobId}`)
  const ending = await call('job_output', { job_id: jobId, wait: true })
  assert.equal(text(ending), '(no new output)\n[status: killed, signal: SIGTERM]')
  assert.equal(ending.value.job.status, 'killed')
  assert.equal(alive(pid), false)
  const again = await call('job_kill', { job_id: jobId })
  assert.equal(again.value.outcome, 'already-finished')
})

test('background: a job that finishes reports its output, [stderr] section and exit code', async () => {
  const started = await call('bash', { command: 'echo done; echo err >&2; exit 2', description: 'Finish with an error', run_in_background: true })
  const ending = await call('job_output', { job_id: started.value.jobId, wait: true })
  assert.equal(text(ending), 'done\n[stderr]\nerr\n[status: completed, exit code: 2]')
})

test('background: a lossy read names the spill file', async () => {
  const started = await call('bash', { command: 'seq 1 1000 >&2', description: 'Flood stderr', run_in_background: true })
  const ending = await call('job_output', { job_id: started.value.jobId, wait: true })
  const full = Array.from({ length: 1000 }, (_, i) => `${i + 1}\n`).join('')
  const m = /^\[stderr\]\n([\s\S]*)\n\[some output was dropped from memory; full output: (\/[^\]]+)\]\n\[status: completed, exit code: 0\]$/.exec(text(ending))
  assert.ok(m, text(ending))
  assert.equal(m[1], full.slice(-100).replace(/\n$/, ''))
  assert.equal(fs.readFileSync(m[2], 'utf8'), full)
})
