// dsh-native/remote: a dropped connection to a server that keeps sessions
// (`dsh serve --stdio --linger`, which relays to a lingering `dsh serve
// --listen`) is started again and the session resumed: calls in flight get
// their answers, calls made meanwhile wait, and every process's output is
// read on from the client's own offsets. Real processes throughout: the
// transport is killed, never mocked.

import test, { after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { sshdMissing, startSshd } from './sshd.mjs'

const { alive, eventually, failure, readUntil, tmpdir, within } = createRequire(import.meta.url)('./helpers.js')
const remoteUrl = new URL('../../bindings-node/remote.mjs', import.meta.url).href
const { RemoteShellExecutor } = await import(remoteUrl)

const DSH_BIN = process.env.DSH_BIN ?? fileURLToPath(new URL('../../target/debug/dsh', import.meta.url))
const NO_BIN = fs.existsSync(DSH_BIN) ? undefined : `no dsh binary at ${DSH_BIN} (cargo build -p dsh-cli --bin dsh, or set DSH_BIN)`
const skipNoBin = NO_BIN ? { skip: NO_BIN } : {}
const NO_SS = (() => {
  try {
    execFileSync('ss', ['-V'], { stdio: 'ignore' })
    return undefined
  } catch {
    return 'no ss (iproute2) to read a stopped relay\'s input queue with'
  }
})()
const skipNoSs = NO_SS ? { skip: NO_SS } : {}
/** Generous: these wait on real servers, possibly on a loaded machine. */
const T = { timeout: 90_000 }

/** Every socket a test's lingering server listens at: whatever a test left is stopped at the end. */
const sockets = []
after(() => {
  for (const socket of sockets) stopLingering(socket)
})

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

/**
 * A transport through the relay (`dsh serve --stdio --linger LINGER
 * --socket`) to a lingering server of the test's own, started by a shell
 * that writes its pid (the relay's, once it execs) to `pidFile` each time
 * the client starts it. Once the file `hold` exists, a new start waits for
 * `go` before it relays: the client stays reconnecting for as long as the
 * test wants. Once `fail` exists, a new start exits at once with status 1.
 */
function relay(dir, linger) {
  const at = (name) => path.join(dir, name)
  const files = { pidFile: at('transport.pid'), socket: at('s.sock'), hold: at('hold'), go: at('go'), fail: at('fail') }
  sockets.push(files.socket)
  const script = [
    `echo $$ > ${files.pidFile}`,
    `if [ -e ${files.fail} ]; then exit 1; fi`,
    `if [ -e ${files.hold} ]; then while [ ! -e ${files.go} ]; do sleep 0.01; done; fi`,
    `exec "$0" serve --stdio --linger ${linger} --socket ${files.socket}`,
  ].join('; ')
  return { ...files, transport: { command: ['bash', '-c', script, DSH_BIN] } }
}

/**
 * How many bytes wait unread on `pid`'s standard input: Node gives a child
 * a socket there, whose receive queue `ss` shows.
 */
function queuedOnStdin(pid) {
  const line = execFileSync('ss', ['-x', '-p', '-H'], { encoding: 'utf8' })
    .split('\n')
    .find((l) => l.includes(`pid=${pid},fd=0)`))
  return line === undefined ? 0 : Number(line.trim().split(/\s+/)[2])
}

/**
 * SIGSTOP to `pid`, resolving once every thread of it is stopped: kill(2)
 * returns before a thread running on another CPU has taken the stop, and
 * such a thread may still read what is written next (a relay then passes
 * it on, which the tests stop it to prevent).
 */
async function stopProcess(pid) {
  process.kill(pid, 'SIGSTOP')
  const stopped = () => {
    try {
      return fs.readdirSync(`/proc/${pid}/task`).every((t) => fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8').split(') ')[1][0] === 'T')
    } catch {
      return false
    }
  }
  assert.ok(await eventually(stopped, 10_000), `process ${pid} did not stop`)
}

/** The pid of the transport as last started. */
function transportPid(r) {
  return Number(fs.readFileSync(r.pidFile, 'utf8'))
}

/** The lingering servers listening at `socket` (a relay starts one; it outlives the relay by design). */
function lingering(socket) {
  const pids = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let argv
    try {
      argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0')
    } catch {
      continue
    }
    if (argv.includes('--listen') && argv.includes(`unix:${socket}`) && alive(Number(entry))) pids.push(Number(entry))
  }
  return pids
}

