// Parity of `ctx.subprocess`: every case runs through the published provider
// (`@deepseek-ai/dsh-subprocess-local`) and through ours
// (`dsh-native/subprocess`), each in a Context of its own, and the two
// outcomes are compared field by field.
//
// A case matches exactly, or names the documented difference it shows
// (`differs.id`, a section of docs/compat.md under "The subprocess
// provider") and pins down what each side does: most are cases where the
// published provider is wrong (a tree it reports gone while a member lives,
// members its terminate leaves running). The doc's list and this table's are
// checked against each other at the end.

import test, { after } from 'node:test'
import assert from 'node:assert/strict'
import { AsyncLocalStorage } from 'node:async_hooks'
import { spawn as spawnChild } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

import { seam, seamUrl } from './seam.mjs'

const { alive, comm, eventually } = createRequire(import.meta.url)('./helpers.js')

// The published provider needs Node 22 (`Promise.withResolvers`); ours
// does not. On an older Node, the test gives the published one what it needs.
Promise.withResolvers ??= function withResolvers() {
  let resolve
  let reject
  const promise = new Promise((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

const { Context } = await seam('@deepseek-ai/cordis')
const { default: LocalSubprocessRuntime } = await seam('@deepseek-ai/dsh-subprocess-local')
const { scrubbedParentEnv } = await seam('@deepseek-ai/dsh-subprocess')
const subprocessUrl = new URL('../../bindings-node/subprocess.mjs', import.meta.url).href
const { default: NativeSubprocessRuntime } = await import(subprocessUrl)

const PROVIDERS = { published: LocalSubprocessRuntime, native: NativeSubprocessRuntime }
const PROVIDER_URLS = { published: seamUrl('@deepseek-ai/dsh-subprocess-local'), native: subprocessUrl }

const BASE = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-subparity-'))
const roots = []
const publishedSpills = new Set()

async function provider(impl) {
  const root = new Context()
  roots.push(root)
  await root.plugin(PROVIDERS[impl])
  return root
}

after(async () => {
  for (const root of roots) await root.fiber.dispose()
  for (const file of publishedSpills) fs.rmSync(path.dirname(file), { recursive: true, force: true })
  fs.rmSync(BASE, { recursive: true, force: true })
})

// ----------------------------------------------------------------- helpers

const GRACE = 300

/** A spec with everything explicit, as the seam wants it. */
function spec(argv, stdio = {}, extra = {}) {
  return {
    argv,
    cwd: BASE,
    stdio: { stdin: 'ignore', stdout: { maxBytes: 1 << 20 }, stderr: { maxBytes: 1 << 20 }, ...stdio },
    graceMs: GRACE,
    ...extra,
  }
}

const bash = (script, stdio, extra) => spec(['bash', '-c', script], stdio, extra)

/** What a collected read holds, with the spill file's contents for its path. */
function read(reader, from = 0) {
  const r = reader.readFrom(from)
  const out = { text: r.text, nextOffset: r.nextOffset, lossy: r.lossy }
  if (r.spillPath !== undefined) out.spill = fs.readFileSync(r.spillPath, 'utf8')
  return out
}

function remember(handle, impl) {
  if (impl !== 'published') return
  for (const reader of Object.values(handle.collected)) {
    const p = reader.readFrom(0).spillPath
    if (p !== undefined) publishedSpills.add(p)
  }
}

/** `done`, and every collected stream read from 0. */
async function settled(handle, impl) {
  const outcome = await handle.done
  remember(handle, impl)
  const reads = Object.fromEntries(Object.entries(handle.collected).map(([k, r]) => [k, read(r)]))
  return { outcome, ...reads }
}

/** `done`'s outcome, then what `waitForExit` with an aborted signal says. */
async function goneAfterDone(handle, impl) {
  const outcome = await handle.done
  remember(handle, impl)
  return { outcome, gone: await handle.waitForExit(AbortSignal.abort()) }
}

async function bytesOf(stream) {
  const chunks = []
  for await (const c of stream) chunks.push(c)
  return Buffer.concat(chunks)
}

/** A rejection or throw, reduced to what both sides can be held to. */
function failure(e) {
  const code = typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code) ? e.code : null
  return { rejected: true, code }
}

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex')

/** A program that leaves a setsid grandchild behind and prints its pid. */
const LEAVES_GRANDCHILD = 'setsid sleep 300 >/dev/null 2>&1 & echo $!'

async function grandchildOf(handle) {
  await handle.done
  const pid = Number(handle.collected.stdout.readFrom(0).text.trim())
  // Alive is not enough: until it has become `sleep` it may not have left
  // bash's group yet (setsid runs first), and a group kill would end it.
  assert.ok(await eventually(() => alive(pid) && comm(pid) === 'sleep'), 'the grandchild runs in its own session')
  return pid
}

// -------------------------------------------------------------------- cases

/**
 * A case: `exec(sp, h)` with `sp` the provider (`ctx.subprocess`) and `h`
 * `{ impl, root, dir }`. Options: `differs` ({ id, published, native }: a
 * documented difference, each side's value pinned), `expect` (the published
 * outcome, pinned).
 */
const CASES = []
const add = (c) => CASES.push(c)

add({
  name: 'exit code and collected streams',
  exec: async (sp, { impl }) => settled(sp.spawn(bash('echo out; printf err >&2; exit 3')), impl),
  expect: {
    outcome: { exitCode: 3, signal: null },
    stdout: { text: 'out\n', nextOffset: 4, lossy: false },
    stderr: { text: 'err', nextOffset: 3, lossy: false },
  },
})

add({
  name: 'a signal death',
  exec: async (sp, { impl }) => (await settled(sp.spawn(bash('kill -TERM $$')), impl)).outcome,
  expect: { exitCode: null, signal: 'SIGTERM' },
})

add({
  name: 'argv is never given to a shell',
  exec: async (sp, { impl }) => (await settled(sp.spawn(spec(['printf', '%s|', '$HOME', 'a; echo b', '*'])), impl)).stdout,
  expect: { text: '$HOME|a; echo b|*|', nextOffset: 18, lossy: false },
})

add({
  name: 'a window with a spill file',
  exec: async (sp, { impl }) =>
    settled(sp.spawn(bash('seq 1 3000', { stdout: { maxBytes: 1000, spill: { maxBytes: 1 << 20 } } })), impl),
})

add({
  name: 'a window without a spill file',
  exec: async (sp, { impl }) => settled(sp.spawn(bash('seq 1 3000', { stdout: { maxBytes: 500 } })), impl),
})

add({
  name: 'a stream past its spill cap keeps no file',
  exec: async (sp, { impl }) =>
    settled(sp.spawn(bash('seq 1 3000', { stdout: { maxBytes: 100, spill: { maxBytes: 2000 } } })), impl),
})

add({
  name: 'offset reads are non-consuming and resume',
  exec: async (sp, { impl }) => {
    const h = sp.spawn(bash('seq 1 200', { stdout: { maxBytes: 100000 } }))
    await h.done
    remember(h, impl)
    const r = h.collected.stdout
    const a = r.readFrom(0)
    const b = r.readFrom(0)
    const mid = r.readFrom(100)
    const end = r.readFrom(a.nextOffset)
    // Past the end, however far, reads nothing.
    const past = [r.readFrom(a.nextOffset + 1e6).text, r.readFrom(Infinity).text]
    return { same: a.text === b.text, mid: [mid.text.length, mid.nextOffset, mid.lossy], end: [end.text, end.nextOffset], past }
  },
})

add({
  name: 'a window whose start falls inside a character',
  // 'é' is two bytes: a 5-byte window over 'aéé' starts inside the first.
  exec: async (sp, { impl }) => (await settled(sp.spawn(bash("printf 'a\\303\\251\\303\\251\\303\\251'", { stdout: { maxBytes: 5 } })), impl)).stdout,
  differs: {
    id: 'utf8-window',
    published: (v) => assert.equal(v.text, '\ufffdéé'),
    native: (v) => assert.equal(v.text, 'éé'),
  },
})

add({
  name: 'binary bytes through a raw pipe',
  exec: async (sp, { dir }) => {
    const file = path.join(dir, 'blob')
    fs.writeFileSync(file, crypto.randomBytes(3 << 20))
    const h = sp.spawn(spec(['cat', file], { stdout: 'pipe' }))
    const got = await bytesOf(h.stdout)
    await h.done
    return { same: sha(got) === sha(fs.readFileSync(file)), length: got.length, collected: Object.keys(h.collected) }
  },
  expect: { same: true, length: 3 << 20, collected: ['stderr'] },
})

add({
  name: "a raw pipe's events run in the async context of the spawn that made it",
  exec: async (sp) => {
    const als = new AsyncLocalStorage()
    const seen = []
    await Promise.all(
      ['A', 'B', 'C'].map((id) =>
        als.run({ id }, async () => {
          const h = sp.spawn(bash('echo out; echo err >&2', { stdout: 'pipe', stderr: 'pipe' }))
          for (const s of [h.stdout, h.stderr]) {
            s.on('data', () => seen.push(`${id} data in ${als.getStore()?.id}`))
            s.on('end', () => seen.push(`${id} end in ${als.getStore()?.id}`))
          }
          await h.done
        }),
      ),
    )
    return seen.sort()
  },
  expect: ['A', 'B', 'C'].flatMap((id) => [`${id} data in ${id}`, `${id} data in ${id}`, `${id} end in ${id}`, `${id} end in ${id}`]).sort(),
})

add({
  name: 'raw pipes read one after the other: 72 KiB on stderr while stdout is read to its end',
  exec: async (sp) => {
    // A pipe read ahead from its making, as a socket is, up to the
    // stream's highWaterMark (16 KiB on Node 20, 64 on 22): the program
    // can write the pipe's 64 KiB and at least that much more before it
    // blocks. (Without the read-ahead it blocked past 64 KiB.)
    const h = sp.spawn(bash('head -c 73728 /dev/zero >&2; echo out', { stdout: 'pipe', stderr: 'pipe' }))
    const out = (await bytesOf(h.stdout)).toString()
    const err = (await bytesOf(h.stderr)).length
    return { out, err, outcome: await h.done }
  },
  expect: { out: 'out\n', err: 73728, outcome: { exitCode: 0, signal: null } },
})

add({
  name: '64 MiB through a raw pipe read slowly (back-pressure)',
  exec: async (sp) => {
    const h = sp.spawn(bash('head -c 67108864 /dev/zero', { stdout: 'pipe' }))
    let n = 0
    for await (const c of h.stdout) {
      n += c.length
      if (n < 1 << 20) await new Promise((r) => setTimeout(r, 5))
    }
    return { n, outcome: await h.done }
  },
  expect: { n: 67108864, outcome: { exitCode: 0, signal: null } },
})

add({
  name: 'done comes after the last bytes of a raw pipe',
  exec: async (sp) => {
    let short = 0
    for (let i = 0; i < 200; i++) {
      const h = sp.spawn(spec(['printf', 'hello'], { stdout: 'pipe' }))
      let got = ''
      h.stdout.on('data', (d) => (got += d))
      await h.done
      if (got !== 'hello') short += 1
    }
    return { short }
  },
  expect: { short: 0 },
})

add({
  name: 'what stdin data and a collected stdout are',
  exec: async (sp, { impl }) => {
    const probe = 'for f in /dev/stdin /dev/stdout; do if [ -p $f ]; then echo pipe; elif [ -S $f ]; then echo socket; else echo other; fi; done'
    return (await settled(sp.spawn(bash(probe, { stdin: { data: 'x' } })), impl)).stdout.text
  },
  differs: {
    id: 'provider-stdio-pipes',
    published: (v) => assert.equal(v, 'socket\nsocket\n'),
    native: (v) => assert.equal(v, 'pipe\npipe\n'),
  },
})

add({
  name: 'a listener on the host process exit',
  exec: async (_sp, { impl }) => {
    const before = process.listenerCount('exit')
    const root = new Context()
    await root.plugin(PROVIDERS[impl])
    const loaded = process.listenerCount('exit') - before
    await root.fiber.dispose()
    return { loaded, after: process.listenerCount('exit') - before }
  },
  serial: true,
  differs: {
    id: 'host-exit-listener',
    published: (v) => assert.deepEqual(v, { loaded: 1, after: 0 }),
    native: (v) => assert.deepEqual(v, { loaded: 0, after: 0 }),
  },
})

add({
  name: 'stdin data',
  exec: async (sp, { impl }) =>
    (await settled(sp.spawn(spec(['wc', '-c'], { stdin: { data: 'é'.repeat(50000) } })), impl)).stdout.text.trim(),
  expect: '100000',
})

add({
  name: 'a stdin pipe and a stdout pipe',
  exec: async (sp) => {
    const h = sp.spawn(spec(['cat'], { stdin: 'pipe', stdout: 'pipe' }))
    const out = bytesOf(h.stdout)
    h.stdin.write('one\n')
    h.stdin.end('two\n')
    return { out: (await out).toString(), outcome: await h.done, stdinOnly: [h.stdin !== undefined, h.stderr === undefined] }
  },
  expect: { out: 'one\ntwo\n', outcome: { exitCode: 0, signal: null }, stdinOnly: [true, true] },
})

add({
  name: 'the environment: scrubbed, then the spec over it',
  // It changes process.env: the two sides run one after the other.
  serial: true,
  exec: async (sp, { impl }) => {
    const vars = { DSHP_PLAIN: 'plain', DSHP_API_TOKEN: 'host-secret', DSH_PARITY_FACT: 'x', DSHP_REMOVED: 'gone' }
    Object.assign(process.env, vars)
    try {
      const h = sp.spawn(spec(['env', '-0'], {}, { env: { DSHP_GIVEN_SECRET: 'given', DSHP_REMOVED: undefined, DSH_GIVEN: 'y' } }))
      const env = {}
      for (const line of (await settled(h, impl)).stdout.text.split('\0')) {
        const eq = line.indexOf('=')
        if (line.startsWith('DSH')) env[line.slice(0, eq)] = line.slice(eq + 1)
      }
      const { DSH_EXEC_TAG, ...rest } = env
      return { env: rest, scrubMatchesTheSeam: Object.keys(scrubbedParentEnv()).filter((k) => k.startsWith('DSH')).sort() }
    } finally {
      for (const k of Object.keys(vars)) delete process.env[k]
    }
  },
  expect: { env: { DSHP_PLAIN: 'plain', DSHP_GIVEN_SECRET: 'given', DSH_GIVEN: 'y' }, scrubMatchesTheSeam: ['DSHP_PLAIN', 'DSHP_REMOVED'] },
})

add({
  name: 'resolveExecutable: bare, absolute, relative, missing, the first PATH hit as named',
  exec: async (sp, { dir }) => {
    const [a, b] = [path.join(dir, 'a'), path.join(dir, 'b')]
    fs.mkdirSync(a)
    fs.mkdirSync(b)
    fs.writeFileSync(path.join(b, 'tool'), '#!/bin/sh\n', { mode: 0o755 })
    fs.symlinkSync(path.join(b, 'tool'), path.join(a, 'tool'))
    fs.writeFileSync(path.join(a, 'plain'), '')
    // Entries as a user may write them: with `..` and `.`.
    const env = { PATH: `${a}/../a:${b}/.` }
    // The published provider's errors carry no code (ours do): compared as rejections.
    const attempt = (cmd, e) => sp.resolveExecutable(cmd, e).then((p) => p.replace(dir, '<dir>'), () => 'rejected')
    return {
      bash: (await sp.resolveExecutable('bash')) === (await sp.resolveExecutable('bash', { PATH: process.env.PATH })),
      tool: await attempt('tool', env),
      plain: await attempt('plain', env),
      relative: await attempt('./tool', env),
      missing: await attempt('nowhere-dsh', env),
      absolute: await attempt(path.join(b, 'tool')),
      aborted: await sp.resolveExecutable('bash', undefined, AbortSignal.abort()).then(() => 'resolved', () => 'rejected'),
    }
  },
  expect: {
    bash: true,
    tool: '<dir>/a/tool',
    plain: 'rejected',
    relative: 'rejected',
    missing: 'rejected',
    absolute: '<dir>/b/tool',
    aborted: 'rejected',
  },
})

add({
  name: 'a program that cannot start rejects done with pid -1',
  exec: async (sp) => {
    const h = sp.spawn(spec(['no-such-program-dsh'], { stdout: 'pipe' }))
    return { pid: h.pid, done: await h.done.then(() => 'resolved', failure) }
  },
  expect: { pid: -1, done: { rejected: true, code: 'ENOENT' } },
})

add({
  name: 'a program that cannot start refuses writes to its stdin',
  exec: async (sp) => {
    const h = sp.spawn(spec(['no-such-program-dsh'], { stdin: 'pipe', stdout: 'pipe' }))
    await h.done.catch(() => {})
    h.stdin.on('error', () => {})
    const refused = await new Promise((resolve) => h.stdin.write('x', (e) => resolve(e?.code ?? null)))
    return { refused }
  },
  expect: { refused: 'ERR_STREAM_DESTROYED' },
})

add({
  name: "the handle's pid is the program's own, read at once or after the end",
  exec: async (sp) => {
    const early = sp.spawn(bash('echo $$'))
    const earlyPid = early.pid
    await early.done
    const late = sp.spawn(bash('echo $$'))
    await late.done
    const own = (h) => Number(h.collected.stdout.readFrom(0).text.trim())
    return { early: earlyPid === own(early), late: late.pid === own(late), positive: earlyPid > 0 }
  },
  expect: { early: true, late: true, positive: true },
})

add({
  name: 'a file the kernel refuses to exec (no ELF, no #!) is not run by a shell',
  exec: async (sp, { impl }) => {
    // Found and executable, so only the exec itself can refuse it (ENOEXEC);
    // as a shell script its first line would print.
    const program = path.join(BASE, `not-a-program-${impl}`)
    fs.writeFileSync(program, 'echo run by a shell\n\0', { mode: 0o755 })
    const h = sp.spawn(spec([program], { stdin: 'pipe', stdout: 'pipe' }))
    const out = []
    h.stdout.on('data', (d) => out.push(d))
    const done = await h.done.then((facts) => facts.exitCode, failure)
    // After the end a write is refused, never an EPIPE that ends the host.
    const write = await new Promise((resolve) => h.stdin.write('x', (err) => resolve(err ? 'refused' : 'taken')))
    return { done, pid: h.pid > 0 ? 'a pid' : h.pid, stdout: Buffer.concat(out).toString(), write }
  },
  differs: {
    id: 'exec-format',
    published: (v) => assert.deepEqual(v, { done: 0, pid: 'a pid', stdout: 'run by a shell\n', write: 'refused' }),
    native: (v) => assert.deepEqual(v, { done: { rejected: true, code: 'ENOEXEC' }, pid: -1, stdout: '', write: 'refused' }),
  },
})

add({
  name: 'bad specs throw from spawn',
  exec: async (sp) => {
    const attempt = (s) => {
      try {
        sp.spawn(s)
        return 'spawned'
      } catch {
        return 'threw'
      }
    }
    return {
      grace0: attempt({ ...spec(['true']), graceMs: 0 }),
      graceNaN: attempt({ ...spec(['true']), graceMs: Number.NaN }),
      emptyArgv: attempt(spec([])),
      aborted: attempt(spec(['true'], {}, { signal: AbortSignal.abort() })),
    }
  },
  expect: { grace0: 'threw', graceNaN: 'threw', emptyArgv: 'threw', aborted: 'threw' },
})

add({
  name: 'terminate: SIGTERM, the trap runs, SIGKILL after the grace',
  exec: async (sp, { impl }) => {
    const h = sp.spawn(bash("trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done"))
    await eventually(() => h.collected.stdout.readFrom(0).text.includes('ready'))
    h.terminate()
    h.terminate()
    const s = await settled(h, impl)
    return { outcome: s.outcome, stdout: s.stdout.text, gone: await h.waitForExit() }
  },
  expect: { outcome: { exitCode: null, signal: 'SIGKILL' }, stdout: 'ready\nterm\n', gone: true },
})

add({
  name: 'an abort during the run terminates it',
  exec: async (sp, { impl }) => {
    const ac = new AbortController()
    const h = sp.spawn(bash('echo ready; sleep 30'), {})
    const g = sp.spawn(bash('echo ready; exec sleep 30', {}, { signal: ac.signal }))
    await eventually(() => g.collected.stdout.readFrom(0).text.includes('ready'))
    ac.abort()
    h.terminate()
    return [(await settled(g, impl)).outcome, (await settled(h, impl)).outcome]
  },
  expect: [{ exitCode: null, signal: 'SIGTERM' }, { exitCode: null, signal: 'SIGTERM' }],
})

add({
  name: 'done waits at most the grace for pipes a grandchild holds',
  exec: async (sp, { impl }) => {
    const t = Date.now()
    const s = await settled(sp.spawn(bash('sleep 20 & echo hi')), impl)
    return { outcome: s.outcome, text: s.stdout.text, bounded: Date.now() - t < 10000 }
  },
  expect: { outcome: { exitCode: 0, signal: null }, text: 'hi\n', bounded: true },
})

add({
  name: 'a piped stream nobody reads does not hold done',
  exec: async (sp, { impl }) => {
    const t = Date.now()
    const h = sp.spawn(spec(['printf', 'hi'], { stdout: 'pipe', stderr: 'pipe' }, { graceMs: 20000 }))
    const outcome = await h.done
    remember(h, impl)
    return { outcome, quick: Date.now() - t < 10000 }
  },
  expect: { outcome: { exitCode: 0, signal: null }, quick: true },
})

add({
  // Nothing left behind, the program's tree is known to be over when
  // `done` settles: a check that will not wait says so, whether the pid
  // was read or not.
  name: 'waitForExit with an aborted signal, after done, for a tree that is over',
  exec: async (sp, { impl }) => {
    const quiet = sp.spawn(spec(['true']))
    const read = sp.spawn(spec(['sh', '-c', 'exit 3']))
    assert.ok(read.pid > 0)
    return { quiet: await goneAfterDone(quiet, impl), read: await goneAfterDone(read, impl) }
  },
  expect: {
    quiet: { outcome: { exitCode: 0, signal: null }, gone: true },
    read: { outcome: { exitCode: 3, signal: null }, gone: true },
  },
})

add({
  name: 'waitForExit with an aborted signal, after a terminated program is done',
  exec: async (sp, { impl }) => {
    const h = sp.spawn(spec(['sleep', '300']))
    h.terminate()
    return goneAfterDone(h, impl)
  },
  differs: {
    id: 'wait-after-terminate',
    // The published provider answers from a poll of the group every 15 ms,
    // started by terminate(): `false` until that poll has run since the
    // program died, which `done` usually comes before.
    published: (v) => {
      assert.deepEqual(v.outcome, { exitCode: null, signal: 'SIGTERM' })
      assert.equal(typeof v.gone, 'boolean')
    },
    native: (v) => assert.deepEqual(v, { outcome: { exitCode: null, signal: 'SIGTERM' }, gone: true }),
  },
})

add({
  name: 'a cwd that is a file: thrown, or a handle whose done rejects',
  exec: async (sp) => {
    const file = path.join(BASE, 'a-file-not-a-dir')
    fs.writeFileSync(file, '')
    let h
    try {
      h = sp.spawn(spec(['true'], {}, { cwd: file }))
    } catch (e) {
      return { threw: e.code }
    }
    return { pid: h.pid, rejected: await h.done.then(() => 'resolved', (e) => e.code) }
  },
  differs: {
    id: 'start-errors',
    published: (v) => assert.deepEqual(v, { threw: 'ENOTDIR' }),
    native: (v) => assert.deepEqual(v, { pid: -1, rejected: 'ENOTDIR' }),
  },
})

add({
  name: 'waitForExit with a setsid grandchild alive',
  exec: async (sp) => {
    const h = sp.spawn(bash(LEAVES_GRANDCHILD))
    const pid = await grandchildOf(h)
    const waited = await h.waitForExit(AbortSignal.timeout(500))
    const stillAlive = alive(pid)
    process.kill(pid, 'SIGKILL')
    return { waited, stillAlive, afterKill: await h.waitForExit(AbortSignal.timeout(10000)) }
  },
  differs: {
    id: 'wait-tree',
    published: (v) => assert.deepEqual(v, { waited: true, stillAlive: true, afterKill: true }),
    native: (v) => assert.deepEqual(v, { waited: false, stillAlive: true, afterKill: true }),
  },
})

add({
  name: 'terminate after the leader exited, with a setsid grandchild',
  exec: async (sp) => {
    const h = sp.spawn(bash(LEAVES_GRANDCHILD))
    const pid = await grandchildOf(h)
    h.terminate()
    await h.waitForExit(AbortSignal.timeout(5000))
    const ended = await eventually(() => !alive(pid), 3000)
    if (!ended) process.kill(pid, 'SIGKILL')
    return { grandchildEnded: ended }
  },
  differs: {
    id: 'terminate-tree',
    published: (v) => assert.deepEqual(v, { grandchildEnded: false }),
    native: (v) => assert.deepEqual(v, { grandchildEnded: true }),
  },
})

add({
  name: 'disposal ends every managed process and what it left behind',
  exec: async (_sp, { impl }) => {
    const root = new Context()
    await root.plugin(PROVIDERS[impl])
    const sp = root.subprocess
    const running = sp.spawn(spec(['sleep', '300']))
    const left = sp.spawn(bash(LEAVES_GRANDCHILD))
    const pid = await grandchildOf(left)
    await root.fiber.dispose()
    const outcome = await running.done
    const ended = await eventually(() => !alive(pid), 3000)
    if (!ended) process.kill(pid, 'SIGKILL')
    return { outcome, sleeperEnded: !alive(running.pid), grandchildEnded: ended }
  },
  differs: {
    id: 'dispose-tree',
    published: (v) => assert.deepEqual(v, { outcome: { exitCode: null, signal: 'SIGTERM' }, sleeperEnded: true, grandchildEnded: false }),
    native: (v) => assert.deepEqual(v, { outcome: { exitCode: null, signal: 'SIGTERM' }, sleeperEnded: true, grandchildEnded: true }),
  },
})

add({
  name: "a DSH_EXEC_TAG in the spawn's env",
  exec: async (sp, { impl }) => {
    const seen = async (env) => {
      const h = sp.spawn(spec(['sh', '-c', 'printf "%s" "${DSH_EXEC_TAG-unset}"'], {}, { env }))
      const s = await settled(h, impl)
      return s.stdout.text
    }
    return { value: await seen({ DSH_EXEC_TAG: 'caller-tag' }), removed: await seen({ DSH_EXEC_TAG: undefined }) }
  },
  differs: {
    id: 'provider-exec-tag',
    published: (v) => assert.deepEqual(v, { value: 'caller-tag', removed: 'unset' }),
    native: (v) => {
      for (const tag of [v.value, v.removed]) {
        assert.ok(tag !== 'caller-tag' && tag !== 'unset' && tag.length > 0, tag)
      }
    },
  },
})

add({
  name: 'a spill file after the provider is disposed',
  exec: async (_sp, { impl }) => {
    const root = new Context()
    await root.plugin(PROVIDERS[impl])
    const h = root.subprocess.spawn(spec(['seq', '1', '2000'], { stdout: { maxBytes: 100, spill: { maxBytes: 1 << 20 } } }))
    await h.done
    const spillPath = h.collected.stdout.readFrom(0).spillPath
    if (impl === 'published' && spillPath !== undefined) publishedSpills.add(spillPath)
    const before = spillPath !== undefined && fs.readFileSync(spillPath, 'utf8').length
    await root.fiber.dispose()
    return { before, after: spillPath !== undefined && fs.existsSync(spillPath) }
  },
  differs: {
    id: 'spill-after-dispose',
    published: (v) => assert.deepEqual(v, { before: 8893, after: true }),
    native: (v) => assert.deepEqual(v, { before: 8893, after: false }),
  },
})

/** Runs `script` (an ES module) in a child Node, with the provider's URL; resolves with its stdout and exit. */
function childNode(impl, script) {
  const source = `
    Promise.withResolvers ??= () => { let resolve, reject; const promise = new Promise((a, b) => { resolve = a; reject = b }); return { promise, resolve, reject } }
    const { Context } = await import(${JSON.stringify(seamUrl('@deepseek-ai/cordis'))})
    const { default: Provider } = await import(${JSON.stringify(PROVIDER_URLS[impl])})
    const root = new Context()
    await root.plugin(Provider)
    const sp = root.subprocess
    ${script}`
  return new Promise((resolve, reject) => {
    const child = spawnChild(process.execPath, ['--input-type=module', '-e', source], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), 30000)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ out, code })
    })
  })
}

