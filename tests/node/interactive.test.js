'use strict'
// Writable stdin ({ pipe: true }, writeStdin / closeStdin) and the timeout
// hand-over (onExpiry: 'background') through JavaScript (docs/running.md).
const test = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')

const { executor, alive, eventually, tmpdir } = require('./helpers.js')

const PIPE = { pipe: true }
const counting = (n) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join('')
const counter = (n) => `for ((i=1;i<=${n};i++)); do echo $i; if ((i%500==0)); then sleep 0.05; fi; done`

async function readUntilEnd(task, seen, needle) {
  const ok = await eventually(() => {
    seen.text += task.readOutput().delta
    return seen.text.endsWith(needle)
  })
  assert.ok(ok, `never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen.text)}`)
}

test('stdin pipe: interleaved writes and reads with cat, then EOF', async () => {
  const shell = executor()
  try {
    const spec = shell.resolve({ command: 'cat', stdin: PIPE })
    assert.deepEqual(spec.stdin, { pipe: true })
    const p = shell.start(spec)
    assert.equal(p.hasStdinPipe, true)
    const seen = { text: '' }
    for (let i = 0; i < 10; i++) {
      await p.writeStdin(`line ${i}\n`)
      await readUntilEnd(p, seen, `line ${i}\n`)
    }
    assert.equal(p.closeStdin(), true)
    assert.equal(p.closeStdin(), false)
    await p.done
    assert.equal(p.exitCode, 0)
  } finally {
    await shell.dispose()
  }
})