/** SIGTERM to the lingering servers at `socket`: each ends every session it keeps, and exits. */
function stopLingering(socket) {
  for (const pid of lingering(socket)) {
    try {
      process.kill(pid, 'SIGTERM')
    } catch {
      // Gone meanwhile.
    }
  }
}

/** The executor disposed, then the lingering server stopped; nothing of the test is left running. */
async function cleanUp(ex, r) {
  await ex?.dispose()
  stopLingering(r.socket)
  assert.ok(await eventually(() => lingering(r.socket).length === 0, 10_000), `a lingering server at ${r.socket} did not stop`)
}

async function connect(transport, dir) {
  return RemoteShellExecutor.connect({ transport, config: { graceMs: 300, cwd: dir } })
}

test('over the relay, a drop mid-run is resumed: the run gets its result, a process its every byte once, a call made meanwhile waits', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  try {
    ex = await connect(r.transport, dir)
    const [bgOut, runOut, started] = ['bg.out', 'run.out', 'started'].map((f) => path.join(dir, f))
    // It writes before, during and after the drop; what it wrote is kept in a file to compare with.
    const bg = ex.start(ex.resolve({ command: `for i in $(seq 1 300); do echo "bg $i é"; sleep 0.005; done | tee ${bgOut}` }))
    let seen = await readUntil(bg, 'bg 5 é\n')
    const chunks = []
    const inFlight = ex.run(ex.resolve({ command: `touch ${started}; for i in $(seq 1 100); do echo "run $i"; sleep 0.01; done | tee ${runOut}; exit 7` }), {
      onOutput: (c) => chunks.push(c),
    })
    await fileAppears(started)
    fs.writeFileSync(r.hold, '')
    const first = transportPid(r)
    process.kill(first, 'SIGKILL')
    // A new transport was started and waits for `go`: the client is reconnecting.
    assert.ok(await eventually(() => transportPid(r) !== first, 10_000), 'the transport was started again')
    const meanwhile = ex.run(ex.resolve({ command: 'echo meanwhile' }))
    const startedMeanwhile = ex.start(ex.resolve({ command: 'echo started meanwhile' }))
    fs.writeFileSync(r.go, '')

    const result = await within(20_000, inFlight, 'the run across the drop')
    assert.deepEqual([result.exitCode, result.stdout.text], [7, fs.readFileSync(runOut, 'utf8')])
    // Streamed chunks: in order, each the bytes at its offset; those of the drop may be missing.
    const written = fs.readFileSync(runOut)
    let end = 0
    for (const c of chunks) {
      assert.equal(c.stream, 'stdout')
      assert.ok(c.offset >= end, `a chunk at ${c.offset} after one that ended at ${end}`)
      assert.ok(written.subarray(c.offset, c.offset + c.data.length).equals(Buffer.from(c.data)), `the chunk at ${c.offset}`)
      end = c.offset + c.data.length
    }
    assert.ok(chunks.length > 0)
    assert.equal((await within(20_000, meanwhile, 'the run made while reconnecting')).stdout.text, 'meanwhile\n')
    await within(20_000, startedMeanwhile.done, 'the process started while reconnecting')
    assert.equal(startedMeanwhile.readOutput().delta, 'started meanwhile\n')

    await within(20_000, bg.done, 'the background process across the drop')
    seen += bg.readOutput().delta
    assert.equal(seen, fs.readFileSync(bgOut, 'utf8'), 'every byte, once')
    assert.deepEqual([bg.status, bg.exitCode, bg.exitStatusUnavailable], ['completed', 0, undefined])
    // The same session: the far side's registry is this one's.
    assert.deepEqual(ex.list().map((p) => p.id), [bg.id, startedMeanwhile.id])
    assert.equal((await ex.run(ex.resolve({ command: 'echo after' }))).stdout.text, 'after\n')
  } finally {
    await cleanUp(ex, r)
  }
})

