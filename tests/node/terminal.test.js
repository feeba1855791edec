'use strict'
// Terminal sessions through JavaScript (docs/terminals.md): the published
// SubprocessTerminalHandle shape with a real REPL, the `output` Readable,
// the kernel's input-waiting fact, signals, resize, and that nothing of a
// session survives terminate() or dispose.
const test = require('node:test')
const assert = require('node:assert/strict')

const path = require('node:path')
const { Worker } = require('node:worker_threads')

const { executor, alive, comm, eventually, nodeChild, withMarker } = require('./helpers.js')

const ADDON = path.join(__dirname, '../../bindings-node')

/** Runs `script` (CommonJS, with `ex` an executor) in a child Node; resolves with its stdout, failing on a hang. */
function child(script, timeoutMs = 30000) {
  const prelude = `const { NativeShellExecutor } = require(${JSON.stringify(ADDON)}); const ex = new NativeShellExecutor({ graceMs: 300 });
    const busy = (ms) => { const end = Date.now() + ms; while (Date.now() < end) {} };\n`
  return nodeChild(['-e', `(async () => { ${prelude}${script} })().catch((e) => { console.error(e); process.exit(1) })`], timeoutMs)
}

/** Collects `handle.output` and waits for patterns in it. */
function watch(handle) {
  let seen = ''
  let mark = 0
  handle.output.on('data', (chunk) => {
    seen += chunk.toString('utf8')
  })
  return {
    get seen() {
      return seen
    },
    async expect(pattern) {
      const ok = await eventually(() => seen.indexOf(pattern, mark) >= 0, 30000)
      if (!ok) throw new Error(`never saw ${JSON.stringify(pattern)}: ${JSON.stringify(seen)}`)
      mark = seen.indexOf(pattern, mark) + pattern.length
    },
  }
}

async function waiting(handle) {
  let last
  const ok = await eventually(async () => {
    last = await handle.inspectForeground()
    return last?.inputWaiting === true
  }, 30000)
  assert.ok(ok, `never waiting for input: ${JSON.stringify(last)}`)
  return last
}

const bash = { argv: ['bash', '--norc', '--noprofile', '-i'], env: { PS1: '$ ', HISTFILE: '' } }

