// dsh-native/remote: RemoteShellExecutor against a real `dsh serve`, over
// its three kinds of transport (a child's stdio, a unix socket, ssh to an
// sshd of the test's own). Where a behaviour is the local executor's, the
// same calls go through a local NativeShellExecutor and the two answers are
// compared; the rest pins down what only a remote executor does (a lost
// connection, the mirror's reads by offset, back-pressure across the wire).

import test, { after } from 'node:test'
import assert from 'node:assert/strict'
import { AsyncLocalStorage } from 'node:async_hooks'
import { execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { seam, harnessUrl } from './seam.mjs'
import { sshdMissing, startSshd } from './sshd.mjs'

const { alive, comm, eventually, failure, tmpdir, within, NativeShellExecutor } = createRequire(import.meta.url)('./helpers.js')
const { RemoteShellExecutor, RemoteShellProcess, RemoteTerminalHandle } = await import(new URL('../../bindings-node/remote.mjs', import.meta.url).href)

const DSH_BIN = process.env.DSH_BIN ?? fileURLToPath(new URL('../../target/debug/dsh', import.meta.url))
const NO_BIN = fs.existsSync(DSH_BIN) ? undefined : `no dsh binary at ${DSH_BIN} (cargo build -p dsh-cli --bin dsh, or set DSH_BIN)`
const STDIO = { command: [DSH_BIN, 'serve', '--stdio'] }
/** Generous: these wait on a real server, possibly on a loaded machine. */
const T = { timeout: 60_000 }

const opened = []
after(async () => {
  await Promise.allSettled(opened.map((ex) => ex.dispose()))
})

/** A connected executor (disposed after the file), with graceMs small enough for kills. */
async function connect(config = {}, transport = STDIO) {
  const ex = await RemoteShellExecutor.connect({ transport, config: { graceMs: 300, cwd: WORK, ...config } })
  opened.push(ex)
  return ex
}

/** A local executor with the same config, for the answer the remote one must give. */
function local(config = {}) {
  const ex = new NativeShellExecutor({ graceMs: 300, cwd: WORK, ...config })
  after(() => ex.dispose())
  return ex
}

const WORK = tmpdir()

/** Resolves once `file` exists: an fs.watch event, not a sleep. */
function fileAppears(file) {
  return new Promise((resolve) => {
    const check = () => {
      if (fs.existsSync(file)) {
        watcher.close()
        resolve()
      }
    }
    const watcher = fs.watch(path.dirname(file), check)
    check()
  })
}

/** Everything a process says until `needle`, read by polling its consuming reads. */
async function readUntil(p, needle) {
  let seen = ''
  const ok = await eventually(() => {
    seen += p.readOutput().delta
    return seen.includes(needle)
  })
  if (!ok) throw new Error(`never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
  return seen
}

/** An error reduced to what the faces must agree on. */
const shape = (e) => ({ code: e.code, field: e.field, message: e.message, errno: e.errno, reason: e.reason, id: e.id })

/** A read without its task (the objects differ by face), spill files as their contents. */
function plain(read) {
  const { task, ...rest } = read
  for (const key of ['stdoutSpillPath', 'stderrSpillPath']) {
    if (rest[key] !== undefined) rest[key] = fs.readFileSync(rest[key], 'utf8')
  }
  return rest
}

const skipNoBin = NO_BIN ? { skip: NO_BIN } : {}

test('connect: an initialized executor with the server\'s config; a bad config names the field as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect({ maxOutputBytes: 1234, sandboxMode: undefined })
  assert.ok(ex instanceof RemoteShellExecutor)
  assert.equal(ex.sandboxMode, undefined)
  // resolve() is local, by the server's effective config.
  assert.deepEqual(ex.resolve({ command: 'true' }), local({ maxOutputBytes: 1234 }).resolve({ command: 'true' }))
  for (const config of [{ graceMs: 0 }, { timeoutMs: -1 }, { maxOutputBytes: Infinity }, { bogus: 1 }, { limits: { memoryBytes: 0.5 } }]) {
    const remote = await failure(() => RemoteShellExecutor.connect({ transport: STDIO, config }))
    const here = await failure(() => new NativeShellExecutor(config))
    assert.deepEqual(shape(remote), shape(here), JSON.stringify(config))
  }
  // The server judges its own spill directory; its field comes back in camelCase.
  const file = path.join(tmpdir(), 'a-file')
  fs.writeFileSync(file, '')
  const bad = await failure(() => RemoteShellExecutor.connect({ transport: STDIO, config: { spillDir: file } }))
  assert.equal(bad.code, 'INVALID_ARGUMENT')
  assert.equal(bad.field, 'config.spillDir')
  assert.match(bad.message, /^config\.spillDir is not a directory/)
  // The transport itself.
  for (const [transport, field] of [
    [undefined, 'transport'],
    [{}, 'transport'],
    [{ command: [] }, 'transport.command'],
    [{ command: ['x', 5] }, 'transport.command.1'],
    [{ socket: 5 }, 'transport.socket'],
    [{ command: ['x'], socket: '/x' }, 'transport'],
    [{ comand: ['x'] }, 'transport.comand'],
  ]) {
    const e = await failure(() => RemoteShellExecutor.connect({ transport }))
    assert.deepEqual([e.code, e.field], ['INVALID_ARGUMENT', field], JSON.stringify(transport))
  }
  assert.throws(() => new RemoteShellExecutor(), /RemoteShellExecutor\.connect/)
  // A program that is not there, and one that is not a server: CONNECTION_LOST naming it.
  const missing = await failure(() => RemoteShellExecutor.connect({ transport: { command: ['/nonexistent-dsh-remote/dsh', 'serve'] } }))
  assert.equal(missing.code, 'CONNECTION_LOST')
  assert.match(missing.message, /\/nonexistent-dsh-remote\/dsh serve.*ENOENT/)
  const notServer = await failure(() => RemoteShellExecutor.connect({ transport: { command: ['sh', '-c', 'echo oops >&2; exit 3'] } }))
  assert.equal(notServer.code, 'CONNECTION_LOST')
  assert.match(notServer.message, /exited with status 3.*oops/)
})

test('run: results, errors and the abort are the local executor\'s', { ...T, ...skipNoBin }, async () => {
  const ex = await connect({ maxOutputBytes: 100 })
  const here = local({ maxOutputBytes: 100 })
  const requests = [
    { command: 'echo out; echo err >&2; exit 3' },
    { command: "printf 'héllo 😀\\n'" },
    { command: 'seq 1 1000' },
    { command: 'seq 1 1000 >&2' },
    { command: 'cat', stdin: 'from stdin' },
    { command: 'od -An -tx1', stdin: Buffer.from([0, 255, 1]) },
    { command: 'echo "$A $DSH_B"', env: { A: 'a' }, dshEnv: { DSH_B: 'b' } },
    { command: 'sleep 30', timeoutMs: 200 },
    { command: 'kill -TERM $$' },
  ]
  for (const request of requests) {
    const [r, l] = await Promise.all([ex.run(ex.resolve(request)), here.run(here.resolve(request))])
    for (const s of ['stdout', 'stderr']) {
      for (const o of [r[s], l[s]]) if (o.spillPath !== undefined) o.spillPath = fs.readFileSync(o.spillPath, 'utf8')
    }
    assert.deepEqual(r, l, request.command)
  }
  // Errors: the local face's code, field and message, whichever side found them.
  const cases = [
    (e) => e.resolve({ command: 'true', timeoutMs: 0 }),
    (e) => e.resolve({ command: 'true', timeout_ms: 5 }),
    (e) => e.resolve({ command: 'true', env: { A: 1 } }),
    (e) => e.run({ ...e.resolve({ command: 'true' }), timeoutMs: 0 }),
    (e) => e.run({ ...e.resolve({ command: 'true' }), work_dir: '/' }),
    (e) => e.run({ ...e.resolve({ command: 'true' }), signal: 5 }),
    (e) => e.run(null),
    (e) => e.run(e.resolve({ command: 'true', stdin: { pipe: true } })),
    (e) => e.run(e.resolve({ command: 'true', workdir: '/nonexistent-dsh-remote' })),
    (e) => e.run(e.resolve({ command: 'true', workdir: '/etc/passwd' })),
    (e) => e.start({ ...e.resolve({ command: 'true' }), stdoutMaxBytes: -1 }),
    (e) => e.readOutput('bash-404'),
    (e) => e.kill(5),
    (e) => e.ownerOf('nope'),
    (e) => e.forget('nope'),
    (e) => e.onTaskDone('not a function'),
  ]
  for (const call of cases) {
    const [r, l] = await Promise.all([failure(() => call(ex)), failure(() => call(here))])
    assert.deepEqual(shape(r), shape(l), call.toString())
  }
  // An abort during the run; an already aborted signal sends nothing.
  const dir = tmpdir()
  const ac = new AbortController()
  const started = path.join(dir, 'started')
  const pending = ex.run(ex.resolve({ command: `echo up; touch ${started}; sleep 30`, signal: ac.signal }))
  await fileAppears(started)
  ac.abort()
  const aborted = await within(10_000, pending, 'the aborted run')
  assert.deepEqual([aborted.aborted, aborted.signal, aborted.stdout.text], [true, 'SIGTERM', 'up\n'])
  const marker = path.join(dir, 'ran')
  const gone = await failure(() => ex.run(ex.resolve({ command: `touch ${marker}`, signal: AbortSignal.abort() })))
  assert.equal(gone.code, 'ABORT_ERR')
  const goneStart = await failure(() => ex.start(ex.resolve({ command: `touch ${marker}`, signal: AbortSignal.abort() })))
  assert.equal(goneStart.code, 'ABORT_ERR')
  // The next command runs after both: had either been sent, its file would be there.
  await ex.run(ex.resolve({ command: 'true' }))
  assert.equal(fs.existsSync(marker), false)
  assert.deepEqual(ex.list(), [])
})

/** The chunks of `stream` that onOutput saw, each starting where the previous ended, joined. */
function streamed(chunks, stream) {
  const mine = chunks.filter((c) => c.stream === stream)
  let at = 0
  for (const c of mine) {
    assert.ok(c.data instanceof Uint8Array)
    assert.equal(c.offset, at, `a ${stream} chunk at ${c.offset}, where ${at} was expected`)
    at += c.data.length
  }
  return Buffer.concat(mine.map((c) => c.data))
}

/** A run result with its spill files' contents in place of their paths (which differ from run to run). */
function spilled(result) {
  const out = structuredClone(result)
  for (const s of ['stdout', 'stderr']) if (out[s].spillPath !== undefined) out[s].spillPath = fs.readFileSync(out[s].spillPath, 'utf8')
  return out
}

test('run with onOutput: every byte in order, raw, as the command wrote it (past 1 MiB, not UTF-8); the result is the same as without', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const dir = tmpdir()
  const data = path.join(dir, 'data')
  const bytes = Buffer.alloc(1_500_000)
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + (i >> 9)) & 0xff
  fs.writeFileSync(data, bytes)
  // € (E2 82 AC) written in two pieces: a chunk may end inside a character.
  const request = { command: `cat ${data}; printf '\\342\\202' >&2; sleep 0.1; printf '\\254 err' >&2; exit 4` }
  const chunks = []
  const r = await ex.run(ex.resolve(request), { onOutput: (c) => chunks.push(c) })
  assert.ok(streamed(chunks, 'stdout').equals(bytes), 'stdout as written')
  assert.ok(chunks.filter((c) => c.stream === 'stdout').length > 1, 'in several chunks')
  assert.deepEqual(streamed(chunks, 'stderr'), Buffer.from('€ err'))
  assert.deepEqual(chunks.find((c) => c.stream === 'stderr').data, Buffer.from([0xe2, 0x82]))
  assert.equal(r.exitCode, 4)
  assert.deepEqual(spilled(r), spilled(await ex.run(ex.resolve(request))))
})

test('run with onOutput: the first chunk comes while the command runs, and the signal aborts it', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const pidFile = path.join(tmpdir(), 'pid')
  const ac = new AbortController()
  let first
  const seen = new Promise((resolve) => (first = resolve))
  const running = ex.run(ex.resolve({ command: `echo $$ > ${pidFile}; echo up; exec sleep 30`, signal: ac.signal }), { onOutput: (c) => first(c) })
  const c = await within(10_000, seen, 'the first chunk')
  assert.deepEqual([c.stream, c.offset], ['stdout', 0])
  assert.ok('up\n'.startsWith(Buffer.from(c.data).toString()), JSON.stringify(Buffer.from(c.data).toString()))
  const pid = Number(fs.readFileSync(pidFile, 'utf8'))
  assert.ok(alive(pid), 'still running when its first output arrived')
  ac.abort()
  const r = await within(10_000, running, 'the aborted run')
  assert.deepEqual([r.aborted, r.signal, r.stdout.text], [true, 'SIGTERM', 'up\n'])
})

test('run with onOutput: a throw cancels the run, which rejects with it; bad options are refused', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const pidFile = path.join(tmpdir(), 'pid')
  const boom = new Error('boom')
  let calls = 0
  const onOutput = () => {
    calls += 1
    throw boom
  }
  const e = await within(10_000, failure(() => ex.run(ex.resolve({ command: `echo $$ > ${pidFile}; echo one; sleep 0.2; echo two; exec sleep 30` }), { onOutput })), 'the run to reject')
  assert.equal(e, boom)
  assert.equal(calls, 1, 'not called after it threw')
  const pid = Number(fs.readFileSync(pidFile, 'utf8'))
  assert.ok(await eventually(() => !alive(pid), 5000), 'the run was cancelled')
  // The executor goes on.
  assert.equal((await ex.run(ex.resolve({ command: 'echo still' }), { onOutput: () => {} })).stdout.text, 'still\n')
  for (const [options, field] of [
    [5, 'options'],
    [{ onOutput: 'x' }, 'options.onOutput'],
    [{ onOuptut: () => {} }, 'options.onOuptut'],
  ]) {
    const bad = await failure(() => ex.run(ex.resolve({ command: 'true' }), options))
    assert.deepEqual([bad.code, bad.field], ['INVALID_ARGUMENT', field], JSON.stringify(options))
  }
})

test('run with an async onOutput: a rejection cancels the run like a throw, and the run settles after every promise it returned', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const pidFile = path.join(tmpdir(), 'pid')
  const boom = new Error('async boom')
  const unhandled = []
  const onUnhandled = (err) => unhandled.push(err)
  process.on('unhandledRejection', onUnhandled)
  try {
    const e = await within(10_000, failure(() => ex.run(ex.resolve({ command: `echo $$ > ${pidFile}; echo one; exec sleep 30` }), {
      onOutput: async () => {
        await new Promise((resolve) => setImmediate(resolve))
        throw boom
      },
    })), 'the run to reject')
    assert.equal(e, boom)
    const pid = Number(fs.readFileSync(pidFile, 'utf8'))
    assert.ok(await eventually(() => !alive(pid), 5000), 'the run was cancelled')
    // Every chunk's promise has settled before the run does.
    let pending = 0
    const r = await ex.run(ex.resolve({ command: 'echo a; sleep 0.05; echo b' }), {
      onOutput: async () => {
        pending += 1
        await new Promise((resolve) => setTimeout(resolve, 100))
        pending -= 1
      },
    })
    assert.deepEqual([r.stdout.text, pending], ['a\nb\n', 0])
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(unhandled, [])
    // One whose promise never settles holds its run, never dispose().
    const seen = new Promise((resolve) => {
      void ex.run(ex.resolve({ command: 'echo held' }), { onOutput: () => (resolve(), new Promise(() => {})) })
    })
    await within(10_000, seen, 'the held run\'s output')
    await within(10_000, ex.dispose(), 'dispose() with a run held by its onOutput')
  } finally {
    process.off('unhandledRejection', onUnhandled)
  }
})

test('what the wire cannot carry: lone surrogates as locally, an oversized message refused, a server that speaks no JSON', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  // A lone surrogate reaches the command as U+FFFD, as the addon converts it
  // (JSON would carry it as an escape the server refuses).
  const request = { command: 'echo "x\uD800y $V"; env | grep ^K', env: { V: 'a\uDC00b', ['K\uD800']: 'k' } }
  const [r, l] = await Promise.all([ex.run(ex.resolve(request)), here.run(here.resolve(request))])
  assert.deepEqual(r, l)
  assert.match(r.stdout.text, /^x\uFFFDy a\uFFFDb\n/)
  // A spec past the protocol's 48 MiB message: refused here, the connection kept.
  const huge = ex.resolve({ command: 'wc -c', stdin: 'x'.repeat(40 << 20) })
  assert.equal((await failure(() => ex.run(huge))).code, 'MESSAGE_TOO_LARGE')
  const before = ex.list().length
  assert.equal((await failure(() => ex.start(huge))).code, 'MESSAGE_TOO_LARGE')
  assert.equal(ex.list().length, before, 'a refused start registers nothing')
  assert.equal((await ex.run(ex.resolve({ command: 'echo still here' }))).stdout.text, 'still here\n')
  // Something on the transport's stdout before the server (a login banner):
  // refused by name, and the transport is ended.
  const dir = tmpdir()
  const { pidfile, transport } = killable(dir, ['sh', '-c', `echo Welcome; exec '${DSH_BIN}' serve --stdio`])
  const e = await failure(() => RemoteShellExecutor.connect({ transport }))
  assert.equal(e.code, 'CONNECTION_LOST')
  assert.match(e.message, /not JSON: "Welcome"/)
  const pid = Number(fs.readFileSync(pidfile, 'utf8'))
  assert.ok(await eventually(() => !alive(pid), 5000), 'the transport was ended')
})

test('start: the registry, reads, kill and forget behave as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const settled = []
  const off = ex.onTaskDone((p) => settled.push([p.id, p.status, p.readOutput().delta]))
  const a = ex.start(ex.resolve({ command: 'echo a; echo b >&2; printf c', owner: 'me' }))
  assert.ok(a instanceof RemoteShellProcess)
  assert.equal(a.id, 'bash-1')
  assert.equal(a.status, 'running')
  assert.equal(ex.get('bash-1'), a)
  assert.equal(ex.ownerOf('bash-1'), 'me')
  assert.equal(a.owner, 'me')
  assert.equal(a.hasStdinPipe, false)
  await within(10_000, a.done, 'a.done')
  assert.deepEqual([a.status, a.exitCode, a.signal, a.exitStatusUnavailable, a.survivors, a.sandbox], ['completed', 0, null, undefined, undefined, undefined])
  // Read by the listener already, with everything in it.
  assert.deepEqual(settled, [['bash-1', 'completed', 'a\nc\n[stderr]\nb\n']])
  off()
  const b = ex.start(ex.resolve({ command: 'echo up; sleep 30' }))
  await readUntil(b, 'up')
  assert.equal(b.kill(), true)
  assert.equal(b.status, 'killed')
  assert.equal(b.kill(), false)
  assert.equal(ex.kill('bash-2'), false)
  assert.equal(shape(await failure(() => ex.forget('bash-2'))).code, 'STILL_RUNNING')
  await within(10_000, b.done, 'b.done')
  assert.deepEqual([b.status, b.exitCode, b.signal], ['killed', null, 'SIGTERM'])
  assert.deepEqual(ex.list().map((p) => p.id), ['bash-1', 'bash-2'])
  ex.forget('bash-1')
  assert.equal(ex.get('bash-1'), undefined)
  assert.deepEqual(ex.list().map((p) => p.id), ['bash-2'])
  assert.equal(settled.length, 1, 'unsubscribed')
  // A spawn failure settles as killed with the error on stderr (as locally).
  const failed = ex.start(ex.resolve({ command: 'true', workdir: '/nonexistent-dsh-remote' }))
  await within(10_000, failed.done, 'failed.done')
  assert.equal(failed.status, 'killed')
  assert.match(failed.readOutput().delta, /^\[stderr\]\nspawn failed: ENOENT: .*\/nonexistent-dsh-remote/)
  // The retention rule of the server, mirrored: the oldest settled go.
  ex.reconfigure({ graceMs: 300, cwd: WORK, retainSettled: 1 })
  const c = ex.start(ex.resolve({ command: 'echo c' }))
  await within(10_000, c.done, 'c.done')
  assert.deepEqual(ex.list().map((p) => p.id), [c.id])
  assert.equal(c.readOutput().delta, 'c\n')
})

test('reads by offset: a character split across chunks is never split in a read', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const dir = tmpdir()
  const [sent, go] = [path.join(dir, 'sent'), path.join(dir, 'go')]
  // € is E2 82 AC: the first two bytes, then (once told) the last one.
  const p = ex.start(ex.resolve({ command: `printf 'a\\342\\202'; touch ${sent}; while [ ! -e ${go} ]; do sleep 0.01; done; printf '\\254b'; printf '\\360\\237' >&2; sleep 0.1; printf '\\230\\200' >&2` }))
  await fileAppears(sent)
  const before = await readUntil(p, 'a')
  fs.writeFileSync(go, '')
  await within(10_000, p.done, 'p.done')
  const rest = p.readOutput()
  assert.equal(before + rest.delta, 'a€b\n[stderr]\n😀')
  assert.ok(!before.includes('\uFFFD') && !rest.delta.includes('\uFFFD'), JSON.stringify([before, rest.delta]))
  assert.equal(p.readOutput().delta, '')
})

test('reads by offset: lossy reads name the spill file, as locally, while it runs and after', { ...T, ...skipNoBin }, async () => {
  const config = { maxOutputBytes: 1000 }
  const ex = await connect(config)
  const here = local(config)
  const reads = async (e) => {
    const dir = tmpdir()
    const go = path.join(dir, 'go')
    const p = e.start(e.resolve({ command: `seq 1 5000; seq 1 3000 >&2; while [ ! -e ${go} ]; do sleep 0.01; done; seq 1 20000` }))
    const first = await readUntil(p, '3000\n')
    fs.writeFileSync(go, '')
    await p.done
    return { first, last: plain(p.readOutput()), after: plain(p.readOutput()) }
  }
  const [r, l] = await Promise.all([reads(ex), reads(here)])
  assert.equal(r.last.lossy, true)
  assert.equal(r.last.stdoutSpillPath, Array.from({ length: 5000 }, (_, i) => `${i + 1}\n`).join('') + Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join(''))
  assert.deepEqual(r.last, l.last)
  assert.deepEqual(r.after, l.after)
  // The first read came while it ran: what it holds depends on timing, but
  // it is the tail of the stream, and lossy with its spill file.
  assert.ok(r.first.endsWith('2999\n3000\n'), r.first.slice(-20))
})

test('done: `await p.done; p.readOutput()` returns everything', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const expected = Array.from({ length: 3000 }, (_, i) => `line ${i}\n`).join('')
  const ps = Array.from({ length: 5 }, () => ex.start(ex.resolve({ command: 'for i in $(seq 0 2999); do echo "line $i"; done; echo tail >&2' })))
  for (const p of ps) {
    await within(20_000, p.done, `${p.id}.done`)
    assert.equal(p.readOutput().delta, `${expected}[stderr]\ntail\n`)
  }
})

test('closeStdin right after a write of many pieces: the write goes down whole, then EOF', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const p = ex.start(ex.resolve({ command: 'sleep 0.3; wc -c', stdin: { pipe: true } }))
  // Four pieces: before, the close went out after the first and the server
  // refused the rest, a prefix delivered.
  const write = p.writeStdin(Buffer.alloc(4 << 20, 'y')).then(() => 'written', (e) => e)
  assert.equal(p.closeStdin(), true)
  const late = await failure(() => p.writeStdin('late'))
  assert.deepEqual([late.code, late.reason], ['STDIN_CLOSED', 'closed'])
  assert.equal(await within(20_000, write, 'the write'), 'written')
  await within(20_000, p.done, 'p.done')
  assert.equal(p.readOutput().delta.trim(), String(4 << 20))
})

test('writeStdin: back-pressure across the wire, order, closeStdin and its errors', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const dir = tmpdir()
  const go = path.join(dir, 'go')
  const p = ex.start(ex.resolve({ command: `while [ ! -e ${go} ]; do sleep 0.01; done; wc -c`, stdin: { pipe: true } }))
  assert.equal(p.hasStdinPipe, true)
  let written = false
  const big = p.writeStdin(Buffer.alloc(1 << 20, 'x')).then(() => {
    written = true
  })
  const more = p.writeStdin('tail')
  // A call sent after the write is answered after the server took it in:
  // the write, 16 times the stdin buffer, is still waiting.
  await ex.run(ex.resolve({ command: 'true' }))
  assert.equal(written, false)
  fs.writeFileSync(go, '')
  await within(20_000, Promise.all([big, more]), 'the writes')
  assert.equal(p.closeStdin(), true)
  assert.equal(p.closeStdin(), false)
  const closed = await failure(() => p.writeStdin('late'))
  assert.deepEqual([closed.code, closed.reason, closed.id], ['STDIN_CLOSED', 'closed', p.id])
  await within(10_000, p.done, 'p.done')
  assert.equal(p.readOutput().delta.trim(), String((1 << 20) + 4))
  const notPiped = ex.start(ex.resolve({ command: 'true' }))
  const localEx = local()
  const here = localEx.start(localEx.resolve({ command: 'true' }))
  for (const call of [(q) => q.writeStdin('x'), (q) => q.closeStdin(), (q) => q.writeStdin(5)]) {
    const [r, l] = await Promise.all([failure(() => call(notPiped)), failure(() => call(here))])
    assert.deepEqual({ ...shape(r), id: undefined, message: undefined }, { ...shape(l), id: undefined, message: undefined })
    assert.equal(r.message, l.message.replace(here.id, notPiped.id))
  }
  await notPiped.done
  const exited = await failure(() => notPiped.writeStdin('x'))
  assert.equal(exited.code, 'STDIN_CLOSED')
})

test("onExpiry 'background': the run hands over to the client's id, reads continue after the result", { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const first = ex.start(ex.resolve({ command: 'true' }))
  const dir = tmpdir()
  const go = path.join(dir, 'go')
  const r = await ex.run(ex.resolve({ command: `echo before; echo err >&2; while [ ! -e ${go} ]; do sleep 0.01; done; echo after`, timeoutMs: 200, onExpiry: 'background', owner: 'o' }))
  assert.deepEqual([r.timedOut, r.exitCode, r.signal, r.stdout.text, r.stderr.text], [true, null, null, 'before\n', 'err\n'])
  assert.equal(r.backgroundId, 'bash-2')
  assert.equal(first.id, 'bash-1')
  const p = ex.get(r.backgroundId)
  assert.ok(p instanceof RemoteShellProcess)
  assert.deepEqual([p.status, p.owner, p.command], ['running', 'o', `echo before; echo err >&2; while [ ! -e ${go} ]; do sleep 0.01; done; echo after`])
  assert.equal(ex.start(ex.resolve({ command: 'true' })).id, 'bash-3')
  fs.writeFileSync(go, '')
  await within(10_000, p.done, 'p.done')
  assert.deepEqual(p.readOutput(), { task: p, delta: 'after\n', lossy: false })
  // A run that ends before its timeout hands nothing over.
  const quick = await ex.run(ex.resolve({ command: 'echo quick', onExpiry: 'background' }))
  assert.equal(quick.backgroundId, undefined)
  // The signal of a handed-over run kills its process, as for start().
  const ac = new AbortController()
  const handed = await ex.run(ex.resolve({ command: 'echo up; sleep 30', timeoutMs: 200, onExpiry: 'background', signal: ac.signal }))
  const q = ex.get(handed.backgroundId)
  ac.abort()
  assert.equal(q.status, 'killed')
  await within(10_000, q.done, 'q.done')
  assert.equal(q.signal, 'SIGTERM')
  // A start's signal too.
  const ac2 = new AbortController()
  const s = ex.start(ex.resolve({ command: 'echo up; sleep 30', signal: ac2.signal }))
  await readUntil(s, 'up')
  ac2.abort()
  await within(10_000, s.done, 's.done')
  assert.deepEqual([s.status, s.signal], ['killed', 'SIGTERM'])
})

test('reconfigure: applied here at once and on the server; a bad field changes nothing', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const sub = path.join(WORK, 'sub')
  fs.mkdirSync(sub, { recursive: true })
  ex.reconfigure({ cwd: sub, timeoutMs: 5000, graceMs: 300 })
  const spec = ex.resolve({ command: 'pwd' })
  assert.deepEqual([spec.workdir, spec.timeoutMs], [sub, 5000])
  assert.equal((await ex.run(spec)).stdout.text, `${sub}\n`)
  const e = await failure(() => ex.reconfigure({ graceMs: 0 }))
  assert.deepEqual([e.code, e.field], ['INVALID_ARGUMENT', 'config.graceMs'])
  const moved = await failure(() => ex.reconfigure({ spillDir: tmpdir() }))
  assert.deepEqual([moved.code, moved.field], ['INVALID_ARGUMENT', 'config.spillDir'])
  assert.equal(ex.resolve({ command: 'true' }).workdir, sub)
  ex.reconfigure({ sandboxMode: 'read-only' })
  assert.equal(ex.sandboxMode, 'read-only')
  // Without a cwd the server's own is the base, here as there (the server
  // was started in this process's cwd).
  ex.reconfigure({})
  assert.equal(ex.sandboxMode, undefined)
  const here = ex.resolve({ command: 'pwd' })
  assert.equal(here.workdir, process.cwd())
  assert.equal((await ex.run(here)).stdout.text, `${process.cwd()}\n`)
  // A relative cwd is taken against the server's cwd (this process's here),
  // as a local executor takes it against its own.
  const relative = { cwd: path.relative(process.cwd(), sub) }
  ex.reconfigure(relative)
  const mine = local(relative)
  assert.equal(ex.resolve({ command: 'pwd' }).workdir, mine.resolve({ command: 'pwd' }).workdir)
  assert.equal((await ex.run(ex.resolve({ command: 'pwd' }))).stdout.text, (await mine.run(mine.resolve({ command: 'pwd' }))).stdout.text)
})

test('two executors are independent', { ...T, ...skipNoBin }, async () => {
  const [a, b] = await Promise.all([connect(), connect()])
  const pa = a.start(a.resolve({ command: 'echo a; sleep 30' }))
  const pb = b.start(b.resolve({ command: 'echo b; sleep 30' }))
  assert.deepEqual([pa.id, pb.id], ['bash-1', 'bash-1'])
  await Promise.all([readUntil(pa, 'a'), readUntil(pb, 'b')])
  assert.equal(a.kill('bash-1'), true)
  await within(10_000, pa.done, 'pa.done')
  assert.equal(pb.status, 'running')
  await a.dispose()
  assert.equal((await failure(() => a.run(a.resolve({ command: 'true' })))).code, 'DISPOSED')
  assert.equal((await failure(() => a.start(a.resolve({ command: 'true' })))).code, 'DISPOSED')
  assert.equal(pb.status, 'running')
  assert.equal((await b.run(b.resolve({ command: 'echo still' }))).stdout.text, 'still\n')
  await b.dispose()
  await b.dispose()
  assert.deepEqual([pb.status, pb.signal, pb.exitStatusUnavailable], ['killed', 'SIGTERM', undefined])
  assert.equal(pb.readOutput().delta, '')
})

test('a unix socket transport', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const sock = path.join(dir, 'dsh.sock')
  const server = spawn(DSH_BIN, ['serve', '--listen', `unix:${sock}`], { stdio: ['ignore', 'ignore', 'pipe'] })
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })))
  try {
    await within(10_000, fileAppears(sock), 'the socket')
    // The file exists from the bind; connections are taken from the listen
    // right after it: until then a connect is refused.
    let ex
    const up = await eventually(async () => {
      ex = await connect({}, { socket: sock }).catch((e) => {
        if (!/ECONNREFUSED/.test(e.message)) throw e
      })
      return ex !== undefined
    }, 10_000)
    assert.ok(up, 'the server listens')
    const p = ex.start(ex.resolve({ command: 'echo $$; sleep 30' }))
    const pid = Number((await readUntil(p, '\n')).trim())
    assert.equal((await ex.run(ex.resolve({ command: 'echo over a socket' }))).stdout.text, 'over a socket\n')
    await ex.dispose()
    assert.equal(p.status, 'killed')
    assert.equal(alive(pid), false)
    // The server outlives its connections.
    assert.equal(server.exitCode, null)
    const missing = await failure(() => RemoteShellExecutor.connect({ transport: { socket: path.join(dir, 'none.sock') } }))
    assert.equal(missing.code, 'CONNECTION_LOST')
    assert.match(missing.message, /unix:.*none\.sock.*ENOENT/)
  } finally {
    server.kill('SIGTERM')
    await within(10_000, exited, 'the server exit')
  }
})

/** A server started through `bash -c 'echo $$ > pidfile; exec …'`, so the test can kill the transport's process. */
function killable(dir, argv) {
  const pidfile = path.join(dir, 'transport.pid')
  const quoted = argv.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ')
  return { pidfile, transport: { command: ['bash', '-c', `echo $$ > ${pidfile}; exec ${quoted}`] } }
}

/** Kills the transport mid-run: pending calls fail CONNECTION_LOST in bounded time, processes settle, commands end. */
async function loseConnectionMidRun(transport, pidfile, config = {}) {
  const dir = tmpdir()
  const ex = await RemoteShellExecutor.connect({ transport, config: { graceMs: 300, cwd: dir, ...config } })
  opened.push(ex)
  const [runPid, bgPid] = [path.join(dir, 'run.pid'), path.join(dir, 'bg.pid')]
  const bg = ex.start(ex.resolve({ command: `echo $$ > ${bgPid}; echo bg; exec sleep 60` }))
  await readUntil(bg, 'bg')
  const settledHeard = []
  ex.onTaskDone((p) => settledHeard.push(p.id))
  const pending = ex.run(ex.resolve({ command: `echo $$ > ${runPid}; exec sleep 60` }))
  await fileAppears(runPid)
  await eventually(() => fs.readFileSync(runPid, 'utf8').endsWith('\n'))
  const pids = [runPid, bgPid].map((f) => Number(fs.readFileSync(f, 'utf8')))
  process.kill(Number(fs.readFileSync(pidfile, 'utf8')), 'SIGKILL')
  const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
  assert.equal(lost.code, 'CONNECTION_LOST')
  assert.ok(lost.message.includes('bash -c'), lost.message)
  await within(10_000, bg.done, 'the background process to settle')
  assert.deepEqual([bg.status, bg.exitCode, bg.signal, bg.exitStatusUnavailable], ['killed', null, null, true])
  assert.deepEqual(settledHeard, [bg.id])
  assert.equal((await failure(() => ex.run(ex.resolve({ command: 'true' })))).code, 'CONNECTION_LOST')
  assert.equal((await failure(() => ex.start(ex.resolve({ command: 'true' })))).code, 'CONNECTION_LOST')
  assert.equal((await failure(() => ex.reconfigure({}))).code, 'CONNECTION_LOST')
  assert.equal(bg.kill(), false)
  await ex.dispose()
  return pids
}

test('connect: a transport that never answers is ended at connectTimeoutMs, quoting its stderr; a bad timeout starts nothing', T, async () => {
  const dir = tmpdir()
  // Up, holding its pipes, deaf to the end of its input: as an ssh to a
  // host that drops every packet.
  const pidfile = path.join(dir, 'silent.pid')
  const silent = { command: ['sh', '-c', `echo $$ > '${pidfile}'; echo 'still connecting' >&2; exec sleep 600`] }
  const started = performance.now()
  const e = await failure(() => RemoteShellExecutor.connect({ transport: silent, connectTimeoutMs: 400 }))
  const took = performance.now() - started
  assert.equal(e.code, 'CONNECTION_LOST')
  assert.match(e.message, /did not answer initialize within 400 ms \(connectTimeoutMs\), so it was ended; its stderr ended with: still connecting/)
  assert.match(e.transport, /^`sh -c/)
  assert.ok(took >= 400 && took < 8000, `took ${took} ms`)
  const pid = Number(fs.readFileSync(pidfile, 'utf8'))
  assert.ok(await eventually(() => !alive(pid), 5000), 'the silent transport was left running')

  // A unix socket whose server accepts and never answers.
  const net = await import('node:net')
  const sockets = []
  const deaf = net.createServer((s) => sockets.push(s))
  const sock = path.join(dir, 'deaf.sock')
  await new Promise((resolve) => deaf.listen(sock, resolve))
  try {
    const e2 = await failure(() => RemoteShellExecutor.connect({ transport: { socket: sock }, connectTimeoutMs: 300 }))
    assert.equal(e2.code, 'CONNECTION_LOST')
    assert.match(e2.message, /did not answer initialize within 300 ms/)
  } finally {
    for (const s of sockets) s.destroy()
    deaf.close()
  }

  // Refused before anything starts, naming the option.
  const marker = path.join(dir, 'started')
  for (const bad of [0, -1, NaN, '1000', true, null]) {
    const refused = await failure(() => RemoteShellExecutor.connect({ transport: { command: ['sh', '-c', `touch '${marker}'`] }, connectTimeoutMs: bad }))
    assert.deepEqual([refused.code, refused.field], ['INVALID_ARGUMENT', 'connectTimeoutMs'], String(bad))
  }
  assert.equal(fs.existsSync(marker), false, 'a transport was started for a refused value')
})

