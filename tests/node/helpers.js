'use strict'
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

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-node-'))
}

module.exports = { executor, alive, eventually, readUntil, tmpdir, NativeBashExecutor, NativeShellExecutor }
