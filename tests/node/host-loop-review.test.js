'use strict'
// Foreground runs on the JS thread's own loop, tried hard: lost wakeups,
// a JS thread that does not turn while timers fire, workers that come and
// go, the process ending mid-run, dispose and abort at every moment, and
// the same answers as a run on the core's threads. A spec with `stdin: ''`
// takes the core's threads (bytes to write), the same spec without it the
// JS thread's loop: that pair compares the two paths. Whatever could hang
// runs in a child process with a timeout, so a hang fails.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')

const { executor, eventually, withMarker } = require('./helpers.js')

const ADDON = JSON.stringify(require.resolve('../../bindings-node'))

/** Runs `body` in a fresh node with `ex` ready; its stdout, or a failure that says why. */
function child(body, { timeout = 60000, config = '{ graceMs: 300 }' } = {}) {
  const script = `
    const fs = require('node:fs')
    const { NativeShellExecutor } = require(${ADDON})
    const ex = new NativeShellExecutor(${config})
    ${body}
  `
  const r = spawnSync(process.execPath, ['-e', script], { timeout, encoding: 'utf8' })
  assert.equal(r.signal, null, `the child was killed (a hang?): ${r.stdout}${r.stderr}`)
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`)
  return r.stdout
}

test('thousands of short runs in a row each settle: no wakeup is lost', () => {
  // A command that ends before its run is first polled: its events reach
  // the host loop's descriptor before the run's reactor watches them. Each
  // run has 5 s (it takes about a millisecond); two children at once load
  // the machine, as a full test run does, which makes the race likelier.
  const body = `
    ;(async () => {
      const commands = ['true', 'printf x >&2', 'echo x', 'exit 3']
      for (let i = 0; i < 1500; i++) {
        const command = commands[i % commands.length]
        const watchdog = setTimeout(() => {
          process.stdout.write('run ' + i + ' (' + command + ') did not settle within 5 s')
          process.exit(1)
        }, 5000)
        await ex.run(ex.resolve({ command }))
        clearTimeout(watchdog)
      }
      await ex.dispose()
    })()
  `
  const script = (b) => `const { NativeShellExecutor } = require(${ADDON}); const ex = new NativeShellExecutor({ graceMs: 300 }); ${b}`
  const { spawn } = require('node:child_process')
  return Promise.all(
    [0, 1].map(
      () =>
        new Promise((resolve, reject) => {
          const c = spawn(process.execPath, ['-e', script(body)], { timeout: 120000 })
          let out = ''
          c.stdout.on('data', (d) => (out += d))
          c.stderr.on('data', (d) => (out += d))
          c.on('error', reject)
          c.on('close', (code, signal) => {
            try {
              assert.equal(signal, null, `the child was killed (a hang?): ${out}`)
              assert.equal(code, 0, out)
              resolve()
            } catch (e) {
              reject(e)
            }
          })
        }),
    ),
  )
})

// The timer is the core runtime's, and a wake from another thread has a
// core thread poll the run: the signal does not wait for the JS thread.
test('the timeout stops the command on time though the JS thread is busy', () => {
  // docs/hosts.md: nothing on the host's side delays a command's timeout or
  // kill. The JS thread spins for 4 s; the command's timeout is 300 ms.
  const out = child(`
    const pidFile = require('node:path').join(require('node:os').tmpdir(), 'dsh-busy-' + process.pid)
    const pending = ex.run(ex.resolve({ command: 'echo $$ > ' + pidFile + '; exec sleep 30', timeoutMs: 300 }))
    let pid
    while (!pid) { try { pid = Number(fs.readFileSync(pidFile, 'utf8')) } catch {} }
    fs.unlinkSync(pidFile)
    const alive = () => { try { return !/\\) [ZX]/.test(fs.readFileSync('/proc/' + pid + '/stat', 'utf8')) } catch { return false } }
    const start = Date.now()
    let diedAfter = null
    while (Date.now() - start < 4000) {
      if (!alive()) { diedAfter = Date.now() - start; break }
    }
    pending.then(async (r) => {
      process.stdout.write(JSON.stringify({ diedAfter, timedOut: r.timedOut }))
      await ex.dispose()
    })
  `)
  const { diedAfter, timedOut } = JSON.parse(out)
  assert.equal(timedOut, true)
  assert.notEqual(diedAfter, null, 'the command was still running 4 s into the busy loop, its timeout being 300 ms')
})

// The stop's SIGTERM waits for the leader's pid, which comes on the report
// pipe: a JS thread that is busy from run() on must not hold it back (the
// TERM trap runs while the thread is still busy, not when it next turns).
// The same for a dispose() that the busy thread calls half-way (the trap
// is armed by then).
for (const [name, timeoutMs, dispose] of [
  ['the timeout', 300, ''],
  ['dispose()', 60000, 'ex.dispose()'],
]) {
  test(`${name}'s SIGTERM reaches a TERM trap though the JS thread is busy from run() on`, () => {
    const out = child(
      `
      const mark = require('node:path').join(require('node:os').tmpdir(), 'dsh-term-' + process.pid)
      const pending = ex.run(ex.resolve({ command: "trap 'echo got-term; touch " + mark + "; exit 7' TERM; sleep 30 & wait", timeoutMs: ${timeoutMs} }))
      const busy = (ms) => { const start = Date.now(); while (Date.now() - start < ms && !fs.existsSync(mark)) {} }
      busy(700)
      ${dispose}
      busy(3000)
      const trapRanWhileBusy = fs.existsSync(mark)
      pending.then((r) => {
        fs.rmSync(mark, { force: true })
        process.stdout.write(JSON.stringify({ trapRanWhileBusy, exitCode: r.exitCode, text: r.stdout.text }))
      })
    `,
      { config: '{ graceMs: 10000 }' },
    )
    assert.deepEqual(JSON.parse(out), { trapRanWhileBusy: true, exitCode: 7, text: 'got-term\n' })
  })
}

