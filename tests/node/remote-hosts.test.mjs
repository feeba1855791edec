// Two remote executors in one host (docs/remote.md, "Two hosts in one
// harness"): each has its transport, its far-side executor and its
// registry, so ids repeat, configuration is each one's own, and ending one
// (disposing it, or losing its connection) leaves the other's processes
// running.

import test from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { sshdMissing, startSshd, shellQuote } from './sshd.mjs'

const { alive, eventually, tmpdir } = createRequire(import.meta.url)('./helpers.js')
const { RemoteShellExecutor } = await import(new URL('../../bindings-node/remote.mjs', import.meta.url).href)

const DSH_BIN = process.env.DSH_BIN ?? fileURLToPath(new URL('../../target/debug/dsh', import.meta.url))
const skip = fs.existsSync(DSH_BIN) ? sshdMissing() : `no dsh binary at ${DSH_BIN} (cargo build -p dsh-cli --bin dsh, or set DSH_BIN)`
const T = { timeout: 60_000, skip }

/** One executor over a pipe to `dsh serve --stdio`, one over ssh (its
 * client's pid written to `sshPid`): two hosts, each with a workdir of its own. */
async function twoHosts() {
  const sshd = await startSshd()
  const [a, b] = [tmpdir(), tmpdir()]
  const sshPid = path.join(b, 'ssh.pid')
  const ssh = ['sh', '-c', `echo $$ > ${shellQuote(sshPid)}; exec "$@"`, 'sh', ...sshd.argv(`${shellQuote(DSH_BIN)} serve --stdio`)]
  const build = await RemoteShellExecutor.connect({ transport: { command: [DSH_BIN, 'serve', '--stdio'] }, config: { cwd: a, graceMs: 300 } })
  const check = await RemoteShellExecutor.connect({ transport: { command: ssh, reconnect: false }, config: { cwd: b, graceMs: 300 } })
  return { build, check, sshPid, dispose: () => Promise.allSettled([build.dispose(), check.dispose()]) }
}

/** The process's output up to its first newline, once it came. */
async function firstLine(p) {
  let seen = ''
  const got = await eventually(() => (seen += p.readOutput().delta).includes('\n'), 20_000)
  assert.ok(got, `no line from ${p.id}: ${JSON.stringify(seen)}`)
  return seen.split('\n')[0]
}

/** Starts `command` after printing its shell's pid; returns that pid. */
async function pidOf(ex, command) {
  return Number(await firstLine(ex.start(ex.resolve({ command: `echo $$; exec ${command}` }))))
}

test('each host has its own registry and configuration', T, async () => {
  const { build, check, dispose } = await twoHosts()
  try {
    const a = build.start(build.resolve({ command: 'pwd; sleep 30' }))
    const b = check.start(check.resolve({ command: 'pwd; sleep 30' }))
    assert.equal(a.id, 'bash-1')
    assert.equal(b.id, 'bash-1', 'ids are per executor')
    assert.notEqual(await firstLine(a), await firstLine(b), 'both ran in one workdir')
    build.kill('bash-1')
    await a.done
    assert.equal(a.status, 'killed')
    assert.equal(check.get('bash-1')?.status, 'running', 'a kill on one host reached the other')
  } finally {
    await dispose()
  }
})

test('ending one host leaves the other running', T, async () => {
  const { build, check, dispose } = await twoHosts()
  try {
    const gone = await pidOf(build, 'sleep 300')
    const stays = await pidOf(check, 'sleep 300')
    await build.dispose()
    assert.ok(await eventually(() => !alive(gone), 10_000), "the disposed host's process outlived it")
    assert.ok(alive(stays))
    const r = await check.run(check.resolve({ command: 'echo still here' }))
    assert.equal(r.stdout.text, 'still here\n')
  } finally {
    await dispose()
  }
})

test('a lost connection to one host leaves the other running', T, async () => {
  const { build, check, sshPid, dispose } = await twoHosts()
  try {
    const dropped = await pidOf(check, 'sleep 300')
    const stays = await pidOf(build, 'sleep 300')
    // The ssh client of the second host dies: its far side ends everything.
    process.kill(Number(fs.readFileSync(sshPid, 'utf8')), 'SIGKILL')
    assert.ok(await eventually(() => !alive(dropped), 10_000), "the dropped host's process outlived its connection")
    assert.ok(alive(stays))
    const r = await build.run(build.resolve({ command: 'echo fine' }))
    assert.equal(r.stdout.text, 'fine\n')
  } finally {
    await dispose()
  }
})
