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

test('by-id methods refuse an id that is not a string: INVALID_ARGUMENT naming id and what it got', async () => {
  const ex = executor()
  for (const method of ['get', 'kill', 'readOutput', 'ownerOf', 'forget']) {
    refused(() => ex[method](5), 'id', 'id must be a string, got number')
    refused(() => ex[method]({}), 'id', 'id must be a string, got object')
    refused(() => ex[method](null), 'id', 'id must be a string, got null')
    refused(() => ex[method](), 'id', 'id must be a string, got undefined')
  }
  // A string is looked up as before: unknown is undefined for get, NOT_FOUND for the rest.
  assert.equal(ex.get('nope'), undefined)
  for (const method of ['kill', 'readOutput', 'ownerOf', 'forget']) {
    assert.throws(() => ex[method]('nope'), (e) => e.code === 'NOT_FOUND')
  }
  const p = ex.start(ex.resolve({ command: 'echo hi', owner: 'me' }))
  await p.done
  assert.equal(ex.get(p.id), p)
  assert.equal(ex.ownerOf(p.id), 'me')
  assert.equal(ex.readOutput(p.id).delta, 'hi\n')
  ex.forget(p.id)
  assert.equal(ex.get(p.id), undefined)
  await ex.dispose()
})

test('env and dshEnv take a plain object only: a Map, an array or a class instance is refused, never read as no env', async () => {
  const ex = executor()
  class Vars {
    constructor() {
      this.DSH_A = '1'
    }
  }
  const spec = ex.resolve({ command: 'true' })
  for (const key of ['env', 'dshEnv']) {
    for (const [value, got] of [
      [new Map([['DSH_A', '1']]), 'got Map'],
      [new Map(), 'got Map'],
      [[], 'got array'],
      [['DSH_A=1'], 'got array'],
      [new Vars(), 'got Vars'],
      [new Date(0), 'got Date'],
    ]) {
      refused(() => ex.resolve({ command: 'true', [key]: value }), `request.${key}`, `request.${key} must be a plain object of strings, ${got}`)
      refused(() => ex.start({ ...spec, [key]: value }), `spec.${key}`, got)
      await rejected(ex.run({ ...spec, [key]: value }), `spec.${key}`, got)
      await rejected(ex.spawnTerminal({ argv: ['true'], [key]: value }), `request.${key}`, got)
    }
  }
  // Plain objects, with or without a prototype, are what the seam takes.
  assert.deepEqual(ex.resolve({ command: 'true', env: Object.assign(Object.create(null), { A: '1' }) }).env, { A: '1' })
  assert.deepEqual(ex.resolve({ command: 'true', dshEnv: { DSH_A: '1' } }).dshEnv, { DSH_A: '1' })
  await ex.dispose()
})

test('the other object fields take a plain object too: a Map is never read as an empty config, limits or request', () => {
  const ex = executor()
  refused(() => new NativeShellExecutor(new Map([['timeoutMs', 5]])), 'config', 'config must be a plain object, got Map')
  refused(() => native.checkConfig(new Map()), 'config', 'got Map')
  refused(() => ex.reconfigure([]), 'config', 'got array')
  refused(() => new NativeShellExecutor({ limits: new Map([['cpuSeconds', 1]]) }), 'config.limits', 'config.limits must be a plain object, got Map')
  refused(() => ex.resolve({ command: 'true', limits: new Map([['cpuSeconds', 1]]) }), 'request.limits', 'got Map')
  refused(() => ex.resolve({ command: 'true', sandboxPolicy: new Map([['mode', 'read-only']]) }), 'request.sandboxPolicy', 'got Map')
  refused(() => ex.resolve(new Map([['command', 'true']])), 'request', 'request must be a plain object, got Map')
  refused(() => ex.resolve({ command: 'true', stdin: new Map([['pipe', true]]) }), 'request.stdin', 'got Map')
})

test('a null number says null, naming the field, on every numeric field (never NaN)', async () => {
  const ex = executor()
  const nulled = (fn, field) => refused(fn, field, `${field} must be a number, got null`)
  for (const key of ['timeoutMs', 'stdoutMaxBytes']) {
    nulled(() => ex.resolve({ command: 'true', [key]: null }), `request.${key}`)
    nulled(() => ex.start({ ...ex.resolve({ command: 'true' }), [key]: null }), `spec.${key}`)
  }
  for (const key of ['timeoutMs', 'maxTimeoutMs', 'maxOutputBytes', 'maxSpillBytes', 'retainSettled', 'graceMs']) {
    nulled(() => new NativeShellExecutor({ [key]: null }), `config.${key}`)
  }
  for (const key of ['memoryBytes', 'processes', 'cpuSeconds', 'fileSizeBytes', 'openFiles']) {
    nulled(() => native.checkConfig({ limits: { [key]: null } }), `config.limits.${key}`)
    nulled(() => ex.resolve({ command: 'true', limits: { [key]: null } }), `request.limits.${key}`)
  }
  for (const key of ['rows', 'cols', 'graceMs']) {
    await rejected(ex.spawnTerminal({ argv: ['true'], [key]: null }), `request.${key}`, `request.${key} must be a number, got null`)
  }
  const t = await ex.spawnTerminal({ argv: ['sleep', '5'] })
  nulled(() => t.resize(null, 80), 'terminal.rows')
  nulled(() => t.resize(24, null), 'terminal.cols')
  refused(() => t.resize(undefined, 80), 'terminal.rows', 'terminal.rows must be a number, got undefined')
  await t.terminate()
  await ex.dispose()
})