// A stop the JS thread asks for itself just before it goes busy (an
// abort): the SIGTERM goes out at once, not when the thread next turns.
test('an abort just before the JS thread goes busy reaches the TERM trap while it is busy', () => {
  const out = child(
    `
    const mark = require('node:path').join(require('node:os').tmpdir(), 'dsh-abort-busy-' + process.pid)
    const ac = new AbortController()
    const pending = ex.run(ex.resolve({ command: "trap 'touch " + mark + "; exit 7' TERM; echo ready; sleep 30 & wait", signal: ac.signal }))
    // The trap is armed by then (the thread turns meanwhile).
    setTimeout(async () => {
      ac.abort()
      const start = Date.now()
      while (Date.now() - start < 4000 && !fs.existsSync(mark)) {}
      const trapRanWhileBusy = fs.existsSync(mark)
      const r = await pending
      fs.rmSync(mark, { force: true })
      process.stdout.write(JSON.stringify({ trapRanWhileBusy, exitCode: r.exitCode, aborted: r.aborted }))
    }, 500)
  `,
    { config: '{ graceMs: 10000 }' },
  )
  assert.deepEqual(JSON.parse(out), { trapRanWhileBusy: true, exitCode: 7, aborted: true })
})

// A stop, then a JS thread busy past the grace and the 2 s the executor
// waits for a SIGKILLed leader: the core thread that polls the run then
// must still find the exit report the host's loop has not handed out.
test('an abort, then a JS thread busy past the grace and the give-up bound, keeps how the command died', () => {
  const out = child(
    `
    const ac = new AbortController()
    const pending = ex.run(ex.resolve({ command: 'echo ready; exec sleep 30', signal: ac.signal }))
    setTimeout(async () => {
      ac.abort()
      const start = Date.now()
      while (Date.now() - start < 4500) {}
      const r = await pending
      process.stdout.write(JSON.stringify({ signal: r.signal, aborted: r.aborted, text: r.stdout.text }))
    }, 300)
  `,
    { config: '{ graceMs: 300 }' },
  )
  assert.deepEqual(JSON.parse(out), { signal: 'SIGTERM', aborted: true, text: 'ready\n' })
})