add({
  name: "'inherit' shares the host's stdout",
  exec: async (_sp, { impl }) => {
    const r = await childNode(impl, `
      const h = sp.spawn({ argv: ['echo', 'inherited'], cwd: '/', stdio: { stdin: 'ignore', stdout: 'inherit', stderr: 'inherit' }, graceMs: 300 })
      await h.done
      process.stdout.write('host-done\\n')
      await root.fiber.dispose()`)
    return r
  },
  expect: { out: 'inherited\nhost-done\n', code: 0 },
})

add({
  name: 'process.exit() without disposing ends the managed processes',
  exec: async (_sp, { impl }) => {
    const r = await childNode(impl, `
      const h = sp.spawn({ argv: ['sleep', '300'], cwd: '/', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }, graceMs: 300 })
      process.stdout.write(String(h.pid))
      process.exit(0)`)
    const pid = Number(r.out)
    const ended = await eventually(() => !alive(pid), 10000)
    if (!ended) process.kill(pid, 'SIGKILL')
    return { code: r.code, ended }
  },
  expect: { code: 0, ended: true },
})

add({
  name: 'a write to a piped stdin after done is harmless (stdin is destroyed at the exit)',
  exec: async (_sp, { impl }) => {
    const r = await childNode(impl, `
      const h = sp.spawn({ argv: ['true'], cwd: '/', stdio: { stdin: 'pipe', stdout: 'pipe', stderr: 'pipe' }, graceMs: 300 })
      h.stdout.resume(); h.stderr.resume()
      await h.done
      const err = await new Promise((resolve) => h.stdin.write(Buffer.alloc(1 << 20), resolve))
      await new Promise((r) => setTimeout(r, 200))
      process.stdout.write(JSON.stringify({ destroyed: h.stdin.destroyed, refused: err?.code ?? null }))
      await root.fiber.dispose()`)
    return { code: r.code, ...JSON.parse(r.out || '{}') }
  },
  expect: { code: 0, destroyed: true, refused: 'ERR_STREAM_DESTROYED' },
})

