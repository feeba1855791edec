// The cordis plugin `dsh-native/harness` in a real composition: it is
// `ctx.shell`, it reads the shell settings the published executor reads
// (including changes at run time), its background processes survive a
// reload of the plugin and are stopped and awaited when the composition
// that owns `ctx.subprocess` tears down, and the published subprocess
// runtime keeps working beside it.
import test from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

import NativeShellPlugin from '../../bindings-node/harness.mjs'
import { seam } from './seam.mjs'

const { Context } = await seam('@deepseek-ai/cordis')
const { default: LocalSubprocessRuntime } = await seam('@deepseek-ai/dsh-subprocess-local')
const { SettingsProvider } = await seam('@deepseek-ai/dsh-settings')
const { ShellExecutor, SHELL_SETTINGS_NAMESPACE } = await seam('@deepseek-ai/dsh-shell')

const require = createRequire(import.meta.url)
const { alive, eventually } = require('./helpers.js')

/** A settings provider that keeps its document in memory. */
class MemorySettings extends SettingsProvider {
  writable = true
  constructor(ctx, doc = {}) {
    super(ctx)
    this.doc = doc
  }
  async load() {
    return this.doc
  }
  async persist() {}
}

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-harness-'))
}

async function compose({ settings, config } = {}) {
  const root = new Context()
  if (settings) await root.plugin(MemorySettings, settings)
  const subprocess = await root.plugin(LocalSubprocessRuntime)
  const shell = await root.plugin(NativeShellPlugin, config ?? {})
  await eventually(() => root.shell !== undefined)
  return { root, subprocess, shell }
}

async function readUntil(proc, needle) {
  let seen = ''
  const ok = await eventually(() => {
    seen += proc.readOutput().delta
    return seen.includes(needle)
  })
  assert.ok(ok, `never saw ${needle}: ${seen}`)
  return seen
}