test('a resume attempt that never answers is ended at connectTimeoutMs and tried again', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 60)
  let ex
  try {
    ex = await RemoteShellExecutor.connect({ transport: r.transport, config: { graceMs: 300, cwd: dir }, connectTimeoutMs: 1000 })
    const started = path.join(dir, 'started')
    const inFlight = ex.run(ex.resolve({ command: `touch ${started}; sleep 1; echo done` }))
    await fileAppears(started)
    // The next start waits for a `go` that never comes: a silent ssh.
    fs.writeFileSync(r.hold, '')
    const first = transportPid(r)
    process.kill(first, 'SIGKILL')
    assert.ok(await eventually(() => transportPid(r) !== first, 10_000), 'the transport was started again')
    const silent = transportPid(r)
    // Ended at the connect timeout, not at the linger time (60 s).
    assert.ok(await eventually(() => !alive(silent), 10_000), 'the silent attempt was left running')
    fs.rmSync(r.hold)
    const result = await within(20_000, inFlight, 'the run across the drop')
    assert.deepEqual([result.exitCode, result.stdout.text], [0, 'done\n'])
  } finally {
    await cleanUp(ex, r)
  }
})

test('calls whose answers were lost with the drop: a start that never arrived settles as not started, a kill and a reconfigure are sent again', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  try {
    ex = await connect(r.transport, dir)
    const bg = ex.start(ex.resolve({ command: 'echo up; exec sleep 60' }))
    await readUntil(bg, 'up')
    const marker = path.join(dir, 'ran')
    process.kill(transportPid(r), 'SIGKILL')
    // Sent in the same turn as the kill, before the client can know: into
    // a transport that will never read them.
    const neverArrived = ex.start(ex.resolve({ command: `touch ${marker}` }))
    assert.equal(bg.kill(), true)
    ex.reconfigure({ graceMs: 300, cwd: dir, maxOutputBytes: 100 })

    await within(20_000, neverArrived.done, 'the start that never arrived to settle')
    assert.equal(neverArrived.status, 'killed')
    assert.match(neverArrived.readOutput().delta, /^\[stderr\]\nspawn failed: the connection to .* dropped before the server had this start/)
    assert.equal(fs.existsSync(marker), false)
    await within(20_000, bg.done, 'the killed process to settle')
    assert.deepEqual([bg.status, bg.signal, bg.exitStatusUnavailable], ['killed', 'SIGTERM', undefined])
    // The server has the new configuration: stderr is capped at its maxOutputBytes.
    const capped = await ex.run(ex.resolve({ command: 'seq 1 1000 >&2' }))
    assert.equal(capped.stderr.truncated, true)
    // Still one session: the process the server never had is this side's alone.
    assert.deepEqual(ex.list().map((p) => p.id), [bg.id, neverArrived.id])
  } finally {
    await cleanUp(ex, r)
  }
})