add({
  name: 'inputs outside the seam types: non-string env values, a fractional maxBytes, a null signal, an ignored output, readFrom(), a terminal env value undefined',
  exec: async (sp) => {
    const probe = async (extra, stdio) => {
      try {
        const h = sp.spawn(bash('echo "$DSHP_N"', stdio, extra))
        const outcome = await h.done
        return `ran: ${outcome.exitCode} ${JSON.stringify(h.collected.stdout?.readFrom(0).text)}`
      } catch (e) {
        return e.code ?? 'threw'
      }
    }
    const readFromNothing = async () => {
      const h = sp.spawn(bash('echo x'))
      await h.done
      try {
        return `read: ${JSON.stringify(h.collected.stdout.readFrom().text)}`
      } catch (e) {
        return e.code ?? 'threw'
      }
    }
    // A terminal's env is strings only; `undefined` is outside its type.
    const terminalUndefined = async () => {
      const t = await sp.spawnTerminal({ argv: ['bash', '-c', 'echo "[${HOME-unset}]"'], cwd: BASE, env: { HOME: undefined }, rows: 24, cols: 80, graceMs: GRACE })
      const text = (await bytesOf(t.output)).toString()
      await t.done
      return text.includes('[undefined]') ? 'the string undefined' : text.includes(`[${process.env.HOME}]`) ? 'inherited' : text.trim()
    }
    return {
      terminalEnvUndefined: await terminalUndefined(),
      envNumber: await probe({ env: { DSHP_N: 5 } }),
      maxBytesFraction: await probe({}, { stdout: { maxBytes: 2.5 } }),
      signalNull: await probe({ signal: null }),
      stdoutIgnore: await probe({}, { stdout: 'ignore' }),
      readFromNothing: await readFromNothing(),
    }
  },
  differs: {
    id: 'provider-strict-requests',
    published: (v) =>
      assert.deepEqual(v, {
        terminalEnvUndefined: 'the string undefined',
        envNumber: 'ran: 0 "5\\n"',
        maxBytesFraction: 'ran: 0 "\\n"',
        signalNull: 'ran: 0 "\\n"',
        // 'ignore' is not an output of the seam's: it collects it.
        stdoutIgnore: 'ran: 0 "\\n"',
        readFromNothing: 'read: "x\\n"',
      }),
    native: (v) =>
      assert.deepEqual(v, {
        terminalEnvUndefined: 'inherited',
        envNumber: 'INVALID_ARGUMENT',
        maxBytesFraction: 'INVALID_ARGUMENT',
        signalNull: 'INVALID_ARGUMENT',
        stdoutIgnore: 'INVALID_ARGUMENT',
        readFromNothing: 'INVALID_ARGUMENT',
      }),
  },
})

