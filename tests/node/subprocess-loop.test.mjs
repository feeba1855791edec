// `dsh-native/subprocess` watches its programs from the JS thread's own
// event loop (docs/host-death.md, "Cost on the spawn path"), as Node's
// run() does: tried here with a JS thread that goes busy, workers that go
// away, and many programs at once. Whatever could hang runs in a child
// Node with a timeout, so a hang fails.

import test from 'node:test'
import assert from 'node:assert/strict'
import { Worker } from 'node:worker_threads'
import { createRequire } from 'node:module'

import { seamUrl } from './seam.mjs'

const { eventually, nodeChild, withMarker } = createRequire(import.meta.url)('./helpers.js')

const PROVIDER = new URL('../../bindings-node/subprocess.mjs', import.meta.url).href
const CORDIS = seamUrl('@deepseek-ai/cordis')

/** The lines that give a script `sp`, our provider in a Context of its own. */
const withProvider = `
  const { Context } = await import(${JSON.stringify(CORDIS)})
  const { default: Provider } = await import(${JSON.stringify(PROVIDER)})
  const root = new Context()
  await root.plugin(Provider)
  const sp = root.subprocess
  const fs = await import('node:fs')
  const collect = { maxBytes: 1 << 20 }
  const spec = (script, graceMs = 300) => ({ argv: ['bash', '-c', script], cwd: '/tmp', stdio: { stdin: 'ignore', stdout: collect, stderr: collect }, graceMs })
  const state = (pid) => { try { return fs.readFileSync('/proc/' + pid + '/stat', 'utf8').split(') ')[1][0] } catch { return 'gone' } }
  const busy = (ms, until = () => false) => { const end = Date.now() + ms; while (Date.now() < end && !until()) {} }
  const settled = async (until) => { while (!until()) await new Promise((r) => setTimeout(r, 10)) }
`

/** Runs `script` (an ES module, after `withProvider`) in a child Node; resolves with its stdout, failing on a hang. */
function child(script, timeoutMs = 30000) {
  return nodeChild(['--input-type=module', '-e', withProvider + script], timeoutMs)
}

test('terminate() just before the JS thread goes busy: the TERM trap runs and the SIGKILL comes after the grace, while it is busy', async () => {
  const out = await child(`
    const mark = '/tmp/dsh-subloop-term-' + process.pid
    const h = sp.spawn(spec("trap 'touch " + mark + "' TERM; echo ready; while :; do sleep 0.05; done"))
    await settled(() => h.collected.stdout.readFrom(0).text === 'ready\\n')
    h.terminate()
    busy(5000, () => fs.existsSync(mark) && ['Z', 'gone'].includes(state(h.pid)))
    const trapRanWhileBusy = fs.existsSync(mark)
    const deadWhileBusy = ['Z', 'gone'].includes(state(h.pid))
    const outcome = await h.done
    fs.rmSync(mark, { force: true })
    console.log(JSON.stringify({ trapRanWhileBusy, deadWhileBusy, outcome }))
  `)
  assert.deepEqual(JSON.parse(out), {
    trapRanWhileBusy: true,
    deadWhileBusy: true,
    outcome: { exitCode: null, signal: 'SIGKILL' },
  })
})

test('an abort just before the JS thread goes busy ends the program while it is busy', async () => {
  const out = await child(`
    const ac = new AbortController()
    const h = sp.spawn({ ...spec('echo ready; exec sleep 30'), signal: ac.signal })
    await settled(() => h.collected.stdout.readFrom(0).text === 'ready\\n')
    ac.abort()
    busy(5000, () => ['Z', 'gone'].includes(state(h.pid)))
    const deadWhileBusy = ['Z', 'gone'].includes(state(h.pid))
    console.log(JSON.stringify({ deadWhileBusy, outcome: await h.done }))
  `)
  assert.deepEqual(JSON.parse(out), { deadWhileBusy: true, outcome: { exitCode: null, signal: 'SIGTERM' } })
})