test('a write queued behind one lost with the drop is not sent: bytes never arrive out of order', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  try {
    ex = await connect(r.transport, dir)
    const got = path.join(dir, 'got')
    const p = ex.start(ex.resolve({ command: `cat > ${got}`, stdin: { pipe: true } }))
    await within(20_000, ex.run(ex.resolve({ command: 'true' })), 'the start to be answered')
    process.kill(transportPid(r), 'SIGKILL')
    // A goes into a transport that will never read it; B waits behind A.
    const a = p.writeStdin('A').then(() => 'written', (e) => e)
    const b = p.writeStdin('B').then(() => 'written', (e) => e)
    const [ea, eb] = await within(30_000, Promise.all([a, b]), 'the two writes to settle')
    assert.equal(ea.code, 'ANSWER_LOST', String(ea))
    assert.equal(eb.code, 'ANSWER_LOST', String(eb))
    assert.match(eb.message, /was not sent/)
    // The queue behind the lost write was refused; a new write goes.
    await p.writeStdin('C')
    p.closeStdin()
    await within(20_000, p.done, 'cat to end')
    assert.equal(fs.readFileSync(got, 'utf8'), 'C', 'B reached the program without A')
  } finally {
    await cleanUp(ex, r)
  }
})

test('a cancel lost with the drop is sent again once the session is resumed: the aborted run ends, it does not run on', { ...T, ...skipNoBin, ...skipNoSs }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  let first
  try {
    ex = await connect(r.transport, dir)
    const started = path.join(dir, 'started')
    const ac = new AbortController()
    const running = ex.run(ex.resolve({ command: `touch ${started}; echo up; exec sleep 60`, signal: ac.signal }))
    await fileAppears(started)
    // The relay is stopped, so the cancel waits in its input pipe, and the
    // pipe is lost with the relay: the server never hears it.
    first = transportPid(r)
    await stopProcess(first)
    ac.abort()
    assert.ok(await eventually(() => queuedOnStdin(first) > 0, 10_000), "the cancel never reached the stopped relay's input")
    process.kill(first, 'SIGKILL')
    const result = await within(20_000, running, 'the aborted run to end after the resume')
    assert.deepEqual([result.aborted, result.signal, result.stdout.text], [true, 'SIGTERM', 'up\n'])
    assert.notEqual(transportPid(r), first, 'resumed over a new transport')
  } finally {
    // Never left stopped: a failed check must not turn into a dispose that
    // waits on a relay that cannot run.
    if (first !== undefined && alive(first)) process.kill(first, 'SIGKILL')
    await cleanUp(ex, r)
  }
})

test('a resume answer that breaks the protocol ends the connection with that said, never an uncaught exception', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  // Once `fake` exists, the transport is a server that answers the resume
  // with a session whose `pending` is not a list.
  const fake = path.join(dir, 'fake')
  const answer = `const rl = require('readline').createInterface({ input: process.stdin }); rl.once('line', (l) => { const { id } = JSON.parse(l); process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id, result: { session: { resumed: true, pending: 5 } } }) + '\\n') })`
  const [cmd, flag, script, bin] = r.transport.command
  const transport = { command: [cmd, flag, `if [ -e ${fake} ]; then echo $$ > ${r.pidFile}; exec node -e "${answer}"; fi; ${script}`, bin] }
  const uncaught = []
  const onUncaught = (err) => uncaught.push(err)
  process.on('uncaughtException', onUncaught)
  let ex
  try {
    ex = await connect(transport, dir)
    const started = path.join(dir, 'started')
    const pending = ex.run(ex.resolve({ command: `touch ${started}; exec sleep 60` }))
    await fileAppears(started)
    fs.writeFileSync(fake, '')
    process.kill(transportPid(r), 'SIGKILL')
    const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
    assert.equal(lost.code, 'CONNECTION_LOST')
    assert.match(lost.message, /could not be resumed: .*pending/)
    assert.deepEqual(uncaught, [])
  } finally {
    process.off('uncaughtException', onUncaught)
    await cleanUp(ex, r)
  }
})