add({
  name: 'resolveExecutable with PATH removed by the overlay',
  exec: async (sp) => sp.resolveExecutable('sh', { PATH: undefined }).then((p) => ({ found: p }), (e) => ({ rejected: e.code ?? 'threw' })),
  differs: {
    id: 'resolve-default-path',
    published: (v) => assert.ok(v.rejected !== undefined, JSON.stringify(v)),
    native: (v) => assert.ok(['/usr/local/bin/sh', '/usr/bin/sh', '/bin/sh'].includes(v.found), JSON.stringify(v)),
  },
})

add({
  name: 'a spawn after the provider was disposed',
  exec: async (sp, { root }) => {
    await root.fiber.dispose()
    try {
      const h = sp.spawn(bash('true'))
      return { spawned: (await h.done).exitCode }
    } catch (e) {
      return { threw: e.code ?? 'threw' }
    }
  },
  differs: {
    id: 'after-dispose',
    published: (v) => assert.deepEqual(v, { spawned: 0 }),
    native: (v) => assert.deepEqual(v, { threw: 'DISPOSED' }),
  },
})

// ------------------------------------------------------------- terminals

add({
  name: 'a terminal: prompt, write, foreground, signal, terminate',
  exec: async (sp) => {
    const t = await sp.spawnTerminal({ argv: ['bash', '--norc', '--noprofile', '-i'], cwd: BASE, env: { PS1: 'P> ' }, rows: 24, cols: 80, graceMs: GRACE })
    let seen = ''
    t.output.on('data', (d) => (seen += d))
    const fgIdle = await eventually(async () => (await t.inspectForeground())?.processGroupId === t.pid)
    await t.write('echo $((6*7))\n')
    const answered = await eventually(() => seen.includes('42'))
    await t.write('sleep 30\n')
    const sleeping = await eventually(async () => {
      const fg = await t.inspectForeground()
      return fg !== undefined && fg.processGroupId !== t.pid
    })
    const fg = await t.inspectForeground()
    // In front from bash's fork on; signalled before the child has become
    // sleep, bash's handler in that child may swallow it.
    const exec = await eventually(() => comm(fg.processGroupId) === 'sleep')
    const signalled = exec && (await t.signalForeground('SIGINT')) === fg.processGroupId
    const back = await eventually(async () => (await t.inspectForeground())?.processGroupId === t.pid)
    await t.terminate()
    await t.terminate()
    return { fgIdle, answered, sleeping, signalled, back, outcome: await t.done }
  },
  differs: {
    id: 'terminal-hangup',
    // An interactive bash ignores SIGTERM: the published provider waits the
    // grace and kills it; ours hangs the terminal up, as closing one does.
    published: (v) => assert.deepEqual(v.outcome, { exitCode: null, signal: 'SIGKILL' }),
    native: (v) => assert.deepEqual(v, { fgIdle: true, answered: true, sleeping: true, signalled: true, back: true, outcome: { exitCode: null, signal: 'SIGHUP' } }),
  },
})