test('stdin pipe: closeStdin gives wc -c EOF with an exact count; MiBs arrive byte-exact', async () => {
  const shell = executor()
  const dir = tmpdir('stdin-exact')
  try {
    const wc = shell.start(shell.resolve({ command: 'wc -c', stdin: PIPE }))
    await wc.writeStdin(Buffer.alloc(3 * 1024 * 1024 + 7, 'x'))
    wc.closeStdin()
    await wc.done
    assert.equal(wc.readOutput().delta.trim(), String(3 * 1024 * 1024 + 7))

    const out = path.join(dir, 'out')
    const cat = shell.start(shell.resolve({ command: `cat > '${out}'`, stdin: PIPE }))
    const data = crypto.randomBytes(6 * 1024 * 1024)
    // Not awaited one by one: written whole, in call order.
    const parts = [data.subarray(0, 1_000_003), new Uint8Array(data.subarray(1_000_003, 4_000_000)), data.subarray(4_000_000)]
    await Promise.all(parts.map((part) => cat.writeStdin(part)))
    cat.closeStdin()
    await cat.done
    assert.ok(fs.readFileSync(out).equals(data), 'the bytes differ')
  } finally {
    await shell.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('stdin pipe: a slow reader applies back-pressure while the event loop runs on', async () => {
  const shell = executor()
  const dir = tmpdir('stdin-slow')
  try {
    const gate = path.join(dir, 'gate')
    const out = path.join(dir, 'out')
    const p = shell.start(shell.resolve({ command: `while [ ! -e '${gate}' ]; do sleep 0.01; done; cat > '${out}'`, stdin: PIPE }))
    let written = false
    const write = p.writeStdin(Buffer.alloc(8 * 1024 * 1024, 'z')).then(() => {
      written = true
    })
    // The loop turns: immediates and timers run while the write waits.
    let turns = 0
    for (let i = 0; i < 100; i++) {
      await new Promise((r) => setImmediate(r))
      turns++
    }
    await new Promise((r) => setTimeout(r, 200))
    assert.equal(turns, 100)
    assert.equal(written, false, 'the write finished although nobody read')
    const rssBefore = process.memoryUsage().rss
    fs.writeFileSync(gate, '')
    await write
    assert.equal(written, true)
    p.closeStdin()
    await p.done
    assert.equal(fs.statSync(out).size, 8 * 1024 * 1024)
    // Nothing like the 8 MiB was copied into a growing buffer meanwhile.
    assert.ok(process.memoryUsage().rss - rssBefore < 64 * 1024 * 1024)
  } finally {
    await shell.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('stdin pipe: writes after exit, after closeStdin, without a pipe and to a closed stdin reject with STDIN_CLOSED', async () => {
  const shell = executor()
  try {
    const done = shell.start(shell.resolve({ command: 'true', stdin: PIPE }))
    await done.done
    await assert.rejects(done.writeStdin('late'), (e) => {
      assert.equal(e.code, 'STDIN_CLOSED')
      assert.equal(e.reason, 'exited')
      assert.equal(e.id, done.id)
      assert.match(e.message, /has exited/)
      return true
    })
    const closed = shell.start(shell.resolve({ command: 'cat >/dev/null; sleep 30', stdin: PIPE }))
    closed.closeStdin()
    await assert.rejects(closed.writeStdin('x'), { code: 'STDIN_CLOSED', reason: 'closed' })
    closed.kill()
    const plain = shell.start(shell.resolve({ command: 'sleep 30' }))
    assert.equal(plain.hasStdinPipe, false)
    await assert.rejects(plain.writeStdin('x'), { code: 'STDIN_CLOSED', reason: 'not-piped' })
    assert.throws(() => plain.closeStdin(), { code: 'STDIN_CLOSED' })
    await assert.rejects(plain.writeStdin(5), { code: 'INVALID_ARGUMENT' })
    plain.kill()
    const broken = shell.start(shell.resolve({ command: 'exec 0<&-; echo closed; sleep 30', stdin: PIPE }))
    await readUntilEnd(broken, { text: '' }, 'closed\n')
    await assert.rejects(broken.writeStdin(Buffer.alloc(4 * 1024 * 1024)), { code: 'STDIN_CLOSED', reason: 'broken' })
    assert.equal(broken.status, 'running')
    broken.kill()
  } finally {
    await shell.dispose()
  }
})

test('stdin and onExpiry: bad values are refused naming the field', async () => {
  const shell = executor()
  try {
    assert.throws(() => shell.resolve({ command: 'x', stdin: { pipe: false } }), { code: 'INVALID_ARGUMENT', field: 'request.stdin' })
    assert.throws(() => shell.resolve({ command: 'x', stdin: { pipe: true, extra: 1 } }), { code: 'INVALID_ARGUMENT', field: 'request.stdin.extra' })
    assert.throws(() => shell.resolve({ command: 'x', stdin: 5 }), { code: 'INVALID_ARGUMENT', field: 'request.stdin' })
    assert.throws(() => shell.resolve({ command: 'x', onExpiry: 'later' }), { code: 'INVALID_ARGUMENT', field: 'request.onExpiry' })
    assert.throws(() => shell.resolve({ command: 'x', on_expiry: 'kill' }), { code: 'INVALID_ARGUMENT', field: 'request.on_expiry' })
    // No key for the default: the spec stays the harness's.
    assert.equal('onExpiry' in shell.resolve({ command: 'x', onExpiry: 'kill' }), false)
    assert.equal(shell.resolve({ command: 'x', onExpiry: 'background' }).onExpiry, 'background')
    await assert.rejects(shell.run(shell.resolve({ command: 'cat', stdin: PIPE })), { code: 'INVALID_ARGUMENT', field: 'spec.stdin' })
  } finally {
    await shell.dispose()
  }
})

test("onExpiry 'background': the run hands over, reads continue without loss or duplication", async () => {
  const shell = executor({ maxOutputBytes: 1 << 20 })
  try {
    const finished = []
    shell.onTaskDone((t) => finished.push(t.id))
    const r = await shell.run(shell.resolve({ command: counter(20000), timeoutMs: 200, onExpiry: 'background' }))
    assert.equal(r.timedOut, true)
    assert.equal(r.aborted, false)
    assert.equal(r.exitCode, null)
    assert.equal(r.signal, null)
    assert.match(r.backgroundId, /^bash-\d+$/)
    const p = shell.get(r.backgroundId)
    assert.ok(p)
    await p.done
    const rest = p.readOutput()
    assert.equal(rest.lossy, false)
    assert.ok(r.stdout.text + rest.delta === counting(20000), 'lost or repeated output across the hand-over')
    assert.equal(p.status, 'completed')
    assert.ok(await eventually(() => finished.includes(r.backgroundId)))
  } finally {
    await shell.dispose()
  }
})

test("onExpiry 'background': a prompt answered after the hand-over; the default still kills", async () => {
  const shell = executor()
  try {
    const r = await shell.run(
      shell.resolve({ command: 'echo question; read -r a; echo "got $a"', timeoutMs: 200, onExpiry: 'background', stdin: PIPE }),
    )
    assert.equal(r.stdout.text, 'question\n')
    const p = shell.get(r.backgroundId)
    await p.writeStdin('yes\n')
    await p.done
    assert.equal(p.readOutput().delta, 'got yes\n')
    const killed = await shell.run(shell.resolve({ command: 'sleep 30', timeoutMs: 100 }))
    assert.equal(killed.timedOut, true)
    assert.equal(killed.signal, 'SIGTERM')
    assert.equal('backgroundId' in killed, false)
  } finally {
    await shell.dispose()
  }
})

test("onExpiry 'background': the signal kills the handed-over process, dispose ends the rest", async () => {
  const shell = executor()
  const ac = new AbortController()
  const r = await shell.run(shell.resolve({ command: 'echo $$; exec sleep 60', timeoutMs: 100, onExpiry: 'background', signal: ac.signal }))
  const first = shell.get(r.backgroundId)
  const firstPid = Number(r.stdout.text.trim())
  assert.equal(first.status, 'running')
  ac.abort()
  await first.done
  assert.equal(first.status, 'killed')
  assert.equal(alive(firstPid), false)
  const again = await shell.run(shell.resolve({ command: 'echo $$; sleep 60 & wait', timeoutMs: 100, onExpiry: 'background' }))
  const pid = Number(again.stdout.text.trim())
  const second = shell.get(again.backgroundId)
  assert.ok(alive(pid))
  await shell.dispose()
  assert.equal(second.status, 'killed')
  assert.equal(alive(pid), false)
})

// ---- review: hostile cases --------------------------------------------------

test('stdin pipe: pending writes settle on closeStdin, kill and dispose', async () => {
  const shell = executor()
  const big = () => Buffer.alloc(4 * 1024 * 1024, 0x70)
  const within = (promise) =>
    Promise.race([
      promise.then(
        () => 'resolved',
        (e) => e,
      ),
      new Promise((resolve) => setTimeout(() => resolve('hung'), 30000).unref()),
    ])
  // closeStdin while a write waits: the write still goes down whole as the
  // command reads, then EOF; a write made after it is refused.
  const a = shell.start(shell.resolve({ command: 'sleep 0.3; wc -c', stdin: PIPE }))
  const pending = within(a.writeStdin(big()))
  assert.equal(a.closeStdin(), true)
  const late = await within(a.writeStdin('late'))
  assert.equal(late.code, 'STDIN_CLOSED')
  assert.equal(late.reason, 'closed')
  assert.equal(await pending, 'resolved')
  await a.done
  assert.equal(a.readOutput().delta.trim(), String(4 * 1024 * 1024))
  // kill with writes waiting: each settles (rejects).
  const b = shell.start(shell.resolve({ command: 'sleep 60', stdin: PIPE }))
  const writes = [b.writeStdin(big()), b.writeStdin(big()), b.writeStdin('x')].map(within)
  b.kill()
  for (const w of writes) assert.equal((await w).code, 'STDIN_CLOSED')
  // dispose with writes waiting: each settles, none hangs.
  const c = shell.start(shell.resolve({ command: 'sleep 60', stdin: PIPE }))
  const last = [c.writeStdin(big()), c.writeStdin(big())].map(within)
  await shell.dispose()
  for (const w of last) assert.equal((await w).code, 'STDIN_CLOSED')
  await assert.rejects(c.writeStdin('after dispose'), { code: 'STDIN_CLOSED' })
})

test('stdin pipe: a huge write goes down without a second copy; a write then closeStdin delivers it', async () => {
  const ex = executor()
  try {
    const p = ex.start(ex.resolve({ command: 'wc -c', stdin: PIPE }))
    const big = Buffer.alloc(256 << 20, 0x78)
    const before = process.memoryUsage().rss
    let peak = 0
    const sample = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss - before) }, 2)
    const written = p.writeStdin(big)
    p.writeStdin('tail') // queued behind the huge one, never inside it
    await written
    clearInterval(sample)
    await p.writeStdin('')
    p.closeStdin()
    await p.done
    assert.equal(p.readOutput().delta, `${(256 << 20) + 4}\n`)
    // A copy of the caller's data would be 256 MiB; pieces are 1 MiB.
    assert.ok(peak < 64 << 20, `rss grew by ${peak} bytes while writing`)

    const q = ex.start(ex.resolve({ command: 'cat', stdin: PIPE }))
    const delivered = q.writeStdin('answer')
    q.closeStdin()
    await delivered
    await q.done
    assert.equal(q.readOutput().delta, 'answer')
  } finally {
    await ex.dispose()
  }
})