test('a program that ends while the JS thread is busy settles done with all its output once it turns', async () => {
  const out = await child(`
    const h = sp.spawn(spec('seq 1 20000; echo err >&2; exit 4'))
    busy(700)
    const outcome = await h.done
    const text = h.collected.stdout.readFrom(0).text
    console.log(JSON.stringify({ outcome, lines: text.split('\\n').length - 1, last: text.slice(-6), err: h.collected.stderr.readFrom(0).text }))
  `)
  assert.deepEqual(JSON.parse(out), { outcome: { exitCode: 4, signal: null }, lines: 20000, last: '20000\n', err: 'err\n' })
})

test('a hundred programs at once, collected, piped and fed, each settles with its own facts and output', async () => {
  const out = await child(`
    const { text } = await import('node:stream/consumers')
    const handles = Array.from({ length: 100 }, (_, i) => {
      const stdio = i % 3 === 0
        ? { stdin: 'ignore', stdout: 'pipe', stderr: collect }
        : { stdin: i % 3 === 1 ? { data: 'fed' + i } : 'ignore', stdout: collect, stderr: collect }
      return { i, h: sp.spawn({ argv: ['bash', '-c', 'cat 2>/dev/null; sleep 0.0' + (i % 10) + '; echo ' + i + '; exit ' + (i % 7)], cwd: '/tmp', stdio, graceMs: 300 }) }
    })
    const bad = []
    await Promise.all(handles.map(async ({ i, h }) => {
      const piped = h.stdout ? text(h.stdout) : null
      const outcome = await h.done
      const got = piped ? await piped : h.collected.stdout.readFrom(0).text
      const want = (i % 3 === 1 ? 'fed' + i : '') + i + '\\n'
      if (outcome.exitCode !== i % 7 || got !== want) bad.push({ i, outcome, got })
    }))
    console.log(JSON.stringify(bad))
  `)
  assert.deepEqual(JSON.parse(out), [])
})

test('a worker that goes away with a spawned program running leaves nothing running', async () => {
  const marker = `dsh-subloop-worker-${process.pid}`
  const w = new Worker(
    `
    const { parentPort } = require('node:worker_threads')
    ;(async () => {
      ${withProvider}
      sp.spawn(spec("trap '' TERM; sleep 30; echo ${marker}"))
      parentPort.postMessage('started')
    })()
  `,
    { eval: true },
  )
  await new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  })
  assert.ok(await eventually(() => withMarker(marker) > 0), 'the program started')
  await w.terminate()
  assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its program ended with the worker')
})

test('the service reaches its callers without a per-call context wrapper, and works through the context as before', async () => {
  const out = await child(`
    // Each access of a method through a cordis context used to build a
    // shadow context and two proxies (the method reads no caller context).
    const sameMethod = sp.spawn === sp.spawn && sp.resolveExecutable === sp.resolveExecutable
    const viaPlugin = await new Promise((resolve) => {
      root.plugin({ inject: ['subprocess'], apply: async (ctx) => {
        const h = ctx.subprocess.spawn(spec('echo through-a-plugin'))
        await h.done
        resolve({ text: h.collected.stdout.readFrom(0).text, path: await ctx.subprocess.resolveExecutable('bash') })
      } })
    })
    console.log(JSON.stringify({ sameMethod, viaPlugin: { text: viaPlugin.text, found: viaPlugin.path.endsWith('/bash') } }))
  `)
  assert.deepEqual(JSON.parse(out), { sameMethod: true, viaPlugin: { text: 'through-a-plugin\n', found: true } })
})

test('a stop, then a JS thread busy past the grace and the give-up bound: the exit and the last output are kept', async () => {
  // The SIGKILL comes from a core thread; the exit report and the output
  // written in the TERM trap wait for a host loop that does not turn.
  const out = await child(`
    const h = sp.spawn(spec("trap 'echo in-trap; sleep 30' TERM; echo ready; while :; do sleep 0.05; done"))
    await settled(() => h.collected.stdout.readFrom(0).text === 'ready\\n')
    h.terminate()
    busy(4500)
    const outcome = await h.done
    console.log(JSON.stringify({ outcome, text: h.collected.stdout.readFrom(0).text }))
  `)
  assert.deepEqual(JSON.parse(out), { outcome: { exitCode: null, signal: 'SIGKILL' }, text: 'ready\nin-trap\n' })
})