add({
  name: "a terminal's output events run in the async context of the spawn that made it",
  exec: async (sp) => {
    const als = new AsyncLocalStorage()
    const seen = new Set()
    // Listened to outside the spawn's context, as a harness attaching its
    // reader later does.
    const terms = await Promise.all(
      ['A', 'B'].map((id) =>
        als.run({ id }, () => sp.spawnTerminal({ argv: ['bash', '-c', 'sleep 0.2; echo hi'], cwd: BASE, rows: 24, cols: 80, graceMs: GRACE })),
      ),
    )
    await als.run({ id: 'elsewhere' }, async () => {
      terms.forEach((t, i) => t.output.on('data', () => seen.add(`${'AB'[i]} data in ${als.getStore()?.id}`)))
      await Promise.all(terms.map((t) => t.done))
    })
    return [...seen].sort()
  },
  expect: ['A data in A', 'B data in B'],
})

add({
  name: 'a terminal whose output nobody read: terminate() does not wait out the grace',
  exec: async (sp) => {
    const t = await sp.spawnTerminal({ argv: ['yes'], cwd: BASE, rows: 24, cols: 80, graceMs: 20_000 })
    // Blocked writing: its output is full and unread.
    const blocked = await eventually(() => {
      try {
        return fs.readFileSync(`/proc/${t.pid}/syscall`, 'utf8').startsWith('1 ')
      } catch {
        return false
      }
    })
    const start = Date.now()
    await t.terminate()
    return { blocked, quick: Date.now() - start < 10_000, ended: (await t.done).exitCode === null }
  },
  expect: { blocked: true, quick: true, ended: true },
})

