'use strict'
// Bad input from a model or a plugin: always INVALID_ARGUMENT with `field`,
// in the harness's wording; never a raw binding message, never silence.
const test = require('node:test')
const assert = require('node:assert/strict')

const { executor, NativeShellExecutor } = require('./helpers.js')
const native = require('../../bindings-node')

function refused(fn, field, needle) {
  assert.throws(fn, (e) => {
    assert.equal(e.code, 'INVALID_ARGUMENT', `${e.message} (${e.code})`)
    assert.equal(e.field, field, e.message)
    if (needle) assert.ok(e.message.includes(needle), `${e.message} should mention ${needle}`)
    assert.ok(!/Failed to convert|Missing field|rust type|napi_/i.test(e.message), `a binding message leaked: ${e.message}`)
    return e instanceof Error
  })
}

async function rejected(promise, field, needle) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
    assert.equal(e.field, field, e.message)
    if (needle) assert.ok(e.message.includes(needle), e.message)
    return true
  })
}

test('unknown keys are refused, naming the key', () => {
  const ex = executor()
  refused(() => ex.resolve({ command: 'x', timeout_ms: 5 }), 'request.timeout_ms', 'not a known field')
  refused(() => ex.resolve({ command: 'x', work_dir: '/tmp' }), 'request.work_dir', 'not a known field')
  refused(() => ex.resolve({ command: 'x', sandboxPolicy: { mode: 'read-only', root: '/' } }), 'request.sandboxPolicy.root')
  refused(() => new NativeShellExecutor({ timeout: 5 }), 'config.timeout', 'not a known field')
  const spec = ex.resolve({ command: 'true' })
  refused(() => ex.start({ ...spec, cwd: '/' }), 'spec.cwd', 'not a known field')
})

test('wrong types on every field are refused, naming the field', () => {
  const ex = executor()
  refused(() => ex.resolve({}), 'request.command', 'required')
  refused(() => ex.resolve({ command: 5 }), 'request.command', 'must be a string, got number')
  refused(() => ex.resolve({ command: 'x', workdir: 7 }), 'request.workdir', 'string')
  refused(() => ex.resolve({ command: 'x', timeoutMs: '5' }), 'request.timeoutMs', 'number')
  refused(() => ex.resolve({ command: 'x', stdoutMaxBytes: null }), 'request.stdoutMaxBytes', 'number')
  refused(() => ex.resolve({ command: 'x', stdin: 5 }), 'request.stdin', 'a string, a Buffer or { pipe: true }')
  refused(() => ex.resolve({ command: 'x', onExpiry: 5 }), 'request.onExpiry', 'string')
  refused(() => ex.resolve({ command: 'x', env: 'A=1' }), 'request.env', 'object')
  refused(() => ex.resolve({ command: 'x', env: { A: 1 } }), 'request.env.A', 'string')
  refused(() => ex.resolve({ command: 'x', dshEnv: { DSH_X: true } }), 'request.dshEnv.DSH_X', 'string')
  refused(() => ex.resolve({ command: 'x', owner: 1 }), 'request.owner', 'string')
  refused(() => ex.resolve({ command: 'x', sandboxPolicy: 'read-only' }), 'request.sandboxPolicy', 'object')
  refused(() => ex.resolve({ command: 'x', sandboxPolicy: {} }), 'request.sandboxPolicy.mode', 'required')
  refused(() => ex.resolve({ command: 'x', signal: 'stop' }), 'request.signal', 'AbortSignal')
  refused(() => ex.resolve(null), 'request', 'object')
  refused(() => ex.resolve('ls'), 'request', 'object')
  refused(() => new NativeShellExecutor({ cwd: 1 }), 'config.cwd', 'string')
  refused(() => new NativeShellExecutor(5), 'config', 'object')
  refused(() => ex.onTaskDone(5), 'listener', 'function')
})

test('a spec that never went through resolve() says so', async () => {
  const ex = executor()
  refused(() => ex.start({ command: 'true' }), 'spec.workdir', 'resolve()')
  refused(() => ex.start({ command: 'true', workdir: '/tmp' }), 'spec.timeoutMs', 'resolve()')
  await rejected(ex.run({ command: 'true', workdir: '/tmp', timeoutMs: 10 }), 'spec.stdoutMaxBytes', 'resolve()')
  await rejected(ex.run({ ...ex.resolve({ command: 'true' }), signal: {} }), 'spec.signal', 'AbortSignal')
  await rejected(ex.run(undefined), 'spec', 'object')
})

test('numbers in the harness wording; a fractional timeout is accepted like the harness does', async () => {
  refused(() => new NativeShellExecutor({ graceMs: 2 ** 31 }), 'config.graceMs', 'graceMs must be no greater than 2147483647')
  refused(() => executor().resolve({ command: 'x', timeoutMs: 0 }), 'request.timeoutMs', 'request.timeoutMs must be a positive finite number')
  const ex = executor()
  const spec = ex.resolve({ command: 'echo ok', timeoutMs: 1500.5 })
  assert.equal(spec.timeoutMs, 1501)
  const r = await ex.run(spec)
  assert.deepEqual([r.exitCode, r.stdout.text, r.timeoutMs], [0, 'ok\n', 1501])
})

test('sandboxPolicy.sessionId survives from request to spec; absent optionals add no key', () => {
  const ex = executor()
  const spec = ex.resolve({ command: 'true', sandboxPolicy: { mode: 'read-only', workspaceRoot: '/tmp', sessionId: 's-1' } })
  assert.deepEqual(spec.sandboxPolicy, { mode: 'read-only', workspaceRoot: '/tmp', sessionId: 's-1' })
  const bare = ex.resolve({ command: 'true', sandboxPolicy: { mode: 'read-only' } })
  assert.deepEqual(Object.keys(bare.sandboxPolicy).sort(), ['mode', 'workspaceRoot'])
  assert.deepEqual(Object.keys(ex.resolve({ command: 'true', owner: undefined, stdin: undefined })).sort(), [
    'command',
    'sandboxPolicy',
    'stdoutMaxBytes',
    'timeoutMs',
    'workdir',
  ])
})

test('a spec the harness built (no owner key) is accepted by run and start', async () => {
  const ex = executor()
  const spec = { command: 'echo $DSH_X', workdir: '/tmp', timeoutMs: 5000, stdoutMaxBytes: 1000, sandboxPolicy: undefined, dshEnv: { DSH_X: 'y' } }
  assert.equal((await ex.run(spec)).stdout.text, 'y\n')
  const p = ex.start(spec)
  await p.done
  assert.equal(p.readOutput().delta, 'y\n')
  await ex.dispose()
})

test('reconfigure: new commands get the new limits; a bad field changes nothing', async () => {
  const ex = executor({ maxOutputBytes: 1000 })
  ex.reconfigure({ maxOutputBytes: 4, timeoutMs: 900 })
  const spec = ex.resolve({ command: 'printf abcdefgh' })
  assert.deepEqual([spec.timeoutMs, spec.stdoutMaxBytes], [900, 4])
  assert.deepEqual((await ex.run(spec)).stdout.text, 'efgh')
  refused(() => ex.reconfigure({ graceMs: -1 }), 'config.graceMs')
  assert.equal(ex.resolve({ command: 'true' }).timeoutMs, 900)
  refused(() => native.checkConfig({ maxOutputBytes: 'big' }), 'config.maxOutputBytes', 'number')
  assert.equal(native.checkConfig({ maxOutputBytes: 10 }), undefined)
  await ex.dispose()
})
