'use strict'
// The C floor (target/bench/floor) in lockstep, for the Node drivers: what
// they time is interleaved with floor spawns, in blocks (see `interleaved`).
const path = require('node:path')
const { spawn } = require('node:child_process')

/** Floor spawns, then as many timed operations, in one block; the first of each is left out (it pays for what the other kind left behind). */
const BLOCK = 10

const us = () => Number(process.hrtime.bigint()) / 1000

/** The C floor in lockstep: `spawns(n)` has it spawn `bash -c true` n times and resolves with their microseconds. */
function lockstepFloor() {
  const child = spawn(path.join(__dirname, '..', '..', 'target', 'bench', 'floor'), ['lockstep'], { stdio: ['pipe', 'pipe', 'inherit'] })
  let buffered = ''
  let waiting
  const lines = []
  child.stdout.on('data', (d) => {
    buffered += d
    let nl
    while ((nl = buffered.indexOf('\n')) >= 0) {
      lines.push(Number(buffered.slice(0, nl)))
      buffered = buffered.slice(nl + 1)
    }
    if (waiting && lines.length >= waiting.n) {
      const { n, resolve } = waiting
      waiting = undefined
      resolve(lines.splice(0, n))
    }
  })
  return {
    spawns: (n) =>
      new Promise((resolve) => {
        waiting = { n, resolve }
        child.stdin.write('x'.repeat(n))
      }),
    end: () =>
      new Promise((resolve) => {
        child.on('close', resolve)
        child.stdin.end()
      }),
  }
}

/**
 * `op` timed `iter` times, interleaved with as many floor spawns in blocks
 * of BLOCK (after five warm-up rounds): both meet the machine as it is
 * then. Resolves with `{ samples, floors }` in microseconds.
 */
async function interleaved(iter, op) {
  const floor = lockstepFloor()
  for (let i = 0; i < 5; i++) {
    await floor.spawns(1)
    await op()
  }
  const samples = []
  const floors = []
  while (samples.length < iter) {
    floors.push(...(await floor.spawns(BLOCK)).slice(1))
    for (let i = 0; i < BLOCK; i++) {
      const t = us()
      await op()
      if (i > 0) samples.push(us() - t)
    }
  }
  await floor.end()
  return { samples: samples.slice(0, iter), floors: floors.slice(0, iter) }
}

/** The median of `xs`. */
function median(xs) {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[sorted.length >> 1]
}

module.exports = { interleaved, median }