add({
  name: 'a terminal whose program cannot start',
  exec: async (sp) =>
    sp.spawnTerminal({ argv: ['/nonexistent/program'], cwd: BASE, rows: 24, cols: 80, graceMs: GRACE }).then(
      async (t) => ({ resolved: await t.done }),
      (e) => ({ rejected: e.code }),
    ),
  differs: {
    id: 'terminal-start-failure',
    published: (v) => assert.deepEqual(v, { resolved: { exitCode: 1, signal: null } }),
    native: (v) => assert.deepEqual(v, { rejected: 'ENOENT' }),
  },
})

add({
  name: 'a terminal: SIGKILL is refused while the shell itself is in front',
  exec: async (sp) => {
    const t = await sp.spawnTerminal({ argv: ['bash', '--norc', '--noprofile', '-i'], cwd: BASE, env: { PS1: 'P> ' }, rows: 24, cols: 80, graceMs: GRACE })
    const fgIdle = await eventually(async () => (await t.inspectForeground())?.processGroupId === t.pid)
    const refused = await t.signalForeground('SIGKILL').then(() => false, () => true)
    let alive = true
    try {
      process.kill(t.pid, 0)
    } catch {
      alive = false
    }
    await t.terminate()
    return { fgIdle, refused, alive }
  },
  expect: { fgIdle: true, refused: true, alive: true },
})