test('a terminal session across the drop: its output read on, a write made meanwhile delivered', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  try {
    ex = await connect(r.transport, dir)
    const term = await ex.spawnTerminal({ argv: ['cat'] })
    let seen = ''
    const readUntilText = async (needle) => {
      const ok = await eventually(() => {
        seen += term.readOutput().text
        return seen.includes(needle)
      })
      assert.ok(ok, `never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
    }
    await term.write('before\n')
    await readUntilText('before\r\nbefore\r\n')
    fs.writeFileSync(r.hold, '')
    const first = transportPid(r)
    process.kill(first, 'SIGKILL')
    assert.ok(await eventually(() => transportPid(r) !== first, 10_000), 'the transport was started again')
    const written = term.write('after\n')
    fs.writeFileSync(r.go, '')
    await within(20_000, written, 'the write made while reconnecting')
    await readUntilText('after\r\nafter\r\n')
    assert.equal(term.exited, false)
    await within(20_000, term.terminate(), 'terminate')
    assert.equal(term.exited, true)
  } finally {
    await cleanUp(ex, r)
  }
})

test('transport.reconnect false: a drop fails pending calls with CONNECTION_LOST, as without a lingering server', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  let ex
  try {
    ex = await connect({ ...r.transport, reconnect: false }, dir)
    const started = path.join(dir, 'started')
    const bg = ex.start(ex.resolve({ command: 'echo up; exec sleep 60' }))
    await readUntil(bg, 'up')
    const pending = ex.run(ex.resolve({ command: `touch ${started}; exec sleep 60` }))
    await fileAppears(started)
    const first = transportPid(r)
    process.kill(first, 'SIGKILL')
    const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
    assert.equal(lost.code, 'CONNECTION_LOST')
    await within(10_000, bg.done, 'the background process to settle')
    assert.deepEqual([bg.status, bg.exitStatusUnavailable], ['killed', true])
    assert.equal((await failure(() => ex.run(ex.resolve({ command: 'true' })))).code, 'CONNECTION_LOST')
    assert.equal(transportPid(r), first, 'not started again')
    const bad = await failure(() => RemoteShellExecutor.connect({ transport: { ...r.transport, reconnect: 'yes' } }))
    assert.deepEqual([bad.code, bad.field], ['INVALID_ARGUMENT', 'transport.reconnect'])
  } finally {
    await cleanUp(ex, r)
  }
})

test('a resume that cannot be made gives up: the lingering server killed too (its token refused), a transport that no longer starts (the linger time)', { ...T, ...skipNoBin }, async () => {
  // The relay and the lingering server killed: the next relay starts a new
  // server, which refuses the token at once.
  const killedDir = tmpdir()
  const killed = relay(killedDir, 2)
  let ex
  try {
    ex = await connect(killed.transport, killedDir)
    const started = path.join(killedDir, 'started')
    const bg = ex.start(ex.resolve({ command: 'echo up; exec sleep 60' }))
    await readUntil(bg, 'up')
    const pending = ex.run(ex.resolve({ command: `touch ${started}; exec sleep 60` }))
    await fileAppears(started)
    const [server] = lingering(killed.socket)
    // The relay is stopped first: it would otherwise see the server die and
    // end by itself (status 125) before its own SIGKILL arrives.
    await stopProcess(transportPid(killed))
    process.kill(server, 'SIGKILL')
    process.kill(transportPid(killed), 'SIGKILL')
    const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
    assert.equal(lost.code, 'CONNECTION_LOST')
    assert.match(lost.message, /was lost: it was killed by SIGKILL, and the session could not be resumed: .*no session to resume with this token/)
    await within(10_000, bg.done, 'the background process to settle')
    assert.deepEqual([bg.status, bg.exitStatusUnavailable], ['killed', true])
    assert.equal((await failure(() => ex.run(ex.resolve({ command: 'true' })))).code, 'CONNECTION_LOST')
  } finally {
    await cleanUp(ex, killed)
  }

  // A transport that exits each time it is started again: retried until
  // the 2 s linger time has passed since the drop, then given up.
  const failingDir = tmpdir()
  const failing = relay(failingDir, 2)
  ex = undefined
  try {
    ex = await connect(failing.transport, failingDir)
    const started = path.join(failingDir, 'started')
    const pending = ex.run(ex.resolve({ command: `touch ${started}; exec sleep 60` }))
    await fileAppears(started)
    fs.writeFileSync(failing.fail, '')
    const t0 = Date.now()
    process.kill(transportPid(failing), 'SIGKILL')
    const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
    const waited = Date.now() - t0
    assert.equal(lost.code, 'CONNECTION_LOST')
    assert.match(lost.message, /could not be resumed within its 2000 ms linger time \(the last attempt: it exited with status 1\)/)
    assert.ok(waited >= 1500 && waited < 8000, `gave up after ${waited} ms`)
  } finally {
    await cleanUp(ex, failing)
  }
})

/** `dsh serve --listen unix:SOCKET --linger LINGER`, a child of the test's, listening once this resolves. */
async function listening(socket, linger) {
  sockets.push(socket)
  const server = spawn(DSH_BIN, ['serve', '--listen', `unix:${socket}`, '--linger', String(linger)], { stdio: 'ignore' })
  const up = await eventually(
    () =>
      new Promise((resolve) => {
        const c = net.connect({ path: socket })
        c.once('connect', () => {
          c.destroy()
          resolve(true)
        })
        c.once('error', () => resolve(false))
      }),
    10_000,
  )
  assert.ok(up, `the server did not listen at ${socket}`)
  return server
}

/**
 * A unix socket at `socket` that relays each connection to `target`;
 * `cut()` ends every connection it relays (a dropped link; the server
 * sees its connection end, and keeps the session).
 */
function forwarder(socket, target) {
  const links = new Set()
  const server = net.createServer((client) => {
    const upstream = net.connect({ path: target })
    const end = () => {
      client.destroy()
      upstream.destroy()
      links.delete(end)
    }
    links.add(end)
    for (const s of [client, upstream]) {
      s.on('error', end)
      s.on('close', end)
    }
    client.pipe(upstream)
    upstream.pipe(client)
  })
  server.listen(socket)
  return {
    cut: () => [...links].forEach((end) => end()),
    close: () => server.close(),
  }
}

test('a socket transport: a dropped connection is connected again and resumed; one whose server died gives up within the linger time', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const socket = path.join(dir, 'real.sock')
  const server = await listening(socket, 30)
  const relayed = forwarder(path.join(dir, 'relayed.sock'), socket)
  let ex
  try {
    ex = await connect({ socket: path.join(dir, 'relayed.sock') }, dir)
    const [bgOut, started] = ['bg.out', 'started'].map((f) => path.join(dir, f))
    const bg = ex.start(ex.resolve({ command: `for i in $(seq 1 300); do echo "bg $i"; sleep 0.005; done | tee ${bgOut}` }))
    let seen = await readUntil(bg, 'bg 5\n')
    const inFlight = ex.run(ex.resolve({ command: `touch ${started}; sleep 0.5; echo across` }))
    await fileAppears(started)
    relayed.cut()
    const result = await within(20_000, inFlight, 'the run across the drop')
    assert.equal(result.stdout.text, 'across\n')
    await within(20_000, bg.done, 'the background process across the drop')
    seen += bg.readOutput().delta
    assert.equal(seen, fs.readFileSync(bgOut, 'utf8'), 'every byte, once')
    await ex.dispose()
  } finally {
    relayed.close()
    server.kill('SIGTERM')
  }

  // The server killed: nothing listens at the socket any more, which the
  // client tries until the 2 s linger time has passed.
  const gone = path.join(dir, 'gone.sock')
  const doomed = await listening(gone, 2)
  ex = await connect({ socket: gone }, dir)
  try {
    const pending = ex.run(ex.resolve({ command: 'sleep 60' }))
    const t0 = Date.now()
    doomed.kill('SIGKILL')
    const lost = await within(10_000, failure(() => pending), 'the pending run to fail')
    const waited = Date.now() - t0
    assert.equal(lost.code, 'CONNECTION_LOST')
    assert.match(lost.message, /could not be resumed within its 2000 ms linger time \(the last attempt: connect (ECONNREFUSED|ENOENT)/)
    assert.ok(waited >= 1500 && waited < 8000, `gave up after ${waited} ms`)
  } finally {
    await ex.dispose()
  }
})

test('reconnecting keeps Node running only while something waits on it; after dispose nothing does', { ...T, ...skipNoBin }, async () => {
  const dir = tmpdir()
  const r = relay(dir, 30)
  // A run across a drop, then dispose: the host exits by itself. Then an
  // idle executor whose transport drops and cannot come back (held): the
  // host exits by itself while it reconnects.
  const script = `
    const fs = await import('node:fs')
    const { RemoteShellExecutor } = await import(process.argv[1])
    const r = JSON.parse(process.argv[2])
    const pid = () => Number(fs.readFileSync(r.pidFile, 'utf8'))
    const ex = await RemoteShellExecutor.connect({ transport: r.transport })
    const running = ex.run(ex.resolve({ command: 'sleep 0.5; echo across' }))
    await new Promise((resolve) => setTimeout(resolve, 100))
    process.kill(pid(), 'SIGKILL')
    const { stdout } = await running
    await ex.dispose()
    process.stdout.write(stdout.text)
    const idle = await RemoteShellExecutor.connect({ transport: r.transport })
    fs.writeFileSync(r.hold, '')
    const first = pid()
    process.kill(first, 'SIGKILL')
    while (pid() === first) await new Promise((resolve) => setTimeout(resolve, 10))
  `
  try {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, remoteUrl, JSON.stringify(r)], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    const code = await within(30_000, new Promise((resolve) => child.once('exit', resolve)), 'the host to exit by itself')
    assert.deepEqual([code, out], [0, 'across\n'])
  } finally {
    // The held transport, never let through (it would start a server anew).
    try {
      process.kill(transportPid(r), 'SIGKILL')
    } catch {
      // Gone already.
    }
    await cleanUp(undefined, r)
  }
})

// ---------------------------------------------------------------- ssh

const SSH_SKIP = NO_BIN ?? sshdMissing()

test('over ssh: a killed ssh client mid-run is resumed over a new ssh connection', { ...T, ...(SSH_SKIP ? { skip: SSH_SKIP } : {}) }, async () => {
  const sshd = await startSshd()
  const dir = tmpdir()
  const socket = path.join(dir, 's.sock')
  sockets.push(socket)
  const pidFile = path.join(dir, 'ssh.pid')
  const remote = `${DSH_BIN} serve --stdio --linger 30 --socket ${socket}`
  const transport = { command: ['bash', '-c', `echo $$ > ${pidFile}; exec "$@"`, 'bash', ...sshd.argv(remote)] }
  let ex
  try {
    ex = await connect(transport, dir)
    const [bgOut, started] = ['bg.out', 'started'].map((f) => path.join(dir, f))
    const bg = ex.start(ex.resolve({ command: `for i in $(seq 1 300); do echo "bg $i"; sleep 0.005; done | tee ${bgOut}` }))
    let seen = await readUntil(bg, 'bg 5\n')
    const inFlight = ex.run(ex.resolve({ command: `touch ${started}; sleep 0.5; echo across; exit 3` }))
    await fileAppears(started)
    const first = Number(fs.readFileSync(pidFile, 'utf8'))
    process.kill(first, 'SIGKILL')
    const result = await within(30_000, inFlight, 'the run across the drop')
    assert.deepEqual([result.exitCode, result.stdout.text], [3, 'across\n'])
    assert.notEqual(Number(fs.readFileSync(pidFile, 'utf8')), first, 'a new ssh connection')
    await within(30_000, bg.done, 'the background process across the drop')
    seen += bg.readOutput().delta
    assert.equal(seen, fs.readFileSync(bgOut, 'utf8'), 'every byte, once')
    assert.equal(bg.status, 'completed')
  } finally {
    await cleanUp(ex, { socket })
  }
})