// The executor's supervisor is stopped while a run waits (from outside its
// commands' reach: where Landlock cannot scope signals, before Linux 6.12, a
// command can do it with "kill -STOP $PPID"): the run settles at its
// timeout anyway, on either run path, and the next one runs.
test('a stopped supervisor does not wedge the executor', () => {
  const out = child(
    `
    ;(async () => {
      const times = []
      const supervisor = Number((await ex.run(ex.resolve({ command: 'echo $PPID' }))).stdout.text)
      for (const stdin of [undefined, '']) {
        const start = Date.now()
        const running = ex.run(ex.resolve({ command: 'sleep 30', timeoutMs: 2000, ...(stdin === undefined ? {} : { stdin }) }))
        await new Promise((resolve) => setTimeout(resolve, 200))
        process.kill(supervisor, 'SIGSTOP')
        const r = await running
        times.push([r.timedOut, Date.now() - start])
      }
      const again = await ex.run(ex.resolve({ command: 'echo again' }))
      process.stdout.write(JSON.stringify({ times, again: again.stdout.text }))
      await ex.dispose()
    })()
  `,
    { config: '{ graceMs: 500 }', timeout: 30000 },
  )
  const { times, again } = JSON.parse(out)
  for (const [timedOut, ms] of times) {
    assert.equal(timedOut, true)
    assert.ok(ms <= 2000 + 500 + 1000, `settled after ${ms} ms`)
  }
  assert.equal(again, 'again\n')
})

// Where Landlock scopes signals (ABI 6, Linux 6.12), every command runs in a
// domain that keeps its signals inside its own tree (docs/host-death.md).
test('a command cannot signal its supervisor or the host', async (t) => {
  const { execFileSync } = require('node:child_process')
  const abi = Number(
    execFileSync('python3', [
      '-c',
      'import ctypes; l = ctypes.CDLL(None); l.syscall.restype = ctypes.c_long; print(l.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint(1)))',
    ]).toString(),
  )
  if (abi < 6) {
    t.skip(`this kernel's Landlock (ABI ${abi}) cannot scope signals (ABI 6, Linux 6.12)`)
    return
  }
  const ex = executor()
  try {
    const probe = `kill -0 $PPID 2>/dev/null; echo supervisor=$?; kill -0 ${process.pid} 2>/dev/null; echo host=$?; sleep 30 & kill $!; wait $!; echo own=$?`
    const r = await ex.run(ex.resolve({ command: probe }))
    assert.equal(r.stdout.text, 'supervisor=1\nhost=1\nown=143\n')
  } finally {
    await ex.dispose()
  }
})

test('workers that run commands and go away leave no descriptors behind', () => {
  const out = child(`
    const { Worker } = require('node:worker_threads')
    const fds = () => fs.readdirSync('/proc/self/fd').length
    async function worker() {
      const w = new Worker(\`
        const { parentPort } = require('node:worker_threads')
        const { NativeShellExecutor } = require(${ADDON.replace(/\\/g, '\\\\')})
        const ex = new NativeShellExecutor()
        ex.run(ex.resolve({ command: 'true' })).then(async () => { await ex.dispose(); parentPort.postMessage('ok') })
      \`, { eval: true })
      await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) })
      await w.terminate()
    }
    ;(async () => {
      await worker()
      const before = fds()
      for (let i = 0; i < 20; i++) await worker()
      process.stdout.write(JSON.stringify({ before, after: fds() }))
      await ex.dispose()
    })()
  `)
  const { before, after } = JSON.parse(out)
  // A few descriptors of node's own may come and go; four per worker do not.
  assert.ok(after - before < 10, `20 workers left ${after - before} descriptors open (${before} -> ${after})`)
})