add({
  name: 'a terminal: rows and cols out of range or fractional',
  exec: async (sp) => {
    const sizes = {}
    for (const rows of [24.5, 0, -1, 1e6, NaN]) {
      try {
        const t = await sp.spawnTerminal({ argv: ['bash', '-c', 'stty size'], cwd: BASE, rows, cols: 80, graceMs: GRACE })
        let out = ''
        for await (const c of t.output) out += c
        await t.done
        await t.terminate()
        sizes[rows] = out.trim()
      } catch (e) {
        sizes[rows] = e.code === 'INVALID_ARGUMENT' && e.field === 'request.rows' ? 'refused, naming request.rows' : String(e)
      }
    }
    return sizes
  },
  differs: {
    id: 'terminal-dimensions',
    // node-pty truncates and wraps what it is given: 24.5 rows is 24,
    // 0 and NaN the default 24, -1 is 65535 and a million 16960.
    published: (v) => assert.deepEqual(v, { 24.5: '24 80', 0: '24 80', '-1': '65535 80', 1000000: '16960 80', NaN: '24 80' }),
    native: (v) => assert.deepEqual(Object.values(v), Array(5).fill('refused, naming request.rows')),
  },
})

add({
  name: 'a terminal: a signal that fires after the allocation leaves the session running',
  exec: async (sp) => {
    const ac = new AbortController()
    const t = await sp.spawnTerminal({ argv: ['cat'], cwd: BASE, rows: 24, cols: 80, graceMs: GRACE, signal: ac.signal })
    ac.abort()
    await new Promise((r) => setTimeout(r, 200))
    const running = alive(t.pid)
    await t.terminate()
    return { running, gone: !alive(t.pid) }
  },
  expect: { running: true, gone: true },
})