test('a Python REPL answers through write, with output as a Readable', async () => {
  const ex = executor()
  try {
    const t = await ex.spawnTerminal({ argv: ['python3', '-i', '-q'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 1000 })
    assert.equal(typeof t.pid, 'number')
    const out = watch(t)
    await out.expect('>>> ')
    const fg = await waiting(t)
    assert.equal(fg.processGroupId, t.pid)
    await t.write('6 * 7\n')
    await out.expect('42')
    await t.write(Buffer.from("'\u00e9' * 3\n"))
    await out.expect("'\u00e9\u00e9\u00e9'")
    await waiting(t)
    await t.write('exit(4)\n')
    assert.deepEqual(await t.done, { exitCode: 4, signal: null })
    await new Promise((resolve) => t.output.on('end', resolve))
    await assert.rejects(t.write('x'), (e) => e.code === 'TERMINAL_CLOSED')
    assert.equal(await t.inspectForeground(), undefined)
  } finally {
    await ex.dispose()
  }
})

test('signalForeground interrupts the foreground job and resolves with its group; the shell survives', async () => {
  const ex = executor()
  try {
    const t = await ex.spawnTerminal(bash)
    const out = watch(t)
    await waiting(t)
    await t.write('sleep 100\n')
    let job
    assert.ok(await eventually(async () => (job = (await t.inspectForeground())?.processGroupId) !== t.pid))
    // Signalled before it became sleep, bash's forked child may swallow it.
    assert.ok(await eventually(() => comm(job) === 'sleep'), 'the job became sleep')
    assert.equal((await t.inspectForeground()).inputWaiting, false)
    assert.equal(await t.signalForeground('SIGINT'), job)
    assert.ok(await eventually(async () => (await t.inspectForeground())?.processGroupId === t.pid))
    await t.write('echo st=$?\n')
    await out.expect('st=130')
    await assert.rejects(t.signalForeground('SIGUSR1'), (e) => e.code === 'INVALID_ARGUMENT' && e.field === 'terminal.signal')
    assert.equal(t.exited, false)
    await t.terminate()
    assert.equal(t.exited, true)
    assert.equal(t.survivors, undefined)
  } finally {
    await ex.dispose()
  }
})

test('resize is seen by stty; bad sizes name the field', async () => {
  const ex = executor()
  try {
    const t = await ex.spawnTerminal({ ...bash, rows: 30, cols: 100 })
    const out = watch(t)
    await waiting(t)
    t.resize(50, 120)
    await t.write('echo size=$(stty size)\n')
    await out.expect('size=50 120')
    assert.throws(() => t.resize(0, 80), (e) => e.code === 'INVALID_ARGUMENT' && e.field === 'terminal.rows')
    assert.throws(() => t.resize(24, '80'), (e) => e.code === 'INVALID_ARGUMENT' && e.field === 'terminal.cols')
    await t.terminate()
  } finally {
    await ex.dispose()
  }
})

test('requests are read strictly', async () => {
  const ex = executor()
  try {
    await assert.rejects(ex.spawnTerminal({ argv: ['true'], colums: 80 }), (e) => e.field === 'request.colums')
    await assert.rejects(ex.spawnTerminal({ argv: ['true'], command: 'true' }), (e) => e.code === 'INVALID_ARGUMENT')
    await assert.rejects(ex.spawnTerminal({ argv: [] }), (e) => e.field === 'request.argv')
    await assert.rejects(ex.spawnTerminal({ argv: ['true'], rows: 1.5 }), (e) => e.field === 'request.rows')
    await assert.rejects(ex.spawnTerminal({ argv: ['no-such-program-dsh'] }), (e) => e.code === 'ENOENT')
    await assert.rejects(ex.spawnTerminal({ argv: ['true'], signal: AbortSignal.abort() }), (e) => e.code === 'ABORT_ERR')
  } finally {
    await ex.dispose()
  }
})

test('nothing of a session survives terminate() or dispose', async () => {
  const ex = executor()
  const pidsOf = (text) => [...text.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]))
  const one = await ex.spawnTerminal(bash)
  const out = watch(one)
  await waiting(one)
  await one.write("nohup sleep 1000 >/dev/null 2>&1 & echo pid=$!; (trap '' TERM HUP; exec sleep 1000) & echo pid=$!\n")
  assert.ok(await eventually(() => pidsOf(out.seen).length === 2))
  const pids = pidsOf(out.seen).concat(one.pid)
  await one.terminate()
  for (const p of pids) assert.equal(alive(p), false, `${p} survived terminate()`)

  const two = await ex.spawnTerminal(bash)
  const out2 = watch(two)
  await waiting(two)
  await two.write("setsid sh -c 'echo pid=$$; exec sleep 1000' & sleep 1000\n")
  assert.ok(await eventually(() => pidsOf(out2.seen).length === 1))
  const more = pidsOf(out2.seen).concat(two.pid)
  await ex.dispose()
  for (const p of more) assert.equal(alive(p), false, `${p} survived dispose`)
  await assert.rejects(ex.spawnTerminal(bash), (e) => e.code === 'DISPOSED')
})