test('a worker that goes away with many stubborn programs stops them all at once, not one grace after another', async () => {
  const marker = `dsh-subloop-stubborn-${process.pid}`
  const w = new Worker(
    `
    const { parentPort } = require('node:worker_threads')
    ;(async () => {
      ${withProvider}
      for (let i = 0; i < 4; i++) sp.spawn(spec("trap '' TERM; sleep 30; echo ${marker}", 2500))
      parentPort.postMessage('started')
    })()
  `,
    { eval: true },
  )
  await new Promise((resolve, reject) => {
    w.once('message', resolve)
    w.once('error', reject)
  })
  assert.ok(await eventually(() => withMarker(marker) === 4), 'the programs started')
  const started = Date.now()
  await w.terminate()
  const took = Date.now() - started
  assert.equal(withMarker(marker), 0, 'every program ended with the worker')
  // One after another would be four graces (10 s).
  assert.ok(took < 7000, `the worker took ${took} ms to go: its programs were stopped one after another`)
})

test("done() asked again after the program settled on a core thread settles after the earlier done(), in the order asked", async () => {
  // The addon's handle under the provider: a terminate, then a JS thread
  // busy past the grace and the give-up bound, settles the program on a
  // core thread before the JS thread turns again.
  const out = await child(`
    const { createRequire } = await import('node:module')
    const { NativeExecutor } = createRequire(${JSON.stringify(PROVIDER)})('./loader.js')
    const native = new NativeExecutor()
    const h = native.spawnProgram(['sleep', '30'], '/tmp', [], [], 'ignore', null, 'collect', 1000, null, 'collect', 1000, null, 300)
    const order = []
    const first = h.done().then(() => order.push('first'))
    await new Promise((r) => setTimeout(r, 200))
    h.terminate()
    busy(5000, () => h.signal !== null)
    const settledWhileBusy = h.signal
    const second = h.done().then(() => order.push('second'))
    await Promise.all([first, second])
    await native.dispose()
    console.log(JSON.stringify({ settledWhileBusy, order }))
  `)
  assert.deepEqual(JSON.parse(out), { settledWhileBusy: 'SIGTERM', order: ['first', 'second'] })
})

test('a settled program holds no descriptor of ours, though its pid was never read and its handle is still held', async () => {
  // Before: each spawn kept the pipe its pid comes on until the handle was
  // collected, so descriptors grew with the spawns between collections.
  const out = await child(`
    const open = () => fs.readdirSync('/proc/self/fd').length
    const warm = sp.spawn(spec('true'))
    await warm.done
    const before = open()
    const handles = []
    for (let i = 0; i < 200; i++) handles.push(sp.spawn(spec('true')))
    await Promise.all(handles.map((h) => h.done))
    const after = open()
    // Read after the end: the pid is still known.
    const pids = new Set(handles.map((h) => h.pid))
    console.log(JSON.stringify({ grown: after - before, pids: pids.size, allPositive: [...pids].every((p) => p > 0) }))
  `)
  const r = JSON.parse(out)
  assert.ok(r.grown < 20, `descriptors grew by ${r.grown} over 200 settled spawns`)
  assert.deepEqual({ pids: r.pids, allPositive: r.allPositive }, { pids: 200, allPositive: true })
})

test('a stdin pipe written after its program ended, before done settled, refuses the write without ending the host', async () => {
  // The JS thread is busy while the program exits: the write meets a pipe
  // nobody reads (EPIPE), before the handle learns of the end.
  const out = await child(`
    for (const argv of [['true'], ['/tmp/dsh-no-exec-' + process.pid]]) {
      fs.writeFileSync('/tmp/dsh-no-exec-' + process.pid, 'not a program\\n\\0', { mode: 0o755 })
      const h = sp.spawn({ argv, cwd: '/tmp', stdio: { stdin: 'pipe', stdout: collect, stderr: collect }, graceMs: 300 })
      busy(300)
      const write = await new Promise((resolve) => h.stdin.write('x', (err) => resolve(err ? err.code ?? 'refused' : 'taken')))
      await h.done.catch(() => {})
      // A turn for any 'error' event still queued.
      await new Promise((r) => setTimeout(r, 50))
      console.log(argv[0] === 'true' ? 'exited' : 'no exec', write)
    }
    fs.rmSync('/tmp/dsh-no-exec-' + process.pid)
  `)
  const lines = out.trim().split('\n')
  assert.equal(lines.length, 2, out)
  for (const line of lines) assert.match(line, /^(exited|no exec) (EPIPE|ERR_STREAM_DESTROYED|refused)$/)
})