for (const [name, end] of [
  ['process.exit()', 'process.exit(0)'],
  ['an uncaught exception', "throw new Error('the host fails')"],
]) {
  test(`${name} mid-run leaves nothing running, though the command ignores SIGTERM`, async () => {
    const marker = `dsh-hlr-exit-${process.pid}-${name.length}`
    const script = `
      const { NativeShellExecutor } = require(${ADDON})
      const ex = new NativeShellExecutor({ graceMs: 300 })
      ex.run(ex.resolve({ command: "trap '' TERM; sleep 30; echo ${marker}" }))
      ex.run(ex.resolve({ command: 'sleep 30; echo ${marker}' }))
      setTimeout(() => { ${end} }, 300)
    `
    const r = spawnSync(process.execPath, ['-e', script], { timeout: 20000, encoding: 'utf8' })
    assert.equal(r.signal, null, 'the host ended by itself')
    assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its commands died with it')
  })
}

test('a worker terminated while busy mid-run leaves nothing running', async () => {
  const { Worker } = require('node:worker_threads')
  const marker = `dsh-hlr-busyworker-${process.pid}`
  const w = new Worker(
    `
    const { NativeShellExecutor } = require(${ADDON})
    const ex = new NativeShellExecutor({ graceMs: 300 })
    ex.run(ex.resolve({ command: "trap '' TERM; sleep 30; echo ${marker}" }))
    require('node:worker_threads').parentPort.postMessage('started')
    for (;;) {}
  `,
    { eval: true },
  )
  await new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  })
  assert.ok(await eventually(() => withMarker(marker) > 0), 'the command started')
  await w.terminate()
  assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its command ended with the worker')
})

test('dispose while host-loop runs are pending settles each run as aborted, SIGKILL after the grace', async () => {
  const ex = executor({ graceMs: 300 })
  const plain = ex.run(ex.resolve({ command: 'sleep 30' }))
  const stubborn = ex.run(ex.resolve({ command: "trap '' TERM; sleep 30 & wait; sleep 30" }))
  await new Promise((r) => setTimeout(r, 200))
  const disposed = ex.dispose()
  const [a, b] = await Promise.all([plain, stubborn])
  await disposed
  assert.equal(a.aborted, true)
  assert.equal(a.signal, 'SIGTERM')
  assert.equal(b.aborted, true)
  assert.equal(b.signal, 'SIGKILL')
  await assert.rejects(ex.run(ex.resolve({ command: 'true' })), { code: 'DISPOSED' })
})

test('an AbortSignal before, during and after a host-loop run', async () => {
  const ex = executor({ graceMs: 300 })
  await assert.rejects(ex.run(ex.resolve({ command: 'echo no', signal: AbortSignal.abort() })), { code: 'ABORT_ERR' })
  const during = new AbortController()
  const pending = ex.run(ex.resolve({ command: "trap '' TERM; sleep 30", signal: during.signal }))
  setTimeout(() => during.abort(), 100)
  const r = await pending
  assert.equal(r.aborted, true)
  assert.equal(r.signal, 'SIGKILL', 'killed once the grace was over')
  const after = new AbortController()
  const done = await ex.run(ex.resolve({ command: 'echo ok', signal: after.signal }))
  after.abort()
  assert.equal(done.stdout.text, 'ok\n')
  assert.equal(done.aborted, false)
  await ex.dispose()
})

