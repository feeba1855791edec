'use strict'
// Node drivers. Usage:
//   node bench.js latency ITER HOST_MB dsh|cp   run `true`: dsh-native, or child_process as a TS executor uses it
//   node bench.js starts N                      start() blocking time, N concurrent `sleep 0.2`, threads and memory
//   node bench.js read ITER                     readOutput() on an idle process
const fs = require('node:fs')
const { spawn } = require('node:child_process')
const { NativeBashExecutor } = require('../../bindings-node')
const { interleaved, median } = require('./floor.js')

function report(bench, impl, hostMb, samples, extra = {}) {
  samples.sort((a, b) => a - b)
  console.log(JSON.stringify({ bench, impl, host_mb: hostMb, median_us: samples[samples.length >> 1], min_us: samples[0], max_us: samples[samples.length - 1], n: samples.length, ...extra }))
}

function ballast(mb) {
  if (mb <= 0) return null
  const b = Buffer.alloc(mb * 1048576)
  for (let i = 0; i < b.length; i += 4096) b[i] = 1
  return b
}

const us = () => Number(process.hrtime.bigint()) / 1000

// child_process the way a TypeScript executor uses it: detached group,
// stdin ignored, both pipes collected, 'close' awaited.
function cpRun(command) {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', command], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
    const out = []
    const err = []
    child.stdout.on('data', (d) => out.push(d))
    child.stderr.on('data', (d) => err.push(d))
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }))
  })
}

function status(key) {
  const line = fs.readFileSync('/proc/self/status', 'utf8').split('\n').find((l) => l.startsWith(key))
  return Number(line.split(/\s+/)[1])
}

async function main() {
  const [mode, a, b, which] = process.argv.slice(2)
  if (mode === 'latency') {
    const iter = Number(a)
    const mb = Number(b)
    const keep = ballast(mb)
    const ex = new NativeBashExecutor()
    const spec = ex.resolve({ command: 'true' })
    const once = which === 'cp' ? () => cpRun('true') : () => ex.run(spec)
    // Interleaved with floor spawns, in blocks (floor.js).
    const { samples, floors } = await interleaved(iter, once)
    report('run_true', which === 'cp' ? 'Node child_process' : 'dsh (Node)', mb, samples, { paired_floor_us: median(floors) })
    await ex.dispose()
    void keep
  } else if (mode === 'starts') {
    const n = Number(a)
    const ex = new NativeBashExecutor()
    // Warm: a run and a background start, so threads started once, on
    // first use, count as before (what must stay constant is the count as
    // the processes grow in number).
    await ex.run(ex.resolve({ command: 'true' }))
    await ex.start(ex.resolve({ command: 'true' })).done
    const threadsBefore = status('Threads:')
    const spec = ex.resolve({ command: 'sleep 0.2' })
    const blocked = []
    const t0 = us()
    const tasks = []
    for (let i = 0; i < n; i++) {
      const t = us()
      tasks.push(ex.start(spec))
      blocked.push(us() - t)
    }
    await Promise.all(tasks.map((t) => t.done))
    const total = us() - t0
    const threadsAfter = status('Threads:')
    const p99 = [...blocked].sort((x, y) => x - y)[Math.floor(0.99 * (blocked.length - 1))]
    report('start_block', 'dsh (Node)', 0, blocked, { p99_us: p99 })
    report('starts_sleep', 'dsh (Node)', 0, [total], { threads_before: threadsBefore, threads_after: threadsAfter })
    // Idle cost: N long sleepers, all running at once.
    const rss0 = status('VmRSS:')
    const idle = Array.from({ length: n }, () => ex.start(ex.resolve({ command: 'exec sleep 30' })))
    await new Promise((r) => setTimeout(r, 500))
    const perProcess = ((status('VmRSS:') - rss0) * 1024) / n
    const threadsIdle = status('Threads:')
    console.log(JSON.stringify({ bench: 'idle_process', impl: 'dsh (Node)', bytes_per_process: Math.round(perProcess), threads: threadsIdle, threads_before: threadsBefore, n }))
    await ex.dispose()
    void idle
  } else if (mode === 'read') {
    const iter = Number(a)
    const ex = new NativeBashExecutor()
    const task = ex.start(ex.resolve({ command: 'exec sleep 60' }))
    const samples = []
    for (let rep = 0; rep < 25; rep++) {
      const t = us()
      for (let i = 0; i < iter; i++) task.readOutput()
      samples.push((us() - t) / iter)
    }
    report('read_idle', 'dsh (Node)', 0, samples)
    await ex.dispose()
  } else {
    console.error('usage: see the header of bench.js')
    process.exit(2)
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