test('connect: connectTimeoutMs Infinity, past the longest timer, and fractions connect as usual', { ...T, ...skipNoBin }, async () => {
  for (const connectTimeoutMs of [Infinity, 3e9, Number.MAX_VALUE, 20000.5, undefined]) {
    const ex = await RemoteShellExecutor.connect({ transport: STDIO, connectTimeoutMs })
    try {
      const r = await ex.run(ex.resolve({ command: 'echo ok' }))
      assert.equal(r.stdout.text, 'ok\n')
    } finally {
      await ex.dispose()
    }
  }
})

test('a transport that dies: calls fail with CONNECTION_LOST, processes settle, nothing hangs', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const { pidfile, transport } = killable(dir, [DSH_BIN, 'serve', '--stdio'])
  const pids = await loseConnectionMidRun(transport, pidfile)
  // The server was killed outright: its commands end with it (docs/host-death.md).
  const gone = await eventually(() => pids.every((pid) => !alive(pid)), 5000)
  assert.ok(gone, `still alive: ${pids.filter(alive)}`)
})

test('an idle executor does not keep Node running, and the server ends with it', { ...T, ...skipNoBin }, async () => {
  const { pidfile, transport } = killable(tmpdir(), [DSH_BIN, 'serve', '--stdio'])
  const script = `
    const { RemoteShellExecutor } = await import(process.argv[1])
    const ex = await RemoteShellExecutor.connect({ transport: JSON.parse(process.argv[2]) })
    const r = await ex.run(ex.resolve({ command: 'echo ran' }))
    const p = ex.start(ex.resolve({ command: 'sleep 0.3; echo bg' }))
    await p.done
    process.stdout.write(r.stdout.text + p.readOutput().delta)
  `
  const url = new URL('../../bindings-node/remote.mjs', import.meta.url).href
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, url, JSON.stringify(transport)], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  const code = await within(20_000, new Promise((resolve) => child.once('exit', resolve)), 'the host to exit by itself')
  assert.deepEqual([code, out], [0, 'ran\nbg\n'])
  const pid = Number(fs.readFileSync(pidfile, 'utf8'))
  assert.ok(await eventually(() => !alive(pid), 5000), 'the server ended with its host')
})

