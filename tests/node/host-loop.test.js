'use strict'
// Foreground runs on the JS thread's own loop (docs/node.md, "Where a run
// runs"): libuv wakes the JS thread when the command reports. What a host
// relies on: a pending run keeps the process alive and nothing more does,
// a busy JS thread loses nothing, and a worker that goes away mid-run
// leaves nothing running.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const { Worker } = require('node:worker_threads')

const { executor, eventually, withMarker } = require('./helpers.js')

const ADDON = JSON.stringify(require.resolve('../../bindings-node'))

test('a pending run keeps the process alive until it ends, and then nothing does', () => {
  const script = `
    const { NativeBashExecutor } = require(${ADDON})
    const ex = new NativeBashExecutor()
    ex.run(ex.resolve({ command: 'sleep 0.5; echo late' })).then((r) => process.stdout.write(r.stdout.text))
  `
  const r = spawnSync(process.execPath, ['-e', script], { timeout: 20000, encoding: 'utf8' })
  assert.equal(r.signal, null, 'the process ended by itself')
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.stdout, 'late\n')
})

test("a settlement that throws (a host's hostile prototype) is the host's uncaught exception, and later calls work", () => {
  // A setter on Array.prototype throws while the run's result is built, in
  // the turn libuv's callback starts: the error must reach
  // 'uncaughtException' and be cleared, not stay pending for the next call.
  const script = `
    const { NativeBashExecutor } = require(${ADDON})
    const ex = new NativeBashExecutor()
    const spec = ex.resolve({ command: 'true' })
    const sentinel = setTimeout(() => { process.stdout.write('no uncaught exception'); process.exit(3) }, 15000)
    process.on('uncaughtException', (e) => {
      delete Array.prototype[0]
      ex.run(spec).then(
        (r) => { clearTimeout(sentinel); process.stdout.write('uncaught: ' + e.message + '; later run: ' + r.exitCode); process.exit(0) },
        (err) => { clearTimeout(sentinel); process.stdout.write('later run failed: ' + err.message); process.exit(4) },
      )
    })
    Object.defineProperty(Array.prototype, '0', { set() { throw new Error('boom') }, configurable: true })
    ex.run(spec)
  `
  const r = spawnSync(process.execPath, ['-e', script], { timeout: 30000, encoding: 'utf8' })
  assert.equal(r.signal, null, 'the process ended by itself')
  assert.equal(r.stdout, 'uncaught: boom; later run: 0', r.stderr)
  assert.equal(r.status, 0, r.stderr)
})

test('a JS thread busy when the command ends still gets the whole result', async () => {
  // More than a pipe holds: the command waits for the loop to read.
  const ex = executor({ maxOutputBytes: 200000 })
  const pending = ex.run(ex.resolve({ command: 'seq 1 20000; echo err >&2', stdoutMaxBytes: 200000 }))
  const until = Date.now() + 500
  while (Date.now() < until) {
    // busy: the loop does not turn while the command writes and ends
  }
  const r = await pending
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout.truncated, false)
  assert.equal(r.stdout.text, Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join(''))
  assert.equal(r.stderr.text, 'err\n')
  await ex.dispose()
})

test('runs from a worker thread, and a worker terminated mid-run leaves nothing running', async () => {
  const marker = `dsh-worker-run-${process.pid}`
  const worker = new Worker(
    `
    const { parentPort } = require('node:worker_threads')
    const { NativeBashExecutor } = require(${ADDON})
    const ex = new NativeBashExecutor({ graceMs: 300 })
    ;(async () => {
      const r = await ex.run(ex.resolve({ command: 'echo from-worker' }))
      parentPort.postMessage(r.stdout.text)
      ex.run(ex.resolve({ command: 'sleep 30; echo ${marker}' }))
    })()
  `,
    { eval: true },
  )
  const [first] = await new Promise((resolve, reject) => {
    worker.once('message', (m) => resolve([m]))
    worker.once('error', reject)
  })
  assert.equal(first, 'from-worker\n')
  assert.ok(await eventually(() => withMarker(marker) > 0), 'the second command started')
  await worker.terminate()
  assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its command ended with the worker')
})

test('fifty runs at once on one JS thread all end with their own output', async () => {
  const ex = executor()
  const runs = Array.from({ length: 50 }, (_, i) => ex.run(ex.resolve({ command: `sleep 0.0${i % 10}; echo ${i}` })))
  const results = await Promise.all(runs)
  results.forEach((r, i) => assert.equal(r.stdout.text, `${i}\n`))
  await ex.dispose()
})