test('hundreds of concurrent runs mixed with start(), stdin runs, timeouts and aborts, the JS thread busy at times', () => {
  const out = child(
    `
    const busy = (ms) => { const until = Date.now() + ms; while (Date.now() < until); }
    ;(async () => {
      const pending = []
      for (let i = 0; i < 300; i++) {
        const kind = i % 6
        if (kind === 0) pending.push(ex.run(ex.resolve({ command: 'echo ' + i })).then((r) => r.stdout.text))
        else if (kind === 1) pending.push(ex.run(ex.resolve({ command: 'cat; echo ' + i, stdin: '>' })).then((r) => r.stdout.text.slice(1)))
        else if (kind === 2) { const t = ex.start(ex.resolve({ command: 'echo ' + i })); pending.push(t.done.then(() => t.readOutput().delta)) }
        else if (kind === 3) pending.push(ex.run(ex.resolve({ command: 'sleep 0.$((RANDOM % 3)); echo ' + i })).then((r) => r.stdout.text))
        else if (kind === 4) pending.push(ex.run(ex.resolve({ command: 'sleep 5', timeoutMs: 100 + (i % 50) })).then((r) => (r.timedOut ? i + '\\n' : 'not timed out')))
        else {
          const ac = new AbortController()
          setTimeout(() => ac.abort(), i % 40)
          pending.push(ex.run(ex.resolve({ command: 'sleep 5', signal: ac.signal })).then(
            (r) => (r.aborted ? i + '\\n' : 'not aborted'),
            (e) => (e.code === 'ABORT_ERR' ? i + '\\n' : e.message),
          ))
        }
        if (i % 50 === 0) busy(150)
      }
      const results = await Promise.all(pending)
      const wrong = results.map((t, i) => [i, t]).filter(([i, t]) => t !== i + '\\n')
      process.stdout.write(JSON.stringify(wrong.slice(0, 5)))
      await ex.dispose()
    })()
  `,
    { timeout: 90000 },
  )
  assert.deepEqual(JSON.parse(out), [])
})

test('a run on the JS thread and one on the core threads answer alike', async () => {
  const ex = executor()
  const both = async (request) => {
    const outcome = async (extra) => {
      try {
        return { ok: await ex.run(ex.resolve({ ...request, ...extra })) }
      } catch (e) {
        return { error: [e.constructor.name, e.code, e.field, e.message] }
      }
    }
    const onLoop = await outcome({})
    const onCore = await outcome({ stdin: '' })
    assert.deepEqual(onLoop, onCore, JSON.stringify(request))
    return onLoop
  }
  const exited = await both({ command: 'echo out; echo err >&2; exit 3' })
  assert.deepEqual(Object.keys(exited.ok), ['exitCode', 'signal', 'timedOut', 'aborted', 'timeoutMs', 'stdout', 'stderr'])
  assert.equal((await both({ command: 'pwd', workdir: '/nonexistent/dsh-review' })).error[1], 'ENOENT')
  assert.equal((await both({ command: '/nonexistent/dsh-review' })).ok.exitCode, 127)
  await both({ command: 'kill -9 $$' })

  const refused = async (make) => {
    const outcome = async (extra) => {
      try {
        await ex.run(make(extra))
        return 'no error'
      } catch (e) {
        return [e.constructor.name, e.code, e.field, e.message]
      }
    }
    const onLoop = await outcome({})
    assert.deepEqual(onLoop, await outcome({ stdin: '' }))
    return onLoop
  }
  const unknown = await refused((extra) => ({ ...ex.resolve({ command: 'true', ...extra }), timeout_ms: 5 }))
  assert.equal(unknown[2], 'spec.timeout_ms')
  const inherited = await refused((extra) => Object.assign(Object.create({ stray: 1 }), ex.resolve({ command: 'true', ...extra })))
  assert.equal(inherited[2], 'spec.stray')
  const throwing = await refused((extra) => {
    const s = ex.resolve({ command: 'true', ...extra })
    Object.defineProperty(s, 'workdir', {
      enumerable: true,
      get() {
        throw new Error('a getter that throws')
      },
    })
    return s
  })
  assert.equal(throwing[3], 'a getter that throws')
  await ex.dispose()
})