test('it is ctx.shell: a ShellExecutor with the seam methods', async () => {
  const dir = tmpdir()
  const { root } = await compose({ config: { cwd: dir } })
  try {
    assert.ok(root.shell instanceof ShellExecutor)
    assert.equal(root.shell.sandboxMode, undefined)
    const spec = root.shell.resolve({ command: 'pwd; echo err >&2; exit 3' })
    assert.deepEqual(spec, { command: 'pwd; echo err >&2; exit 3', workdir: dir, timeoutMs: 120000, stdoutMaxBytes: 64000, sandboxPolicy: undefined })
    const r = await root.shell.run(spec)
    assert.deepEqual([r.exitCode, r.signal, r.timedOut, r.aborted, r.stdout.text, r.stderr.text], [3, null, false, false, `${dir}\n`, 'err\n'])
  } finally {
    await root.fiber.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('limits in the plugin config reach every command, and the result says which ended it', async () => {
  const { root } = await compose({ config: { limits: { cpuSeconds: 1, openFiles: 64 } } })
  try {
    const spec = root.shell.resolve({ command: 'while :; do :; done', timeoutMs: 60000 })
    assert.deepEqual(spec.limits, { cpuSeconds: 1, openFiles: 64 })
    const r = await root.shell.run(spec)
    assert.deepEqual([r.limit, r.signal, r.timedOut], ['cpu', 'SIGXCPU', false])
    assert.deepEqual(r.limitsEnforcement, { cpu: 'rlimit', open_files: 'rlimit' })
  } finally {
    await root.fiber.dispose()
  }
})

test('a bad plugin config is refused where it is written, naming the field', async () => {
  const root = new Context()
  await root.plugin(LocalSubprocessRuntime)
  try {
    await assert.rejects(
      async () => await root.plugin(NativeShellPlugin, { graceMs: 2 ** 31 }),
      (e) => e.code === 'INVALID_ARGUMENT' && e.field === 'config.graceMs' && /graceMs must be no greater than 2147483647/.test(e.message),
    )
    assert.equal(root.shell, undefined, 'a refused config must not provide ctx.shell')
  } finally {
    await root.fiber.dispose()
  }
})

test('settings: the shell section reaches it, and a change at run time applies to the next command', async () => {
  const dir = tmpdir()
  const { root } = await compose({ settings: { shell: { cwd: dir, timeoutMs: 7000 } } })
  try {
    await eventually(() => root.shell.resolve({ command: 'true' }).timeoutMs === 7000)
    assert.equal(root.shell.resolve({ command: 'true' }).workdir, dir)
    assert.equal(root.shell.config.timeoutMs, 7000)

    await root.settings.update(SHELL_SETTINGS_NAMESPACE, { maxOutputBytes: 4, timeoutMs: 900 })
    const spec = root.shell.resolve({ command: 'printf abcdefgh' })
    assert.deepEqual([spec.timeoutMs, spec.stdoutMaxBytes, spec.workdir], [900, 4, dir])
    const r = await root.shell.run(spec)
    assert.deepEqual([r.stdout.text, r.stdout.truncated], ['efgh', true])

    // A value the executor cannot run with is refused at the write, and the
    // last good section stays in force.
    await assert.rejects(root.settings.update(SHELL_SETTINGS_NAMESPACE, { graceMs: -1 }), /graceMs/)
    assert.equal(root.shell.resolve({ command: 'true' }).timeoutMs, 900)
  } finally {
    await root.fiber.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('lifetime: a background process survives a reload of the plugin and dies with the composition', async () => {
  const { root, shell } = await compose()
  const proc = root.shell.start(root.shell.resolve({ command: 'echo $$; exec sleep 300' }))
  const pid = Number((await readUntil(proc, '\n')).trim())
  assert.ok(alive(pid))

  await shell.dispose() // an executor-only reload
  await eventually(() => root.shell === undefined)
  assert.equal(proc.status, 'running')
  assert.ok(alive(pid), 'an executor-only reload must not stop background processes')

  await root.plugin(NativeShellPlugin, { timeoutMs: 5000 })
  await eventually(() => root.shell !== undefined)
  assert.equal(root.shell.resolve({ command: 'true' }).timeoutMs, 5000, 'the reloaded plugin runs with its new config')

  await root.fiber.dispose() // the composition (and ctx.subprocess) tears down
  assert.equal(proc.status, 'killed', 'teardown stops it and awaits it before returning')
  assert.equal(alive(pid), false)
})

test('lifetime: disposing ctx.subprocess alone stops and awaits the native processes', async () => {
  const { root, subprocess } = await compose()
  try {
    const proc = root.shell.start(root.shell.resolve({ command: 'trap "" TERM; echo ready; exec sleep 300' }))
    await readUntil(proc, 'ready')
    await subprocess.dispose()
    assert.notEqual(proc.status, 'running')
    await proc.done
  } finally {
    await root.fiber.dispose()
  }
})

test('it coexists with the published subprocess runtime in the same context', async () => {
  const { root } = await compose()
  try {
    const handle = root.subprocess.spawn({
      argv: ['bash', '-c', 'echo from-subprocess'],
      cwd: os.tmpdir(),
      stdio: { stdin: 'ignore', stdout: { maxBytes: 1000 }, stderr: { maxBytes: 1000 } },
      graceMs: 1000,
    })
    const [outcome, r] = await Promise.all([handle.done, root.shell.run(root.shell.resolve({ command: 'echo from-shell' }))])
    assert.equal(outcome.exitCode, 0)
    assert.equal(handle.collected.stdout.readFrom(0).text, 'from-subprocess\n')
    assert.equal(r.stdout.text, 'from-shell\n')
  } finally {
    await root.fiber.dispose()
  }
})

test('a second provider of ctx.shell is refused, as the seam says', async () => {
  const { root } = await compose()
  try {
    await assert.rejects(async () => await root.plugin(NativeShellPlugin, {}), /service "shell" has been registered/)
    const r = await root.shell.run(root.shell.resolve({ command: 'echo still-here' }))
    assert.equal(r.stdout.text, 'still-here\n', 'the first provider keeps working')
  } finally {
    await root.fiber.dispose()
  }
})

test("onExpiry 'background' through ctx.shell: the handed-over process is reachable by get(id) and ends with the composition", async () => {
  const { root } = await compose()
  let pid
  try {
    const spec = root.shell.resolve({ command: 'echo $$; read -r a; echo "got $a"; exec sleep 60', timeoutMs: 100, onExpiry: 'background', stdin: { pipe: true } })
    const r = await root.shell.run(spec)
    assert.equal(r.timedOut, true)
    assert.equal(r.aborted, false)
    assert.match(r.backgroundId, /^bash-\d+$/)
    pid = Number(r.stdout.text.trim())
    assert.ok(alive(pid))
    const task = root.shell.get(r.backgroundId)
    assert.equal(task.id, r.backgroundId)
    assert.equal(task.command, spec.command)
    assert.equal(task.status, 'running')
    await task.writeStdin('yes\n')
    await readUntil(task, 'got yes\n')
  } finally {
    await root.fiber.dispose()
  }
  assert.ok(!alive(pid), 'the handed-over process outlived the composition')
})