test("readFrom's offset must be a number: anything else is INVALID_ARGUMENT, not the addon's own error", async () => {
  const out = await child(`
    const h = sp.spawn({ ...spec('printf hi'), argv: ['printf', 'hi'] })
    await h.done
    const codes = [undefined, null, '1', Number.NaN].map((o) => {
      try {
        h.collected.stdout.readFrom(o)
        return 'accepted'
      } catch (e) {
        return e.code
      }
    })
    console.log(JSON.stringify({ codes, text: h.collected.stdout.readFrom(0).text }))
    await root.fiber?.dispose?.()
    process.exit(0)
  `)
  assert.deepEqual(JSON.parse(out.trim().split('\n').pop()), { codes: Array(4).fill('INVALID_ARGUMENT'), text: 'hi' })
})

test('a bad spill cap is INVALID_ARGUMENT naming spill.maxBytes, not read as no spill', async () => {
  const out = await child(`
    const messages = [-5, 1.5, Infinity, Number.NaN].map((maxBytes) => {
      try {
        sp.spawn({ ...spec('true'), stdio: { stdin: 'ignore', stdout: { maxBytes: 10, spill: { maxBytes } }, stderr: collect } })
        return 'spawned'
      } catch (e) {
        return e.code + ' ' + /spill\\.maxBytes/.test(e.message)
      }
    })
    console.log(JSON.stringify(messages))
    await root.fiber?.dispose?.()
    process.exit(0)
  `)
  assert.deepEqual(JSON.parse(out.trim().split('\n').pop()), Array(4).fill('INVALID_ARGUMENT true'))
})

// A raw output pipe is read by the addon on this thread's loop
// (pipe_reader.rs), not by a net.Socket: what a socket guaranteed is
// tried here, each in a child Node so a crash or hang fails the test.

test('a raw pipe nobody reads holds its program back, not the host: memory stays flat, then every byte arrives', async () => {
  const out = await child(`
    const wchar = (pid) => Number(/wchar: (\\d+)/.exec(fs.readFileSync('/proc/' + pid + '/io', 'utf8'))[1])
    const rss = () => process.memoryUsage().rss
    const before = rss()
    const size = 256 << 20
    const h = sp.spawn({ argv: ['head', '-c', String(size), '/dev/zero'], cwd: '/tmp', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: collect }, graceMs: 300 })
    // Blocked: what it has written stops growing while it lives.
    let last = -1
    for (;;) {
      await new Promise((r) => setTimeout(r, 100))
      const now = wchar(h.pid)
      if (now === last) break
      last = now
    }
    const held = { written: last, grown: rss() - before, state: state(h.pid) }
    let n = 0
    for await (const c of h.stdout) n += c.length
    console.log(JSON.stringify({ held, n, outcome: await h.done }))
  `)
  const r = JSON.parse(out)
  assert.ok(r.held.written < 4 << 20, `the program wrote ${r.held.written} bytes nobody read`)
  assert.ok(r.held.grown < 32 << 20, `the host grew by ${r.held.grown} bytes`)
  assert.equal(r.held.state, 'S')
  assert.equal(r.n, 256 << 20)
  assert.deepEqual(r.outcome, { exitCode: 0, signal: null })
})

test('raw pipes read to their end, or destroyed early, leave no descriptor of ours open', async () => {
  const out = await child(`
    const open = () => fs.readdirSync('/proc/self/fd').length
    const piped = (argv) => sp.spawn({ argv, cwd: '/tmp', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }, graceMs: 300 })
    const warm = piped(['true'])
    for await (const _ of warm.stdout);
    await warm.done
    const before = open()
    const ends = []
    for (let i = 0; i < 100; i++) {
      const h = piped(['bash', '-c', 'echo out; echo err >&2'])
      const text = (s) => new Promise((resolve) => { let t = ''; s.on('data', (d) => (t += d)); s.on('end', () => resolve(t)) })
      ends.push(Promise.all([text(h.stdout), text(h.stderr), h.done]))
    }
    for (let i = 0; i < 100; i++) {
      // Destroyed at once, and after the first chunk of an endless writer.
      const h = piped(['yes'])
      h.stderr.destroy()
      h.stdout.once('data', () => h.stdout.destroy())
      ends.push(h.done.then((o) => ['', '', o]))
    }
    const outcomes = await Promise.all(ends)
    await new Promise((r) => setImmediate(r))
    const whole = outcomes.slice(0, 100).every(([o, e, d]) => o === 'out\\n' && e === 'err\\n' && d.exitCode === 0)
    const piped_ = outcomes.slice(100).map(([, , d]) => d.signal)
    console.log(JSON.stringify({ grown: open() - before, whole, signals: [...new Set(piped_)] }))
  `)
  const r = JSON.parse(out)
  assert.ok(r.grown < 10, `descriptors grew by ${r.grown} over 200 piped spawns`)
  assert.equal(r.whole, true)
  // The writer of a destroyed pipe meets a closed pipe.
  assert.deepEqual(r.signals, ['SIGPIPE'])
})