test('the harness plugin with a transport is the remote executor; a bad transport is refused at load', { ...T, ...skipNoBin }, async () => {
  const { Context } = await seam('@deepseek-ai/cordis')
  const { default: Subprocess } = await seam('@deepseek-ai/dsh-subprocess-local')
  const { default: Plugin } = await import(harnessUrl)
  const root = new Context()
  await root.plugin(Subprocess)
  await root.plugin(Plugin, { graceMs: 300, cwd: WORK, transport: STDIO })
  const p = root.shell.start(root.shell.resolve({ command: 'echo $$; sleep 30' }))
  assert.ok(p instanceof RemoteShellProcess)
  const pid = Number((await readUntil(p, '\n')).trim())
  assert.equal(root.shell.get(p.id), p)
  assert.equal((await root.shell.run(root.shell.resolve({ command: 'echo hi' }))).stdout.text, 'hi\n')
  await root.fiber.dispose()
  assert.equal(p.status, 'killed')
  assert.equal(alive(pid), false)
  // As with the local executor, a reload of the plugin alone keeps its
  // background processes (the composition owns them); a reload after the
  // connection was lost connects anew.
  const dir = tmpdir()
  const { pidfile, transport } = killable(dir, [DSH_BIN, 'serve', '--stdio'])
  const again = new Context()
  await again.plugin(Subprocess)
  const config = { graceMs: 300, cwd: WORK, transport }
  const first = again.plugin(Plugin, config)
  // Reachable before its start has connected: a clear error, not a crash.
  await new Promise((resolve) => setImmediate(resolve))
  assert.throws(() => again.shell.resolve({ command: 'true' }), (e) => e.code === 'NOT_CONNECTED')
  await first
  const kept = again.shell.start(again.shell.resolve({ command: 'echo up; sleep 30' }))
  await readUntil(kept, 'up')
  await first.dispose()
  const second = again.plugin(Plugin, config)
  await second
  assert.equal(again.shell.get(kept.id), kept)
  assert.equal(kept.status, 'running')
  const serverPid = Number(fs.readFileSync(pidfile, 'utf8'))
  process.kill(serverPid, 'SIGKILL')
  await within(10_000, kept.done, 'the process of a lost connection to settle')
  assert.equal(kept.exitStatusUnavailable, true)
  await second.dispose()
  await again.plugin(Plugin, config)
  assert.notEqual(Number(fs.readFileSync(pidfile, 'utf8')), serverPid, 'a new server')
  assert.equal((await again.shell.run(again.shell.resolve({ command: 'echo anew' }))).stdout.text, 'anew\n')
  await again.fiber.dispose()
  const bad = new Context()
  await bad.plugin(Subprocess)
  await assert.rejects(async () => bad.plugin(Plugin, { transport: { command: 'not an array' } }))
  await assert.rejects(async () => bad.plugin(Plugin, { graceMs: 0, transport: STDIO }), (e) => e.field === 'config.graceMs')
  await bad.fiber.dispose()
})

