'use strict'
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const { NativeShellExecutor } = require('../../bindings-node')
// The old name stays as an alias; tests use the current one.
const NativeBashExecutor = NativeShellExecutor

function executor(config = {}) {
  return new NativeBashExecutor({ graceMs: 300, ...config })
}

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const state = stat.slice(stat.lastIndexOf(')') + 2)[0]
    return state !== 'Z' && state !== 'X'
  } catch {
    return false
  }
}

async function eventually(cond, limitMs = 20000) {
  const end = Date.now() + limitMs
  while (Date.now() < end) {
    if (await cond()) return true
    await new Promise((r) => setTimeout(r, 10))
  }
  return cond()
}

async function readUntil(task, needle) {
  let seen = ''
  const ok = await eventually(() => {
    seen += task.readOutput().delta
    return seen.includes(needle)
  })
  if (!ok) throw new Error(`never saw ${JSON.stringify(needle)}: ${JSON.stringify(seen)}`)
  return seen
}

// Every directory tmpdir() made, removed when the test process exits
// (node --test runs each file in a process of its own).
const madeDirs = []
process.once('exit', () => {
  for (const dir of madeDirs) fs.rmSync(dir, { recursive: true, force: true })
})

function tmpdir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-node-'))
  madeDirs.push(dir)
  return dir
}

// Why this kernel cannot confine a command, or null when it can; cached.
// Node cannot make the system call itself, so this asks dsh and accepts
// only its "no Landlock" answers: any other failure is left for the test to
// report. (The Rust, C and Python suites ask the kernel directly, so a dsh
// that wrongly reported Landlock missing would fail there.)
// DSH_TEST_FAKE_NO_LANDLOCK=1 answers as a kernel without Landlock would.
let landlockProbe
async function landlockMissing() {
  if (process.env.DSH_TEST_FAKE_NO_LANDLOCK === '1') return 'Landlock faked away (DSH_TEST_FAKE_NO_LANDLOCK=1)'
  if (landlockProbe === undefined) {
    const ex = executor()
    try {
      await ex.run(ex.resolve({ command: 'true', sandboxPolicy: { mode: 'read-only' } }))
      landlockProbe = null
    } catch (e) {
      const noLandlock = /has no Landlock|Landlock is disabled|Landlock is unavailable/
      landlockProbe = e.code === 'SANDBOX_UNAVAILABLE' && noLandlock.test(e.message) ? e.message : null
    } finally {
      await ex.dispose()
    }
  }
  return landlockProbe
}

/** Processes whose command line contains `marker`. */
function withMarker(marker) {
  let n = 0
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      if (fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker)) n++
    } catch {
      // gone meanwhile
    }
  }
  return n
}

/** The name a process runs as (/proc/PID/comm), or undefined once it is gone. */
function comm(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
  } catch {
    return undefined
  }
}

/** `promise`, or a failure naming `what` once `ms` passed. */
function within(ms, promise, what) {
  let timer
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)
  })
  return Promise.race([promise.finally(() => clearTimeout(timer)), late])
}

/** The error `fn` throws or rejects with. */
async function failure(fn) {
  try {
    await fn()
  } catch (e) {
    return e
  }
  assert.fail('expected an error')
}

/**
 * Runs node with `args` in a child process; resolves with its stdout, and
 * fails when it exits non-zero or is still running after `timeoutMs` (a
 * hang fails instead of hanging the suite).
 */
function nodeChild(args, timeoutMs = 30000) {
  const { spawn } = require('node:child_process')
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    c.stdout.on('data', (d) => (out += d))
    c.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => c.kill('SIGKILL'), timeoutMs)
    c.on('error', reject)
    c.on('close', (code, signal) => {
      clearTimeout(timer)
      if (signal !== null) reject(new Error(`the child was killed (a hang?): ${out}${err}`))
      else if (code !== 0) reject(new Error(`the child failed (${code}): ${out}${err}`))
      else resolve(out)
    })
  })
}

module.exports = { nodeChild, executor, alive, comm, eventually, failure, within, readUntil, tmpdir, landlockMissing, withMarker, NativeBashExecutor, NativeShellExecutor }