test('a raw pipe nobody reads keeps its bytes for a reader after done, for the grace; then its pipe is let go', async () => {
  const out = await child(`
    const open = () => fs.readdirSync('/proc/self/fd').length
    const piped = () => sp.spawn({ argv: ['head', '-c', '40000', '/dev/zero'], cwd: '/tmp', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: collect }, graceMs: 300 })
    // Read after done: every byte is still there.
    const late = piped()
    await late.done
    let n = 0
    for await (const c of late.stdout) n += c.length
    // Never read: done does not wait for it, and its pipe goes after the grace.
    const before = open()
    const unread = Array.from({ length: 20 }, piped)
    await Promise.all(unread.map((h) => h.done))
    const held = open() - before
    const start = Date.now()
    while (open() - before > 2 && Date.now() - start < 20000) await new Promise((r) => setTimeout(r, 20))
    console.log(JSON.stringify({ n, held: held >= 10, released: open() - before <= 2 }))
  `)
  assert.deepEqual(JSON.parse(out), { n: 40000, held: true, released: true })
})

test('a data listener that throws is the host uncaught exception, and the rest of the pipe still arrives', async () => {
  const out = await child(`
    const thrown = []
    process.on('uncaughtException', (e) => thrown.push(e.message))
    const h = sp.spawn({ argv: ['head', '-c', String(4 << 20), '/dev/zero'], cwd: '/tmp', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: collect }, graceMs: 300 })
    let n = 0
    let first = true
    h.stdout.on('data', (c) => {
      n += c.length
      if (first) {
        first = false
        throw new Error('listener failed')
      }
    })
    await new Promise((resolve) => h.stdout.on('end', resolve))
    console.log(JSON.stringify({ n, thrown, outcome: await h.done }))
  `)
  assert.deepEqual(JSON.parse(out), { n: 4 << 20, thrown: ['listener failed'], outcome: { exitCode: 0, signal: null } })
})

test('a worker that goes away while raw pipes are read and held ends cleanly, and so do their programs', async () => {
  // A worker's loop must be left with no handle of ours: node aborts the
  // whole process otherwise (uv_loop_close). Run in a child Node.
  const marker = `dsh-subloop-pipes-${process.pid}`
  const out = await nodeChild(
    [
      '--input-type=module',
      '-e',
      `
      import { Worker } from 'node:worker_threads'
      const w = new Worker(\`
        ;(async () => {
          // The worker's code is a module: it inherits --input-type.
          const { parentPort } = await import('node:worker_threads')
          ${withProvider.replace(/`/g, '\\`').replace(/\$\{/g, '\\${')}
          const piped = (script) => sp.spawn({ argv: ['bash', '-c', script], cwd: '/tmp', stdio: { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }, graceMs: 300 })
          const flowing = piped('exec -a ${marker} yes')
          flowing.stdout.on('data', () => {})
          const held = piped('exec -a ${marker} yes')
          held.stdout.once('data', () => held.stdout.pause())
          await new Promise((r) => held.stdout.once('pause', r))
          parentPort.postMessage('reading')
        })()
      \`, { eval: true })
      await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) })
      await w.terminate()
      console.log('terminated')
      `,
    ],
    30000,
  )
  assert.equal(out.trim(), 'terminated')
  assert.ok(await eventually(() => withMarker(marker) === 0, 10000), 'its programs ended with the worker')
})