add({
  name: 'a terminal: the output before the exit is all delivered',
  exec: async (sp) => {
    const t = await sp.spawnTerminal({ argv: ['bash', '-c', 'seq 1 20000'], cwd: BASE, rows: 24, cols: 80, graceMs: GRACE })
    const text = (await bytesOf(t.output)).toString()
    const outcome = await t.done
    await t.terminate()
    const last = text.trim().split(/\r?\n/).pop()
    return { outcome, last }
  },
  differs: {
    id: 'terminal-output-at-exit',
    // node-pty drops what the program wrote just before it exited, in some
    // runs and not others: ours never does.
    sometimes: true,
    published: (v) => assert.ok(Number(v.last) <= 20000 && v.outcome.exitCode === 0, JSON.stringify(v)),
    native: (v) => assert.deepEqual(v, { outcome: { exitCode: 0, signal: null }, last: '20000' }),
  },
})

add({
  name: 'a terminal: terminate ends a setsid member of the session',
  exec: async (sp) => {
    const t = await sp.spawnTerminal({ argv: ['bash', '-c', `${LEAVES_GRANDCHILD}; sleep 30`], cwd: BASE, rows: 24, cols: 80, graceMs: GRACE })
    let seen = ''
    t.output.on('data', (d) => (seen += d))
    await eventually(() => /\d+/.test(seen))
    const pid = Number(/\d+/.exec(seen)[0])
    await eventually(() => alive(pid))
    await t.terminate()
    const ended = await eventually(() => !alive(pid), 3000)
    if (!ended) process.kill(pid, 'SIGKILL')
    return { grandchildEnded: ended }
  },
  expect: { grandchildEnded: true },
})

// ------------------------------------------------------------------ runner

async function outcome(c, impl) {
  const root = await provider(impl)
  const dir = fs.mkdtempSync(path.join(BASE, `${impl}-`))
  let timer
  // A case that hangs (a deadlock, a promise never settled) fails, naming
  // the side, instead of hanging the suite (the JS thread must be free for
  // the timer: a busy loop is not caught). What it left running lives on
  // until the providers are disposed, after the last case.
  const hung = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ hung: `${impl} did not finish within ${CASE_LIMIT_MS} ms` }), CASE_LIMIT_MS)
  })
  try {
    return await Promise.race([c.exec(root.subprocess, { impl, root, dir }), hung])
  } catch (e) {
    return { threw: String(e?.stack ?? e) }
  } finally {
    clearTimeout(timer)
  }
}

/** How long one side of a case may take (the slowest take a few seconds). */
const CASE_LIMIT_MS = 60000

for (const c of CASES) {
  test(`subprocess parity: ${c.name}`, async () => {
    const [published, native] = c.serial
      ? [await outcome(c, 'published'), await outcome(c, 'native')]
      : await Promise.all([outcome(c, 'published'), outcome(c, 'native')])
    if (process.env.DSH_PARITY_SHOW) console.log(c.name, JSON.stringify({ published, native }))
    if (c.expect !== undefined) assert.deepEqual(published, c.expect, 'the published outcome, pinned')
    if (c.differs) {
      c.differs.published(published)
      c.differs.native(native)
      if (!c.differs.sometimes) assert.notDeepEqual(native, published, `documented difference ${c.differs.id} still differs`)
    } else {
      assert.deepEqual(native, published)
    }
  })
}

test('docs/compat.md and this table name the same subprocess differences', () => {
  const doc = fs.readFileSync(new URL('../../docs/compat.md', import.meta.url), 'utf8')
  const part = doc.slice(doc.indexOf('\n## The subprocess provider'))
  const documented = [...part.matchAll(/^### `([a-z0-9-]+)`/gm)].map((m) => m[1]).sort()
  const tested = CASES.filter((c) => c.differs).map((c) => c.differs.id).sort()
  assert.deepEqual(documented, tested)
  assert.ok(CASES.length >= 25, `${CASES.length} cases`)
})
