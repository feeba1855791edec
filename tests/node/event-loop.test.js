'use strict'
// The event loop stays responsive: spawning and waiting happen off the JS thread.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')

const { executor } = require('./helpers.js')

test('a timer keeps firing on schedule while 50 commands run', async () => {
  const ex = executor()
  const lags = []
  let last = performance.now()
  const timer = setInterval(() => {
    const now = performance.now()
    lags.push(now - last - 10)
    last = now
  }, 10)
  const runs = Array.from({ length: 50 }, (_, i) => ex.run(ex.resolve({ command: `sleep 0.3; echo ${i}` })))
  const results = await Promise.all(runs)
  clearInterval(timer)
  assert.deepEqual(results.map((r) => r.stdout.text), Array.from({ length: 50 }, (_, i) => `${i}\n`))
  assert.ok(lags.length >= 15, `timer fired only ${lags.length} times`)
  // Generous: a blocked loop would show lags of hundreds of milliseconds.
  assert.ok(Math.max(...lags) < 250, `max timer lag ${Math.max(...lags).toFixed(1)} ms`)
  await ex.dispose()
})

test('a timer keeps firing while a run reads a command that writes as fast as it is read', async () => {
  // A run is read on this thread's loop; its spill file takes everything,
  // so the pipe never empties while the command writes.
  const ex = executor({ maxSpillBytes: 2 ** 30 })
  const lags = []
  let last = performance.now()
  const timer = setInterval(() => {
    const now = performance.now()
    lags.push(now - last - 5)
    last = now
  }, 5)
  const r = await ex.run(ex.resolve({ command: 'head -c 600000000 /dev/zero', timeoutMs: 120_000 }))
  clearInterval(timer)
  assert.equal(r.exitCode, 0)
  assert.equal(fs.statSync(r.stdout.spillPath).size, 600_000_000)
  assert.ok(lags.length >= 5, `timer fired only ${lags.length} times`)
  // Generous: the loop held by the reading showed lags of 500 ms and more.
  assert.ok(Math.max(...lags) < 150, `max timer lag ${Math.max(...lags).toFixed(1)} ms`)
  fs.rmSync(r.stdout.spillPath)
  await ex.dispose()
})

test('many concurrent starts are all tracked, read and settled', async () => {
  const ex = executor()
  const tasks = Array.from({ length: 200 }, (_, i) => ex.start(ex.resolve({ command: `echo ${i}` })))
  await Promise.all(tasks.map((t) => t.done))
  assert.equal(ex.list().length, 200)
  tasks.forEach((t, i) => {
    assert.equal(t.status, 'completed')
    assert.equal(t.readOutput().delta, `${i}\n`)
  })
  await ex.dispose()
})

test('an idle executor does not keep the process alive', async () => {
  const { spawnSync } = require('node:child_process')
  const script = `
    const { NativeBashExecutor } = require(${JSON.stringify(require.resolve('../../bindings-node'))})
    const ex = new NativeBashExecutor()
    ex.onTaskDone(() => {})
    ex.run(ex.resolve({ command: 'echo done' })).then((r) => process.stdout.write(r.stdout.text))
  `
  const r = spawnSync(process.execPath, ['-e', script], { timeout: 20000, encoding: 'utf8' })
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.stdout, 'done\n')
})