test('waitInputWaiting sees the written line taken first; a pty relay follows its program', async () => {
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const { execFileSync } = require('node:child_process')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-node-waiting-'))
  const fifo = path.join(dir, 'go')
  execFileSync('mkfifo', [fifo])
  const ex = executor()
  try {
    // After each line it reads, it waits on the fifo, not the terminal.
    const t = await ex.spawnTerminal({ command: `while read -r x; do read -r y < '${fifo}'; done` })
    for (let i = 0; i < 5; i++) {
      assert.equal(await t.waitInputWaiting(30000), true)
      await t.write(`line${i}\n`)
      const fg = await t.inspectForeground()
      assert.equal(fg.inputWaiting, false, `round ${i}: waiting right after a write`)
      assert.equal(await t.waitInputWaiting(200), false)
      fs.writeFileSync(fifo, 'go\n')
    }
    await t.terminate()
    let hasScript = true
    try {
      execFileSync('script', ['--version'])
    } catch {
      hasScript = false
    }
    if (hasScript) {
      const r = await ex.spawnTerminal({ command: "script -qc 'echo in; sleep 1000' /dev/null" })
      await watch(r).expect('in')
      assert.equal(await r.waitInputWaiting(300), false)
      await r.terminate()
    }
  } finally {
    await ex.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

// A 128 MiB write to a program that never reads: what the process holds
// beyond the caller's own data while the write waits (docs/terminals.md:
// a Buffer is held, not copied; a string's UTF-8 encoding is made once).
// In a child process (memory alone; a hang fails instead of hanging the
// suite); peak RSS through VmHWM, reset once the caller's data exists.
const WRITE_MEMORY = `
const fs = require('node:fs')
const { NativeShellExecutor } = require(process.argv[1])
const kind = process.argv[2]
const status = (key) => Number(fs.readFileSync('/proc/self/status', 'utf8').match(new RegExp('^' + key + ':\\\\s+(\\\\d+)', 'm'))[1]) * 1024
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
;(async () => {
  const ex = new NativeShellExecutor({ graceMs: 300 })
  // Raw input: canonical mode takes (and drops) what overflows a line, so
  // the write would never wait.
  const t = await ex.spawnTerminal({ argv: ['bash', '--norc', '--noprofile', '-c', 'stty -icanon -echo; echo READY; exec sleep 1000'] })
  let seen = ''
  t.output.on('data', (c) => { seen += c.toString('utf8') })
  for (const end = Date.now() + 60000; !seen.includes('READY'); await sleep(10)) {
    if (Date.now() > end) throw new Error('never ready: ' + seen)
  }
  const size = 128 << 20
  let data
  if (kind === 'buffer') {
    data = Buffer.alloc(size, 'x')
  } else {
    data = 'x'.repeat(size)
    data.indexOf('y') // flattened now, not by the write
  }
  fs.writeFileSync('/proc/self/clear_refs', '5') // VmHWM := VmRSS
  const base = status('VmRSS')
  // The addon takes the data before write() returns its promise.
  const pending = t.write(data).then(() => 'written', (e) => e.code)
  let held = 0
  for (const end = Date.now() + 2000; Date.now() < end; await sleep(50)) {
    held = Math.max(held, status('VmRSS') - base)
  }
  await t.terminate()
  const outcome = await pending
  console.log(JSON.stringify({ held, peak: status('VmHWM') - base, outcome, size: data.length }))
  process.exit(0)
})().catch((e) => { console.error(e); process.exit(1) })
`

for (const kind of ['buffer', 'string']) {
  test(`a big ${kind} write to a program that never reads copies nothing more`, () => {
    const { spawnSync } = require('node:child_process')
    const addon = require('node:path').resolve(__dirname, '../../bindings-node')
    const r = spawnSync(process.execPath, ['-e', WRITE_MEMORY, addon, kind], { timeout: 120000, encoding: 'utf8' })
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}${r.error ?? ''}`)
    const seen = JSON.parse(r.stdout.trim().split('\n').pop())
    console.log(kind, seen)
    assert.equal(seen.outcome, 'TERMINAL_CLOSED')
    // A Buffer is held itself; a string's UTF-8 encoding (one copy, the
    // bytes a terminal takes) is held instead.
    const allowed = (kind === 'buffer' ? 0 : 128 << 20) + (48 << 20)
    assert.ok(seen.held < allowed, JSON.stringify(seen))
    assert.ok(seen.peak < allowed, JSON.stringify(seen))
  })
}

test('the output ends after done, so `await t.done` then waiting for the end never misses it', async () => {
  const ex = executor()
  try {
    const order = []
    for (let i = 0; i < 40; i++) {
      const t = await ex.spawnTerminal({ argv: ['bash', '-c', `echo ${i}`], cwd: '/tmp', rows: 24, cols: 80, graceMs: 1000 })
      const seen = []
      t.output.on('data', () => {})
      t.output.on('end', () => seen.push('end'))
      t.done.then(() => seen.push('done'))
      await new Promise((resolve) => t.output.on('close', resolve))
      await t.done
      order.push(seen.join(','))
    }
    assert.deepEqual(new Set(order), new Set(['done,end']))
  } finally {
    await ex.dispose()
  }
})

// The session is read on the JS thread's own loop (docs/terminals.md):
// what could leave a reader waiting is tried here.

test('output written past a full buffer reaches a slow reader, all of it in order', async () => {
  // The buffer fills while the reader pauses; the room its reads make is
  // answered by a core thread, whose reads must reach the JS thread.
  const ex = executor({ maxOutputBytes: 4096 })
  try {
    const t = await ex.spawnTerminal({ argv: ['bash', '-c', 'seq 1 20000; echo end; exec sleep 60'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
    let seen = ''
    t.output.on('data', (chunk) => {
      seen += chunk.toString('utf8')
      t.output.pause()
      setTimeout(() => t.output.resume(), 1)
    })
    assert.ok(await eventually(() => seen.includes('end'), 30000), `never saw the end: ${seen.length} chars`)
    const numbers = seen.replace('end', '').split(/\s+/).filter(Boolean)
    assert.deepEqual(numbers, Array.from({ length: 20000 }, (_, i) => String(i + 1)))
    await t.terminate()
  } finally {
    await ex.dispose()
  }
})

test('a program that writes and exits while the JS thread is busy: every line and the exit arrive once it turns', async () => {
  const out = await child(`
    const t = await ex.spawnTerminal({ argv: ['bash', '-c', 'for i in $(seq 1 3000); do echo line $i; done; exit 5'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
    busy(2000)
    let seen = ''
    for await (const chunk of t.output) seen += chunk.toString('utf8')
    const lines = seen.split(/\\r?\\n/).filter(Boolean)
    console.log(JSON.stringify({ done: await t.done, count: lines.length, last: lines[lines.length - 1], ordered: lines.every((l, i) => l === 'line ' + (i + 1)) }))
    await ex.dispose()
  `)
  assert.deepEqual(JSON.parse(out), { done: { exitCode: 5, signal: null }, count: 3000, last: 'line 3000', ordered: true })
})

test('terminate() while the JS thread is busy past the grace: the session ends on time, and its exit is kept', async () => {
  const out = await child(`
    const t = await ex.spawnTerminal({ argv: ['bash', '-c', "trap '' HUP TERM; echo ready; exec sleep 30"], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
    let seen = ''
    t.output.on('data', (c) => (seen += c))
    while (!seen.includes('ready')) await new Promise((r) => setTimeout(r, 10))
    const stopped = t.terminate()
    const fs = require('node:fs')
    const state = () => { try { return fs.readFileSync('/proc/' + t.pid + '/stat', 'utf8').split(') ')[1][0] } catch { return 'gone' } }
    const end = Date.now() + 4000
    let killedWhileBusy = false
    while (Date.now() < end) { if (['Z', 'X', 'gone'].includes(state())) { killedWhileBusy = true; break } }
    busy(3000)
    await stopped
    console.log(JSON.stringify({ killedWhileBusy, unavailable: t.exitStatusUnavailable ?? false, done: await t.done }))
    await ex.dispose()
  `)
  assert.deepEqual(JSON.parse(out), { killedWhileBusy: true, unavailable: false, done: { exitCode: null, signal: 'SIGKILL' } })
})

test('a worker that goes away with a terminal running leaves nothing of it running', async () => {
  const marker = `dsh-terminal-worker-${process.pid}`
  const w = new Worker(
    `
    const { parentPort } = require('node:worker_threads')
    const { NativeShellExecutor } = require(${JSON.stringify(ADDON)})
    ;(async () => {
      const ex = new NativeShellExecutor({ graceMs: 300 })
      await ex.spawnTerminal({ argv: ['bash', '-c', "trap '' HUP TERM; sleep 30; echo ${marker}"], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
      parentPort.postMessage('started')
    })()
  `,
    { eval: true },
  )
  await new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  })
  assert.ok(await eventually(() => withMarker(marker) > 0), 'the session started')
  await w.terminate()
  assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its session ended with the worker')
})

test('a write to a program that reads without printing completes (the JS thread is woken by room, not only by output)', async () => {
  const out = await child(`
    const t = await ex.spawnTerminal({ argv: ['bash', '-c', 'stty raw -echo; echo ready; head -c 200000 >/dev/null; echo took-all'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
    let seen = ''
    t.output.on('data', (c) => (seen += c))
    while (!seen.includes('ready')) await new Promise((r) => setTimeout(r, 10))
    await t.write(Buffer.alloc(200000, 'x'))
    while (!seen.includes('took-all')) await new Promise((r) => setTimeout(r, 10))
    console.log(JSON.stringify(await t.done))
    await ex.dispose()
  `, 20000)
  assert.deepEqual(JSON.parse(out), { exitCode: 0, signal: null })
})

test('dispose() right after spawnTerminal(), with the JS thread busy before and after: the session is ended within its grace', async () => {
  const out = await child(`
    const fs = require('node:fs')
    // Made here, not written in this script: the script is in this node's own command line.
    const marker = 'dsh-terminal-unstarted-' + process.pid
    const running = () => fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).some((p) => { try { return fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').includes(marker) } catch { return false } })
    const spawned = ex.spawnTerminal({ argv: ['bash', '-c', "trap '' HUP TERM; sleep 30; echo " + marker], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 })
    // Busy for 500 ms, in which the program must be seen running (it is
    // the supervisor's child before it has exec'd bash).
    const until = Date.now() + 500
    let started = false
    while (Date.now() < until) if (!started) started = running()
    const disposed = ex.dispose()
    // Busy: the grace and the SIGKILL must come from the core's threads.
    const end = Date.now() + 4000
    let endedWhileBusy = false
    while (Date.now() < end) { if (!running()) { endedWhileBusy = true; break } }
    await spawned
    await disposed
    console.log(JSON.stringify({ started, endedWhileBusy }))
  `)
  assert.deepEqual(JSON.parse(out), { started: true, endedWhileBusy: true })
})

test('readers waiting together when the session ends on a core thread are each settled, in the order they asked', async () => {
  // The addon's handle (the Readable asks one at a time): two readers wait,
  // the stop ends the session while the JS thread is busy.
  const out = await child(`
    const { NativeExecutor, NativeCancelToken } = require(${JSON.stringify(path.join(ADDON, 'loader.js'))})
    const native = new NativeExecutor({ graceMs: 300 })
    const t = await native.spawnTerminal({ argv: ['bash', '-c', "trap 'echo bye; exit 0' HUP TERM; echo ready; while :; do sleep 0.05; done"], cwd: '/tmp', rows: 24, cols: 80, graceMs: 300 }, new NativeCancelToken())
    let seen = ''
    while (!seen.includes('ready')) { seen += t.readOutput().text; await new Promise((r) => setTimeout(r, 10)) }
    const a = t.nextOutput()
    const b = t.nextOutput()
    t.terminate()
    busy(3000)
    const got = await Promise.race([Promise.all([a, b]), new Promise((r) => setTimeout(() => r('B never settled'), 5000))])
    console.log(JSON.stringify(got))
    await native.dispose()
  `)
  const got = JSON.parse(out)
  assert.notEqual(got, 'B never settled')
  assert.match(got[0], /bye/)
  assert.equal(got[1], null)
})
