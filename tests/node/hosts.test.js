'use strict'
// A Node host that rewrites process.env while commands start: no crash, and
// each command sees the environment as it was when it was asked for.
const test = require('node:test')
const assert = require('node:assert/strict')

const { executor } = require('./helpers.js')

test('process.env rewritten between starts: each command sees its own call', async () => {
  const ex = executor()
  const tasks = []
  for (let i = 0; i < 300; i++) {
    // Growing the environment makes libc reallocate it under any reader.
    process.env[`DSH_HOST_FILL_${i}`] = 'x'.repeat(64)
    process.env.HOST_MARKER = String(i)
    tasks.push([i, ex.start(ex.resolve({ command: 'echo $HOST_MARKER' }))])
    if (i % 50 === 0) delete process.env[`DSH_HOST_FILL_${i}`]
    if (i % 25 === 0) await ex.run(ex.resolve({ command: 'true' }))
  }
  for (const [i, task] of tasks) {
    await task.done
    assert.equal(task.readOutput().delta, `${i}\n`)
  }
  for (let i = 0; i < 300; i++) delete process.env[`DSH_HOST_FILL_${i}`]
  await ex.dispose()
})

test('a command runs in a session of its own, without a controlling terminal', async () => {
  const ex = executor()
  const r = await ex.run(ex.resolve({ command: 'read -r x < /dev/tty; echo rc=$?; ps -o sid= -p $$; echo $$' }))
  const [rc, sid, pid] = r.stdout.text.trim().split('\n').map((s) => s.trim())
  assert.equal(rc, 'rc=1')
  assert.equal(sid, pid, 'the command leads its own session')
  await ex.dispose()
})
