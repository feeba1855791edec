'use strict'
// The C floor (target/bench/floor) in lockstep, for the Node drivers: each
// run they time is paired with one floor spawn made just before it.
const path = require('node:path')
const { spawn } = require('node:child_process')

/** The C floor in lockstep: `once()` has it spawn `bash -c true` once and resolves with its microseconds. */
function lockstepFloor() {
  const child = spawn(path.join(__dirname, '..', '..', 'target', 'bench', 'floor'), ['lockstep'], { stdio: ['pipe', 'pipe', 'inherit'] })
  let buffered = ''
  let waiting
  child.stdout.on('data', (d) => {
    buffered += d
    const nl = buffered.indexOf('\n')
    if (nl >= 0 && waiting) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      const resolve = waiting
      waiting = undefined
      resolve(Number(line))
    }
  })
  return {
    once: () =>
      new Promise((resolve) => {
        waiting = resolve
        child.stdin.write('x')
      }),
    end: () =>
      new Promise((resolve) => {
        child.on('close', resolve)
        child.stdin.end()
      }),
  }
}

module.exports = { lockstepFloor }
