'use strict'
// The governor through JavaScript (docs/limits.md, docs/sandbox.md): limits
// from the executor and the request, the limit that ended a command, how
// each was enforced, fail-closed, and the network policy. Risky commands run
// under a run timeout; the exhaustive cases are the Rust suite's.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')

const { executor, tmpdir, landlockMissing } = require('./helpers.js')
const { limitsSupport } = require('../../bindings-node/index.js')

const unsupported = (kind) =>
  limitsSupport()[kind] === 'unsupported' ? `this host cannot enforce the ${kind} limit` : false

test('limits: from the executor, clamped per request, exact shapes, named errors', () => {
  const ex = executor({ limits: { processes: 50, memoryBytes: 2 ** 30 } })
  assert.deepEqual(ex.resolve({ command: 'true' }).limits, { memoryBytes: 2 ** 30, processes: 50 })
  const spec = ex.resolve({ command: 'true', limits: { processes: 500, cpuSeconds: 3 } })
  assert.deepEqual(spec.limits, { memoryBytes: 2 ** 30, processes: 50, cpuSeconds: 3 })
  assert.equal('limits' in executor().resolve({ command: 'true' }), false, 'no limits, no key')
  assert.throws(() => ex.resolve({ command: 'true', limits: { cpuSeconds: 1.5 } }), (e) => {
    assert.equal(e.code, 'INVALID_ARGUMENT')
    assert.equal(e.field, 'request.limits.cpuSeconds')
    return true
  })
  assert.throws(() => ex.resolve({ command: 'true', limits: { memory: 1 } }), /request\.limits\.memory is not a known field/)
  assert.throws(() => executor({ limits: { openFiles: 0 } }), /config\.limits\.openFiles must be a positive/)
  assert.deepEqual(Object.keys(limitsSupport()).sort(), ['cpu', 'file_size', 'memory', 'open_files', 'processes'])
})

test('a fork bomb under a process limit ends with limit processes', { skip: unsupported('processes') }, async () => {
  const ex = executor({ graceMs: 500 })
  const bomb =
    "g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); " +
    '[ "$(cat /sys/fs/cgroup/pids$g/pids.max)" = 32 ] || exit 9; b() { b | b & }; b; wait'
  const r = await ex.run(ex.resolve({ command: bomb, limits: { processes: 32 }, timeoutMs: 60000 }))
  assert.equal(r.limit, 'processes')
  assert.equal(r.timedOut, false)
  assert.deepEqual(r.limitsEnforcement, { processes: 'cgroup-v1' })
  await ex.dispose()
})

test('memory in the background, file size and cpu in the foreground', { skip: unsupported('memory') }, async () => {
  const ex = executor({ graceMs: 500 })
  const hog = ex.start(ex.resolve({ command: 'a=x; while :; do a=$a$a; done', limits: { memoryBytes: 32 * 2 ** 20 } }))
  await hog.done
  assert.equal(hog.limit, 'memory')
  assert.equal(hog.status, 'killed')
  assert.deepEqual(hog.limitsEnforcement, { memory: 'cgroup-v1' })
  const dir = tmpdir()
  let r = await ex.run(ex.resolve({ command: `exec yes > ${dir}/big`, limits: { fileSizeBytes: 4096 }, timeoutMs: 60000 }))
  assert.equal(r.limit, 'file_size')
  assert.equal(r.signal, 'SIGXFSZ')
  assert.equal(fs.statSync(path.join(dir, 'big')).size, 4096)
  r = await ex.run(ex.resolve({ command: 'while :; do :; done', limits: { cpuSeconds: 1 }, timeoutMs: 60000 }))
  assert.equal(r.limit, 'cpu')
  assert.equal(r.signal, 'SIGXCPU')
  r = await ex.run(ex.resolve({ command: 'ulimit -n', limits: { openFiles: 64 } }))
  assert.equal(r.stdout.text, '64\n')
  assert.equal('limit' in r, false, 'no limit ended it: no key')
  await assert.rejects(ex.run(ex.resolve({ command: 'true', limits: { openFiles: 2 ** 40 } })), (e) => {
    assert.equal(e.code, 'LIMIT_UNAVAILABLE')
    assert.equal(e.limit, 'open_files')
    return true
  })
  await ex.dispose()
})

test('network deny refuses TCP, keeps Unix sockets; loopback allows 127.0.0.1 only', async (t) => {
  const why = await landlockMissing()
  if (why) return t.skip(why)
  const server = net.createServer((s) => s.end())
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = server.address().port
  const ex = executor()
  const probe =
    `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo tcp-open || echo tcp-refused; ` +
    `python3 -c 'import socket; a, b = socket.socketpair(); a.send(b"u"); print(b.recv(1).decode())'`
  const denied = await ex.run(
    ex.resolve({ command: probe, sandboxPolicy: { mode: 'danger-full-access', network: 'deny' } }),
  )
  assert.equal(denied.stdout.text, 'tcp-refused\nu\n', denied.stderr.text)
  assert.equal(denied.sandbox.network, 'deny')
  assert.equal(denied.sandbox.networkEnforcement, 'full')
  const allowed = await ex.run(ex.resolve({ command: probe, sandboxPolicy: { mode: 'danger-full-access' } }))
  assert.equal(allowed.stdout.text, 'tcp-open\nu\n')
  assert.equal('network' in allowed.sandbox, false, 'allow, the default, adds no key')
  const loopbackProbe =
    `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo lo-open || echo lo-refused; ` +
    `(exec 3<>/dev/tcp/192.0.2.1/80) 2>&1 | grep -q 'Operation not permitted' && echo out-denied`
  const spec = ex.resolve({ command: loopbackProbe, sandboxPolicy: { mode: 'read-only', network: 'loopback' } })
  assert.equal(spec.sandboxPolicy.network, 'loopback')
  const rootWithV2 = process.geteuid() === 0 && fs.existsSync('/sys/fs/cgroup/unified/cgroup.procs')
  try {
    const lo = await ex.run(spec)
    assert.equal(lo.stdout.text, 'lo-open\nout-denied\n', lo.stderr.text)
    assert.equal(lo.sandbox.network, 'loopback')
    assert.equal(lo.sandbox.networkEnforcement, 'full')
  } catch (e) {
    // Root and cgroup v2 are needed; without them it fails closed.
    assert.equal(rootWithV2, false, e.message)
    assert.equal(e.code, 'SANDBOX_UNAVAILABLE')
    assert.match(e.message, /loopback/)
  }
  server.close()
  await ex.dispose()
})