// ---------------------------------------------------------- terminals

/** An interactive bash with a prompt that is easy to wait for. */
const BASH = { argv: ['bash', '--norc', '--noprofile', '-i'], env: { PS1: '$ ', HISTFILE: '' } }

/** A terminal's output as it comes, through its consuming reads (`via: 'reads'`) or its `output` stream. */
function transcript(t, via) {
  let seen = ''
  let mark = 0
  let ended = false
  if (via === 'output') {
    t.output.on('data', (chunk) => (seen += chunk.toString('utf8')))
    t.output.on('end', () => (ended = true))
  }
  const take = () => {
    if (via !== 'reads') return
    const read = t.readOutput()
    seen += read.text
    ended = read.ended
  }
  return {
    get seen() {
      take()
      return seen
    },
    /** The output has ended, and everything is in `seen`. */
    get ended() {
      take()
      return ended
    },
    /** Waits for `needle` after what an earlier expect found. */
    async expect(needle) {
      const ok = await eventually(() => {
        take()
        return seen.indexOf(needle, mark) >= 0
      }, 30_000)
      if (!ok) throw new Error(`never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
      mark = seen.indexOf(needle, mark) + needle.length
    },
  }
}

/** Resolves once `t.output` has ended (it is read meanwhile). */
function outputEnd(t) {
  return new Promise((resolve, reject) => {
    if (t.output.readableEnded) return resolve()
    t.output.once('end', resolve)
    t.output.once('error', reject)
    t.output.resume()
  })
}

/** The outcome of a promise, errors reduced to their shape: for comparing faces. */
async function outcome(fn) {
  try {
    return { value: await fn() }
  } catch (e) {
    return { error: shape(e) }
  }
}

test('terminals: an interactive bash driven through write and readOutput, as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const drive = async (e) => {
    const t = await e.spawnTerminal(BASH)
    const out = transcript(t, 'reads')
    await out.expect('$ ')
    const waiting = await t.waitInputWaiting(30_000)
    const fg = await t.inspectForeground()
    await t.write('echo "$((6 * 7)) $TERM $(pwd)"\r')
    await out.expect(`42 xterm-256color ${WORK}`)
    await t.write(Buffer.from('echo "é${PS1}x"\r'))
    await out.expect('é$ x')
    await out.expect('$ ')
    assert.equal(t.exited, false)
    await t.write('exit 7\r')
    const done = await within(10_000, t.done, 'done')
    // The rest comes, then the end: readOutput() says `ended` with it.
    assert.ok(await eventually(() => out.ended, 10_000), 'the output ended')
    const after = []
    for (const call of [() => t.write('x'), () => t.inspectForeground(), () => t.waitInputWaiting(), () => t.signalForeground('SIGINT'), () => t.resize(10, 10), () => t.readOutput()]) {
      after.push(await outcome(call))
    }
    await t.terminate()
    return {
      type: typeof t.pid,
      pidIsGroup: fg.processGroupId === t.pid,
      waiting,
      inputWaiting: fg.inputWaiting,
      done,
      facts: [t.exited, t.exitStatusUnavailable, t.survivors],
      after,
      tail: out.seen.slice(out.seen.lastIndexOf('exit 7')),
    }
  }
  const [r, l] = await Promise.all([drive(ex), drive(here)])
  assert.deepEqual(r, l)
  assert.deepEqual(r.done, { exitCode: 7, signal: null })
  assert.equal(r.waiting, true)
  assert.equal(r.after[0].error.code, 'TERMINAL_CLOSED')
})

test('terminals: output as a Readable; resize seen by stty and by the foreground group, bad sizes refused as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const t = await ex.spawnTerminal({ ...BASH, rows: 30, cols: 100 })
  assert.ok(t instanceof RemoteTerminalHandle)
  const out = transcript(t, 'output')
  await out.expect('$ ')
  await t.write('stty size\r')
  await out.expect('30 100')
  // Sent in order with the write after it: the shell sees the new size.
  t.resize(50, 120)
  await t.write('echo size=$(stty size)\r')
  await out.expect('size=50 120')
  // A foreground program hears SIGWINCH.
  await t.write(`bash --norc -c 'trap "echo winch=\\$(stty size); exit 0" WINCH; echo armed; while :; do sleep 0.05; done'\r`)
  // Its output, not the echo of the line typed: the trap is set.
  await out.expect('armed\r\n')
  t.resize(40, 90)
  await out.expect('winch=40 90')
  await out.expect('$ ')
  // The local rules, the local words: the type of each first, then each range.
  const mine = await here.spawnTerminal({ argv: ['cat'] })
  const sizes = [[0, 80], [24, '80'], [1.5, 3], [65536, 1], [NaN, 1], [Infinity, 1], [-Infinity, 1], [undefined, 1], [-1, 1], [1e21, 1], [1e-7, 1], [-0, 1], [24, null], [0, 'x'], [24, 10n], [24, 0.5], [24, 70000], [-1.5e-300, 1]]
  for (const [rows, cols] of sizes) {
    const [r, l] = [await failure(() => t.resize(rows, cols)), await failure(() => mine.resize(rows, cols))]
    assert.deepEqual(shape(r), shape(l), String([rows, cols]))
    assert.ok(['terminal.rows', 'terminal.cols'].includes(r.field), r.field)
  }
  t.resize(1, 65535)
  await t.write('echo size=$(stty size)\r')
  await out.expect('size=1 65535')
  await mine.terminate()
  await t.write('exit\r')
  assert.deepEqual(await within(10_000, t.done, 'done'), { exitCode: 0, signal: null })
  await within(10_000, outputEnd(t), 'the end of output')
  assert.deepEqual(t.readOutput(), { text: '', ended: true })
  assert.equal(shape(await failure(() => t.resize(24, 80))).code, 'TERMINAL_CLOSED')
})

test("terminals: output events run in the async context of the spawn, as locally", { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const als = new AsyncLocalStorage()
  const t = await als.run('spawner', () => ex.spawnTerminal({ argv: ['bash', '-c', 'sleep 0.2; echo hi'] }))
  const seen = new Set()
  await als.run('elsewhere', async () => {
    t.output.on('data', () => seen.add(als.getStore()))
    await within(10_000, t.done, 'done')
    await within(10_000, outputEnd(t), 'the end of output')
  })
  assert.deepEqual([...seen], ['spawner'])
})

test('terminals: waitInputWaiting sees the written line taken first; its bad timeouts as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const dir = tmpdir()
  const fifo = path.join(dir, 'go')
  execFileSync('mkfifo', [fifo])
  // After each line it reads, it waits on the fifo, not the terminal.
  const t = await ex.spawnTerminal({ command: `while read -r x; do read -r y < '${fifo}'; done` })
  for (let i = 0; i < 5; i++) {
    assert.equal(await t.waitInputWaiting(30_000), true, `round ${i}`)
    await t.write(`line${i}\n`)
    assert.equal((await t.inspectForeground()).inputWaiting, false, `round ${i}: waiting right after a write`)
    assert.equal(await t.waitInputWaiting(200), false)
    fs.writeFileSync(fifo, 'go\n')
  }
  assert.equal(await t.waitInputWaiting(Infinity), true)
  const here = local()
  const mine = await here.spawnTerminal({ argv: ['cat'] })
  for (const bad of [-1, 'x', NaN, null, -Infinity]) {
    const [r, l] = await Promise.all([failure(() => t.waitInputWaiting(bad)), failure(() => mine.waitInputWaiting(bad))])
    assert.deepEqual(shape(r), shape(l), String(bad))
  }
  await mine.terminate()
  await t.terminate()
  assert.equal(await t.waitInputWaiting(), false)
})

test('terminals: signalForeground interrupts `sleep 100` and resolves with its group; the shell survives', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const t = await ex.spawnTerminal(BASH)
  const out = transcript(t, 'output')
  assert.equal(await t.waitInputWaiting(30_000), true)
  await t.write('sleep 100\r')
  let job
  assert.ok(await eventually(async () => (job = (await t.inspectForeground())?.processGroupId) !== t.pid, 30_000), 'sleep in the foreground')
  // Signalled before it became sleep, bash's forked child may swallow it.
  assert.ok(await eventually(() => comm(job) === 'sleep', 30_000), 'the job became sleep')
  assert.equal((await t.inspectForeground()).inputWaiting, false)
  assert.equal(await t.signalForeground('SIGINT'), job)
  assert.ok(await eventually(async () => (await t.inspectForeground())?.processGroupId === t.pid, 30_000), 'the shell in the foreground again')
  await t.write('echo st=$?\r')
  await out.expect('st=130')
  const mine = await here.spawnTerminal({ argv: ['cat'] })
  for (const bad of ['SIGUSR1', 'sigint', 5, undefined, '']) {
    const [r, l] = await Promise.all([failure(() => t.signalForeground(bad)), failure(() => mine.signalForeground(bad))])
    assert.deepEqual(shape(r), shape(l), String(bad))
  }
  await mine.terminate()
  // Ctrl-C typed is the line discipline's SIGINT, as for a person.
  await t.write('sleep 100\r')
  let again
  assert.ok(await eventually(async () => (again = (await t.inspectForeground())?.processGroupId) !== t.pid, 30_000))
  assert.ok(await eventually(() => comm(again) === 'sleep', 30_000), 'the job became sleep')
  await t.write('\x03')
  await t.write('echo again=$?\r')
  await out.expect('again=130')
  assert.equal(t.exited, false)
  await t.terminate()
  assert.equal(t.exited, true)
  assert.deepEqual(await t.done, { exitCode: null, signal: 'SIGHUP' })
  assert.equal(t.survivors, undefined)
})

test('terminals: terminate ends a session that traps HUP and TERM, with everything it started, as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const command = `trap '' HUP TERM; echo pid=$$; (trap '' HUP TERM; exec sleep 1000) & echo child=$!; while :; do sleep 0.1; done`
  const end = async (e) => {
    const t = await e.spawnTerminal({ command, graceMs: 300 })
    const out = transcript(t, 'reads')
    await out.expect('child=')
    await out.expect('\n')
    const pids = [...out.seen.matchAll(/(?:pid|child)=(\d+)/g)].map((m) => Number(m[1]))
    const first = t.terminate()
    assert.equal(t.terminate(), first, 'idempotent')
    await within(20_000, first, 'terminate')
    const facts = { done: await t.done, exited: t.exited, survivors: t.survivors, unavailable: t.exitStatusUnavailable, read: t.readOutput(), alive: pids.filter(alive) }
    await t.terminate()
    return { facts, pids }
  }
  const [r, l] = await Promise.all([end(ex), end(here)])
  assert.equal(r.pids.length, 2)
  assert.deepEqual(r.facts, l.facts)
  assert.deepEqual(r.facts, { done: { exitCode: null, signal: 'SIGKILL' }, exited: true, survivors: undefined, unavailable: undefined, read: { text: '', ended: true }, alive: [] })
})

test('terminals: a character is never split, through readOutput nor through output', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  for (const via of ['reads', 'output']) {
    const dir = tmpdir()
    const [sent, go] = [path.join(dir, 'sent'), path.join(dir, 'go')]
    // € is E2 82 AC and 😀 F0 9F 98 80: each printed in two parts, the second once told.
    const t = await ex.spawnTerminal({
      command: `printf 'a\\342\\202'; touch ${sent}; while [ ! -e ${go} ]; do sleep 0.01; done; printf '\\254b\\360\\237'; sleep 0.1; printf '\\230\\200c'`,
    })
    const chunks = []
    if (via === 'output') t.output.on('data', (chunk) => chunks.push(chunk))
    const out = transcript(t, via)
    await fileAppears(sent)
    await out.expect('a')
    fs.writeFileSync(go, '')
    await out.expect('c')
    assert.equal(out.seen, 'a€b😀c', via)
    for (const chunk of chunks) assert.deepEqual(Buffer.from(chunk.toString('utf8'), 'utf8'), chunk, 'every chunk whole UTF-8')
    assert.deepEqual(await within(10_000, t.done, 'done'), { exitCode: 0, signal: null })
  }
})

test('terminals: done and the output for programs that end at once, as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const requests = [
    { argv: ['true'] },
    { command: 'exit 3' },
    { command: 'kill -TERM $$' },
    { command: "printf 'héllo 😀\\n'; exit 1" },
    { command: 'echo "$A $DSH_B $TERM $PAGER"', env: { A: 'a' }, dshEnv: { DSH_B: 'b' } },
    { command: 'pwd', cwd: '..' },
    { command: 'stty size', rows: 7, cols: 9 },
  ]
  const end = async (e, request) => {
    const t = await e.spawnTerminal(request)
    const done = await within(10_000, t.done, JSON.stringify(request))
    let text = ''
    await within(
      10_000,
      eventually(() => {
        const read = t.readOutput()
        text += read.text
        return read.ended
      }),
      'the end of output',
    )
    return { done, text, exited: t.exited }
  }
  for (const request of requests) {
    const [r, l] = await Promise.all([end(ex, request), end(here, request)])
    assert.deepEqual(r, l, JSON.stringify(request))
  }
  // Its exit may be told before the spawn is answered: it is still its own.
  const many = await Promise.all(Array.from({ length: 20 }, () => ex.spawnTerminal({ argv: ['true'] })))
  const outcomes = await within(20_000, Promise.all(many.map((t) => t.done)), 'twenty exits')
  assert.deepEqual(outcomes, many.map(() => ({ exitCode: 0, signal: null })))
  assert.equal(new Set(many.map((t) => t.pid)).size, 20)
})

test('terminals: request errors are the local face\'s; an aborted signal sends nothing; dispose ends every session', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const requests = [
    null,
    'bash',
    { argv: ['true'], colums: 80 },
    { argv: ['true'], command: 'true' },
    {},
    { argv: [] },
    { argv: [''] },
    { argv: 'true' },
    { argv: ['true'], rows: 1.5 },
    { argv: ['true'], rows: 0 },
    { argv: ['true'], cols: 70000 },
    { argv: ['true'], graceMs: -1 },
    { argv: ['true'], env: { A: 1 } },
    { argv: ['true'], dshEnv: { NOT_DSH: 'x' } },
    { argv: ['true'], cwd: null },
    { argv: ['true'], signal: 5 },
    { argv: ['true'], sandboxPolicy: { mode: 'nope' } },
    { argv: ['true'], sandboxPolicy: { mode: 'read-only', network: 'loopback' } },
    { argv: ['no-such-program-dsh-remote'] },
    { argv: ['true'], cwd: '/nonexistent-dsh-remote' },
    { argv: ['true'], cwd: 'not-there' },
    { argv: ['true'], signal: AbortSignal.abort() },
    { argv: ['true'], rows: 0, signal: AbortSignal.abort() },
  ]
  for (const request of requests) {
    const [r, l] = await Promise.all([failure(() => ex.spawnTerminal(request)), failure(() => here.spawnTerminal(request))])
    assert.deepEqual(shape(r), shape(l), JSON.stringify(request))
  }
  const marker = path.join(tmpdir(), 'ran')
  assert.equal((await failure(() => ex.spawnTerminal({ command: `touch ${marker}`, signal: AbortSignal.abort() }))).code, 'ABORT_ERR')
  // Aborted after the call: the allocation went ahead, as locally.
  const ac = new AbortController()
  const spawning = ex.spawnTerminal({ command: 'echo kept; exec sleep 1000', signal: ac.signal })
  ac.abort()
  const kept = await spawning
  // The next terminal runs after both: had the first been sent, its file would be there.
  const later = await ex.spawnTerminal({ argv: ['true'] })
  await within(10_000, later.done, 'later.done')
  assert.equal(fs.existsSync(marker), false)
  const write = transcript(kept, 'output')
  await write.expect('kept')
  const pid = kept.pid
  await ex.dispose()
  assert.deepEqual([kept.exited, kept.exitStatusUnavailable, kept.survivors], [true, undefined, undefined])
  assert.deepEqual(await kept.done, { exitCode: null, signal: 'SIGHUP' })
  assert.equal(alive(pid), false)
  await within(10_000, outputEnd(kept), 'the end of output')
  await within(10_000, kept.terminate(), 'terminate after dispose')
  assert.equal((await failure(() => kept.write('x'))).code, 'TERMINAL_CLOSED')
  assert.equal((await failure(() => kept.resize(10, 10))).code, 'TERMINAL_CLOSED')
  assert.equal(await kept.inspectForeground(), undefined)
  assert.equal(await kept.waitInputWaiting(), false)
  assert.equal((await failure(() => ex.spawnTerminal({ argv: ['true'] }))).code, 'DISPOSED')
  assert.equal((await failure(() => ex.spawnTerminal({ argv: ['true'], rows: 0 }))).field, 'request.rows')
})

test('terminals: writes past one message go in pieces, whole and in call order; bad data refused as locally', { ...T, ...skipNoBin }, async () => {
  const ex = await connect()
  const here = local()
  const text = `${'é'.repeat(1_500_000)}ab` // 3 MB of UTF-8, more than one piece
  const bytes = Buffer.alloc(2_500_000, 'z')
  const all = Buffer.concat([Buffer.from('head'), Buffer.from(text), bytes, Buffer.from([0, 1, 2])])
  // Raw mode: every byte reaches the program as typed.
  const t = await ex.spawnTerminal({ command: `stty raw -echo; echo ready; head -c ${all.length} | sha256sum` })
  const out = transcript(t, 'output')
  await out.expect('ready')
  const writes = [t.write('head'), t.write(text), t.write(bytes), t.write(new Uint8Array([0, 1, 2]))]
  await within(60_000, Promise.all(writes), 'the writes')
  await out.expect(createHash('sha256').update(all).digest('hex'))
  assert.deepEqual(await within(10_000, t.done, 'done'), { exitCode: 0, signal: null })
  const mine = await here.spawnTerminal({ argv: ['cat'] })
  for (const bad of [5, null, undefined, {}, new ArrayBuffer(2), ['x']]) {
    const [r, l] = await Promise.all([failure(() => t.write(bad)), failure(() => mine.write(bad))])
    assert.deepEqual(shape(r), shape(l), String(bad))
  }
  await mine.terminate()
})

test('terminals: output respects back-pressure: nothing is asked for while its buffer is full, nothing is lost', { ...T, ...skipNoBin }, async () => {
  const bound = 16_384
  const ex = await connect({ maxOutputBytes: bound })
  const lines = 300_000
  const expected = Array.from({ length: lines }, (_, i) => `${i + 1}\r\n`).join('') + 'END\r\n'
  // Nobody reads: what waits here is bounded and the program is held still.
  const t = await ex.spawnTerminal({ command: `seq 1 ${lines}; echo END` })
  let got = ''
  assert.ok(await eventually(() => (got += t.readOutput().text).length > 0, 30_000))
  // Proving that nothing more happens takes a while of nothing happening.
  await new Promise((resolve) => setTimeout(resolve, 1000))
  assert.equal(t.exited, false, 'the program waits for its reader')
  const unread = t.readOutput().text
  assert.ok(Buffer.byteLength(unread) <= 2 * bound, `${Buffer.byteLength(unread)} bytes read ahead`)
  got += unread
  // The stream, paused: its buffer fills, and no more is asked for.
  const chunks = []
  t.output.on('data', (chunk) => chunks.push(chunk))
  await new Promise((resolve) => t.output.once('data', resolve))
  t.output.pause()
  await new Promise((resolve) => setTimeout(resolve, 1000))
  assert.equal(t.exited, false, 'the program waits for the paused stream')
  assert.ok(t.output.readableLength <= t.output.readableHighWaterMark + 2 * bound, String(t.output.readableLength))
  t.output.resume()
  await within(60_000, outputEnd(t), 'the end of output')
  got += Buffer.concat(chunks).toString('utf8') + t.readOutput().text
  assert.equal(got.length, expected.length)
  assert.equal(got, expected)
  assert.deepEqual(await t.done, { exitCode: 0, signal: null })
})

test('terminals: a lost transport fails pending calls, ends the output and resolves done as unavailable', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const { pidfile, transport } = killable(dir, [DSH_BIN, 'serve', '--stdio'])
  const ex = await RemoteShellExecutor.connect({ transport, config: { graceMs: 300, cwd: dir } })
  opened.push(ex)
  const t = await ex.spawnTerminal({ command: 'echo up=$$; exec sleep 1000' })
  const out = transcript(t, 'output')
  await out.expect('up=')
  await out.expect('\n')
  const pid = Number(/up=(\d+)/.exec(out.seen)[1])
  // The sleep never reads: this waits until the end.
  const pending = t.waitInputWaiting()
  const ended = outputEnd(t)
  process.kill(Number(fs.readFileSync(pidfile, 'utf8')), 'SIGKILL')
  const lost = await within(10_000, failure(() => pending), 'the pending call to fail')
  assert.equal(lost.code, 'CONNECTION_LOST')
  assert.ok(lost.message.includes('bash -c'), lost.message)
  assert.deepEqual(await within(10_000, t.done, 'done'), { exitCode: null, signal: null })
  assert.deepEqual([t.exited, t.exitStatusUnavailable], [true, true])
  await within(10_000, ended, 'the end of output')
  for (const call of [() => t.write('x'), () => t.inspectForeground(), () => t.waitInputWaiting(1), () => t.signalForeground('SIGINT'), () => t.terminate(), () => t.resize(10, 10), () => ex.spawnTerminal({ argv: ['true'] })]) {
    assert.equal((await failure(call)).code, 'CONNECTION_LOST', call.toString())
  }
  // The server was killed outright: its session ends with it (docs/host-death.md).
  assert.ok(await eventually(() => !alive(pid), 5000), `${pid} still alive`)
  await ex.dispose()
})

test('terminals: a running session keeps Node running as a local one does; an ended one does not', { ...T, ...skipNoBin }, async () => {
  const script = `
    const { RemoteShellExecutor } = await import(process.argv[1])
    const ex = await RemoteShellExecutor.connect({ transport: JSON.parse(process.argv[2]) })
    const t = await ex.spawnTerminal({ command: 'sleep 0.3; echo bye' })
    let seen = ''
    t.output.on('data', (c) => (seen += c))
    t.done.then((d) => process.on('exit', () => process.stdout.write(JSON.stringify({ d, seen }))))
  `
  const url = new URL('../../bindings-node/remote.mjs', import.meta.url).href
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, url, JSON.stringify(STDIO)], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  const code = await within(20_000, new Promise((resolve) => child.once('exit', resolve)), 'the host to exit by itself')
  assert.equal(code, 0)
  assert.deepEqual(JSON.parse(out), { d: { exitCode: 0, signal: null }, seen: 'bye\r\n' })
})

// ---------------------------------------------------------------- ssh

const SSH_SKIP = NO_BIN ?? sshdMissing()

test('over ssh: the same API; a killed ssh client fails the pending calls and leaves nothing running', { ...T, ...(SSH_SKIP ? { skip: SSH_SKIP } : {}) }, async () => {
  const sshd = await startSshd()
  const remote = `${DSH_BIN} serve --stdio`
  const ex = await connect({}, { command: sshd.argv(remote) })
  const r = await ex.run(ex.resolve({ command: 'echo over ssh; printf é >&2' }))
  assert.deepEqual([r.exitCode, r.stdout.text, r.stderr.text], [0, 'over ssh\n', 'é'])
  const big = ex.start(ex.resolve({ command: 'seq 1 100000' }))
  await within(20_000, big.done, 'big.done')
  const read = big.readOutput()
  assert.equal(read.lossy, true)
  assert.equal(fs.readFileSync(read.stdoutSpillPath, 'utf8'), Array.from({ length: 100000 }, (_, i) => `${i + 1}\n`).join(''))
  await ex.dispose()

  const dir = tmpdir()
  const { pidfile, transport } = killable(dir, sshd.argv(remote))
  const pids = await loseConnectionMidRun(transport, pidfile)
  // sshd closes the session; the server sees its input end and ends what it started.
  const gone = await eventually(() => pids.every((pid) => !alive(pid)), 5000)
  assert.ok(gone, `still alive: ${pids.filter(alive)}`)
})
