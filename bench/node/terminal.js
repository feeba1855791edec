'use strict'
// Terminal-session drivers, dsh-native beside node-pty in the same Node
// process shape. Usage:
//   node terminal.js echo ITER dsh|pty         keystroke -> echo round trip through a raw-mode `cat`
//   node terminal.js throughput BYTES dsh|pty  `head -c BYTES /dev/zero` through the terminal, all bytes received
//   node terminal.js spawn ITER dsh|pty        spawn `true` in a terminal until its output ended
// node-pty is not a dependency of dsh-native: bench/run installs it under
// target/bench/node-pty and passes its directory in NODE_PTY_DIR.
const path = require('node:path')
const { NativeShellExecutor } = require('../../bindings-node')

const us = () => Number(process.hrtime.bigint()) / 1000

function report(bench, impl, samples, extra = {}) {
  samples.sort((a, b) => a - b)
  console.log(
    JSON.stringify({
      bench,
      impl,
      host_mb: 0,
      median_us: samples[samples.length >> 1],
      min_us: samples[0],
      max_us: samples[samples.length - 1],
      n: samples.length,
      ...extra,
    }),
  )
}

/** One interface over both: spawn(argv) -> { write, onData(cb), done, end } */
function backend(which) {
  if (which === 'pty') {
    const pty = require(path.join(process.env.NODE_PTY_DIR, 'node_modules', 'node-pty'))
    return {
      impl: 'node-pty 1.1.0',
      async spawn(argv) {
        const p = pty.spawn(argv[0], argv.slice(1), { name: 'xterm-256color', cols: 80, rows: 24, cwd: '/tmp', env: process.env })
        let onData = () => {}
        p.onData((d) => onData(d))
        const done = new Promise((resolve) => p.onExit(resolve))
        return {
          write: (s) => p.write(s),
          set onData(cb) {
            onData = cb
          },
          done,
          end: async () => {
            try {
              p.kill('SIGKILL')
            } catch {}
            await done
          },
        }
      },
      dispose: async () => {},
    }
  }
  const ex = new NativeShellExecutor()
  return {
    impl: 'dsh (Node)',
    async spawn(argv) {
      const t = await ex.spawnTerminal({ argv, cwd: '/tmp', rows: 24, cols: 80 })
      let onData = () => {}
      t.output.on('data', (d) => onData(d.toString('utf8')))
      const ended = new Promise((resolve) => t.output.on('end', resolve))
      return {
        write: (s) => t.write(s),
        set onData(cb) {
          onData = cb
        },
        done: Promise.all([t.done, ended]),
        end: () => t.terminate(),
      }
    },
    dispose: () => ex.dispose(),
  }
}

async function main() {
  const [mode, a, which] = process.argv.slice(2)
  const b = backend(which)
  if (mode === 'echo') {
    const iter = Number(a)
    const s = await b.spawn(['bash', '-c', 'stty raw -echo; printf ready; exec cat'])
    let seen = ''
    let waiter = null
    s.onData = (d) => {
      seen += d
      if (waiter && seen.includes(waiter.want)) {
        const w = waiter
        waiter = null
        w.resolve()
      }
    }
    const until = (want) =>
      seen.includes(want) ? Promise.resolve() : new Promise((resolve) => (waiter = { want, resolve }))
    await until('ready')
    const samples = []
    for (let i = 0; i < iter + 5; i++) {
      seen = ''
      const key = String.fromCharCode(97 + (i % 26))
      const t = us()
      const echoed = until(key)
      s.write(key)
      await echoed
      if (i >= 5) samples.push(us() - t)
    }
    report('terminal_echo', b.impl, samples)
    await s.end()
  } else if (mode === 'throughput') {
    const bytes = Number(a)
    const samples = []
    let lost = 0
    for (let round = 0; round < 3; round++) {
      let got = 0
      const t = us()
      const s = await b.spawn(['head', '-c', String(bytes), '/dev/zero'])
      s.onData = (d) => {
        got += d.length
      }
      await s.done
      // node-pty may deliver the last chunks just after its exit event: take
      // what comes until 100 ms pass without any (not counted in the time).
      let stop = us()
      for (let last = got; got < bytes; last = got) {
        await new Promise((r) => setTimeout(r, 100))
        if (got === last) break
        stop = us()
      }
      samples.push(stop - t)
      // Reported, not hidden: a terminal that drops the end of the output.
      lost = Math.max(lost, bytes - got)
    }
    report('terminal_throughput', b.impl, samples, { bytes, lost_bytes: lost })
  } else if (mode === 'spawn') {
    const iter = Number(a)
    const samples = []
    for (let i = 0; i < iter + 5; i++) {
      const t = us()
      const s = await b.spawn(['true'])
      s.onData = () => {}
      await s.done
      if (i >= 5) samples.push(us() - t)
    }
    report('terminal_spawn', b.impl, samples)
  } else {
    throw new Error(`unknown mode ${mode}`)
  }
  await b.dispose()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
