// `ctx.subprocess` drivers: dsh-native/subprocess beside the published
// provider (@deepseek-ai/dsh-subprocess-local), each loaded as the harness
// loads it, in a cordis Context. Usage:
//   node subprocess.mjs spawn ITER HOST_MB native|published collect|pipe
//       spawn `bash -c true` (the floor's program) until `done`, stdout and
//       stderr collected or piped (a piped stream read to its end)
//   node subprocess.mjs pipe BYTES native|published
//       `head -c BYTES /dev/zero` through a raw stdout pipe, all bytes read
//   node subprocess.mjs echo KEYS native|published
//       keystroke -> echo round trip through a raw-mode `cat` in spawnTerminal
//   node subprocess.mjs terminal-throughput BYTES native|published
//       `head -c BYTES /dev/zero` through spawnTerminal, all bytes received
//   node subprocess.mjs terminal-spawn ITER native|published
//       spawnTerminal of `true` until its output ended, and how many bytes
//       of a 20000-line program's output arrived before the end
import { createRequire } from 'node:module'

const require = createRequire(new URL('../../bindings-node/package.json', import.meta.url))
const { interleaved, median } = createRequire(import.meta.url)('./floor.js')

// The published provider needs Node 22 (`Promise.withResolvers`).
Promise.withResolvers ??= function withResolvers() {
  let resolve
  let reject
  const promise = new Promise((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

const { Context } = await import(require.resolve('@deepseek-ai/cordis'))
const PROVIDERS = {
  native: ['dsh-native/subprocess', () => import('../../bindings-node/subprocess.mjs')],
  published: ['dsh-subprocess-local', () => import(require.resolve('@deepseek-ai/dsh-subprocess-local'))],
}

const us = () => Number(process.hrtime.bigint()) / 1000

function report(bench, impl, hostMb, samples, extra = {}) {
  samples.sort((a, b) => a - b)
  const row = { bench, impl, host_mb: hostMb, median_us: samples[samples.length >> 1], min_us: samples[0] }
  console.log(JSON.stringify({ ...row, max_us: samples[samples.length - 1], n: samples.length, ...extra }))
}

function ballast(mb) {
  if (mb <= 0) return null
  const b = Buffer.alloc(mb * 1048576)
  for (let i = 0; i < b.length; i += 4096) b[i] = 1
  return b
}

async function drain(stream) {
  let n = 0
  if (stream === undefined) return n
  for await (const c of stream) n += c.length
  return n
}

const [mode, a, b, which, stdioMode] = process.argv.slice(2)
const provider = mode === 'spawn' ? which : b
const [name, load] = PROVIDERS[provider]
const root = new Context()
await root.plugin((await load()).default)
const sp = root.subprocess
const spec = (argv, stdout, stderr = stdout) => ({
  argv,
  cwd: '/tmp',
  stdio: { stdin: 'ignore', stdout, stderr },
  graceMs: 3000,
})

if (mode === 'spawn') {
  const iter = Number(a)
  const mb = Number(b)
  const keep = ballast(mb)
  const out = stdioMode === 'pipe' ? 'pipe' : { maxBytes: 64000, spill: { maxBytes: 1 << 26 } }
  const once = async () => {
    const h = sp.spawn(spec(['bash', '-c', 'true'], out))
    await Promise.all([drain(h.stdout), drain(h.stderr), h.done])
  }
  // Interleaved with floor spawns, in blocks (floor.js).
  const { samples, floors } = await interleaved(iter, once)
  report(`subprocess_spawn_${stdioMode}`, name, mb, samples, { paired_floor_us: median(floors) })
  void keep
} else if (mode === 'pipe') {
  const bytes = Number(a)
  const samples = []
  let got = 0
  for (let i = 0; i < 3; i++) {
    const t = us()
    const h = sp.spawn(spec(['head', '-c', String(bytes), '/dev/zero'], 'pipe', { maxBytes: 64000 }))
    got = await drain(h.stdout)
    await h.done
    samples.push(us() - t)
  }
  report('subprocess_pipe', name, 0, samples, { bytes, lost_bytes: bytes - got })
} else if (mode === 'echo') {
  const keys = Number(a)
  const t = await sp.spawnTerminal({ argv: ['bash', '-c', 'stty raw -echo; exec cat'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 3000 })
  let seen = ''
  let waiting = null
  t.output.on('data', (d) => {
    seen += d
    if (waiting && seen.includes(waiting.key)) waiting.resolve()
  })
  const roundTrip = (key) =>
    new Promise((resolve) => {
      waiting = { key, resolve }
      void t.write(key)
    })
  // Ready once raw mode is on: a key comes back once.
  await roundTrip('R')
  const samples = []
  for (let i = 0; i < keys; i++) {
    const key = String.fromCharCode(97 + (i % 26)) + String(i)
    const t0 = us()
    await roundTrip(key)
    samples.push(us() - t0)
  }
  await t.terminate()
  report('subprocess_terminal_echo', name, 0, samples)
} else if (mode === 'terminal-throughput') {
  const bytes = Number(a)
  const samples = []
  let got = 0
  for (let i = 0; i < 3; i++) {
    const t0 = us()
    const t = await sp.spawnTerminal({ argv: ['head', '-c', String(bytes), '/dev/zero'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 3000 })
    got = await drain(t.output)
    await t.done
    samples.push(us() - t0)
    await t.terminate()
  }
  report('subprocess_terminal_throughput', name, 0, samples, { bytes, lost_bytes: bytes - got })
} else if (mode === 'terminal-spawn') {
  const iter = Number(a)
  const samples = []
  for (let i = 0; i < iter; i++) {
    const t0 = us()
    const t = await sp.spawnTerminal({ argv: ['true'], cwd: '/tmp', rows: 24, cols: 80, graceMs: 3000 })
    await drain(t.output)
    await t.done
    samples.push(us() - t0)
    await t.terminate()
  }
  // What arrives of a program that writes and exits at once.
  const lines = 20000
  const t = await sp.spawnTerminal({ argv: ['seq', '1', String(lines)], cwd: '/tmp', rows: 24, cols: 80, graceMs: 3000 })
  const text = (await (async () => {
    const chunks = []
    for await (const c of t.output) chunks.push(c)
    return Buffer.concat(chunks)
  })()).toString()
  await t.terminate()
  const expected = Array.from({ length: lines }, (_, k) => `${k + 1}\r\n`).join('')
  const lost = Buffer.byteLength(expected) - Buffer.byteLength(text)
  report('subprocess_terminal_spawn', name, 0, samples, { lost_bytes: lost })
}
await root.fiber.dispose()
