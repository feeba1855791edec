// dsh-native/subprocess: the harness's `ctx.subprocess` on dsh-native, in
// place of `@deepseek-ai/dsh-subprocess-local`. It extends the published
// abstract `SubprocessRuntime` and only adapts the seam's shapes: every
// rule (lookup, environment, streams, offsets, the tree, the escalation)
// lives in the Rust core (docs/spawn.md).

import { createRequire } from 'node:module'
import net from 'node:net'
import { resolve as resolvePath } from 'node:path'
import { getSystemErrorName } from 'node:util'
import { Readable, Writable, finished } from 'node:stream'
import { SubprocessRuntime } from '@deepseek-ai/dsh-subprocess'

const require = createRequire(import.meta.url)
const { NativeExecutor, NativeCancelToken } = require('./loader.js')
const { NativeTerminalHandle } = require('./index.js')

/** A seam-shape error: what the published provider throws from `spawn`. */
function shapeError(message) {
  const err = new TypeError(`dsh-native/subprocess: ${message}`)
  err.code = 'INVALID_ARGUMENT'
  return err
}

function isSignal(signal) {
  return (
    signal !== null &&
    typeof signal === 'object' &&
    typeof signal.aborted === 'boolean' &&
    typeof signal.addEventListener === 'function'
  )
}

function checkSignal(signal, field) {
  if (signal !== undefined && !isSignal(signal)) throw shapeError(`${field} must be an AbortSignal`)
  return signal
}

/**
 * `readFrom`'s offset: a number; below 0 reads from the start, past the
 * end (`Infinity` too) reads nothing.
 */
function fromByte(from) {
  if (typeof from !== 'number' || Number.isNaN(from)) {
    throw shapeError(`readFrom's fromByte must be a number, got ${Number.isNaN(from) ? 'NaN' : from === null ? 'null' : typeof from}`)
  }
  return from
}

/** An environment overlay as the addon takes it: keys, and values (`null` removes). */
function overlay(env, field) {
  const keys = []
  const values = []
  if (env === undefined) return [keys, values]
  if (env === null || typeof env !== 'object') throw shapeError(`${field} must be an object`)
  for (const key of Object.keys(env)) {
    const value = env[key]
    if (value !== undefined && typeof value !== 'string') {
      throw shapeError(`${field}.${key} must be a string or undefined, got ${typeof value}`)
    }
    keys.push(key)
    values.push(value ?? null)
  }
  return [keys, values]
}

/** `[mode, maxBytes, spillMaxBytes]` of one output disposition (-1: no spill). */
function output(mode, field) {
  if (mode === 'pipe' || mode === 'inherit') return [mode, 0, null]
  if (mode === null || typeof mode !== 'object' || typeof mode.maxBytes !== 'number') {
    throw shapeError(`${field} must be 'pipe', 'inherit' or { maxBytes, spill? }`)
  }
  if (mode.spill === undefined) return ['collect', mode.maxBytes, null]
  if (mode.spill === null || typeof mode.spill !== 'object' || typeof mode.spill.maxBytes !== 'number') {
    throw shapeError(`${field}.spill must be { maxBytes }`)
  }
  return ['collect', mode.maxBytes, mode.spill.maxBytes]
}

/**
 * `[mode, data]` of the stdin disposition. The seam's `data` is a string;
 * bytes (a Buffer or Uint8Array) are taken too, as Node's own spawn takes
 * them and as the published bash executor passes them through.
 */
function input(mode) {
  if (mode === 'ignore' || mode === 'pipe') return [mode, null]
  if (mode !== null && typeof mode === 'object' && typeof mode.data === 'string') {
    return ['data', Buffer.from(mode.data, 'utf8')]
  }
  if (mode !== null && typeof mode === 'object' && mode.data instanceof Uint8Array) {
    // A view, not a copy: the addon takes its own copy in the call.
    const d = mode.data
    return ['data', Buffer.isBuffer(d) ? d : Buffer.from(d.buffer, d.byteOffset, d.byteLength)]
  }
  throw shapeError("stdio.stdin must be 'ignore', 'pipe' or { data }")
}

/** A Readable or Writable over a raw pipe end the core handed over. */
function pipeSocket(fd, readable) {
  const socket = new net.Socket({ fd, readable, writable: !readable, allowHalfOpen: true })
  if (!readable) {
    // A write that meets a program gone (or never started) before the
    // handle learned of it fails that write (its callback gets EPIPE); as
    // an 'error' nobody listens for it would end the host. Other errors,
    // with no listener of the caller's, are thrown as before.
    socket.on('error', (err) => {
      if (err?.code !== 'EPIPE' && socket.listenerCount('error') === 1) throw err
    })
  }
  return socket
}

/**
 * A raw output pipe as a `Readable`, read on this thread's loop by the
 * addon (pipe_reader.rs): what the caller reads paces the pipe, as a
 * socket's reads would, for less than a socket costs to make and end; its
 * events run in the async context of the spawn, as a socket's do.
 * Where the loop is not libuv's, a `net.Socket` over the descriptor.
 */
function pipeReadable(native, index) {
  let reader
  const resume = () => {
    // Reading that ended where the stream could not be told (node
    // refusing a scope or the poll) is learnt here, and ends the stream.
    const failed = reader.resume()
    if (failed) stream.destroy(readError(failed))
  }
  const stream = new Readable({
    read: resume,
    destroy(err, callback) {
      reader.close()
      callback(err)
    },
  })
  const got = native.pipeReader(index, (chunk, errno) => {
    if (chunk !== null) return stream.push(chunk)
    if (errno) stream.destroy(readError(errno))
    else stream.push(null)
    return false
  })
  if (got === null) return undefined
  if (typeof got === 'number') return pipeSocket(got, true)
  reader = got
  // Read ahead at once, as a socket does from its making: up to the
  // stream's highWaterMark (at least one chunk) waits in it, so a program
  // has that much more room before it blocks on a pipe nobody reads yet
  // (stdout read to its end before stderr).
  resume()
  return stream
}

/** The error a failed read of a pipe gives, as node's own streams shape it. */
function readError(errno) {
  const code = getSystemErrorName(-errno)
  return Object.assign(new Error(`read ${code}`), { errno: -errno, code, syscall: 'read' })
}

/**
 * Resolves once each raw output pipe has delivered its last byte (its
 * `end`), or `graceMs` passed: a pipe the caller never reads, or one a
 * descendant still holds, cannot hold `done` open longer.
 */
function drained(streams, graceMs) {
  const open = streams.filter((s) => s !== undefined && !s.readableEnded && !s.destroyed)
  if (open.length === 0) return Promise.resolve()
  return new Promise((resolve) => {
    let left = open.length
    const timer = setTimeout(resolve, graceMs)
    for (const s of open) {
      finished(s, { writable: false }, () => {
        left -= 1
        if (left === 0) {
          clearTimeout(timer)
          resolve()
        }
      })
    }
  })
}

/**
 * The seam's `SubprocessHandle` over a spawned program (docs/spawn.md).
 * Collect-mode readers read by offset from the core; piped streams are the
 * raw pipes; `waitForExit` waits for the whole tree.
 */
class NativeSubprocessHandle {
  #native
  #gone
  #pid
  constructor(native, streams, collected, signal, graceMs) {
    this.#native = native
    this.stdin = streams[0]
    this.stdout = streams[1]
    this.stderr = streams[2]
    this.collected = collected
    const onAbort = () => this.terminate()
    signal?.addEventListener('abort', onAbort, { once: true })
    // At process close, as the seam says: the program has exited and its
    // raw output pipes have delivered their last bytes.
    const over = () => {
      signal?.removeEventListener('abort', onAbort)
      // As child_process does at the exit: a later write is refused
      // (ERR_STREAM_DESTROYED) instead of failing later with an EPIPE
      // 'error' nobody listens for, which would end the host.
      streams[0]?.destroy()
    }
    this.done = native.done().then(
      async (facts) => {
        over()
        // A raw output pipe nobody has started reading does not hold
        // `done` (it would until the grace): its bytes wait for a reader
        // that comes after (stdout read to its end, then stderr), for
        // graceMs. Still unread then, it is let flow, its bytes dropped,
        // as child_process does at the exit, so its pipe is not held on to.
        const untouched = (s) => s.readableFlowing === null && s.listenerCount('readable') === 0
        const outputs = [streams[1], streams[2]].filter((s) => s !== undefined)
        for (const s of outputs.filter(untouched)) {
          setTimeout(() => untouched(s) && s.resume(), graceMs).unref()
        }
        await drained(
          outputs.filter((s) => !untouched(s)),
          graceMs,
        )
        return { exitCode: facts.exitCode ?? null, signal: facts.signal ?? null }
      },
      (err) => {
        // It did not start (the spawn returned before its exec): its pipes
        // are over already.
        over()
        throw err
      },
    )
    // Rejected for whoever awaits it; not an unhandled rejection by itself.
    this.done.catch(() => {})
    // An abort that fired between the spawn and the listener.
    if (signal?.aborted) onAbort()
  }

  /**
   * The leader's pid; -1 for a program that did not start. The spawn
   * returns before the exec (one wake-up of the host less per spawn), so
   * the first read before it waits for it, as long as the spawn would have.
   */
  get pid() {
    this.#pid ??= this.#native.pid
    return this.#pid
  }

  terminate() {
    this.#native.terminate()
  }

  async waitForExit(signal) {
    checkSignal(signal, 'signal')
    if (this.#native.treeGone) return true
    if (signal?.aborted) return false
    this.#gone ??= this.#native.whenTreeGone().then(() => true)
    if (signal === undefined) return this.#gone
    return new Promise((resolve) => {
      const onAbort = () => resolve(false)
      signal.addEventListener('abort', onAbort, { once: true })
      this.#gone.then((gone) => {
        signal.removeEventListener('abort', onAbort)
        resolve(gone)
      })
    })
  }
}

/**
 * The handle of a program that could not start, as the seam wants it: pid
 * −1, `done` rejected with the error, streams that are already over.
 */
function failedHandle(err, stdio) {
  const ended = () => Readable.from([])
  const done = Promise.reject(err)
  // Rejected for whoever awaits it; not an unhandled rejection by itself.
  done.catch(() => {})
  const empty = { readFrom: () => ({ text: '', nextOffset: 0, lossy: false }) }
  const collected = {}
  if (typeof stdio.stdout === 'object') collected.stdout = empty
  if (typeof stdio.stderr === 'object') collected.stderr = empty
  return {
    pid: -1,
    stdin: stdio.stdin === 'pipe' ? refusingWrites() : undefined,
    stdout: stdio.stdout === 'pipe' ? ended() : undefined,
    stderr: stdio.stderr === 'pipe' ? ended() : undefined,
    collected,
    done,
    terminate() {},
    waitForExit: async () => true,
  }
}

/**
 * The stdin of a program that never ran: a write is refused
 * (ERR_STREAM_DESTROYED to its callback), as for one that has exited.
 */
function refusingWrites() {
  const stdin = new Writable({ write: (_chunk, _enc, cb) => cb() })
  stdin.destroy()
  return stdin
}

/** Errors of a start the kernel or the supervisor refused: `done` rejects with them. */
function isSpawnFailure(err) {
  return typeof err?.code === 'string' && typeof err.errno === 'number'
}

// Symbol-keyed, not `#private`: cordis hands out proxies of a service, and
// private fields do not survive a proxy.
// One symbol for both, read once per call: each read through the proxy
// costs microseconds, a real share of a spawn.
const STATE = Symbol('dsh-native executor and live handles')

/**
 * `ctx.subprocess` backed by dsh-native. Loading it instead of
 * `@deepseek-ai/dsh-subprocess-local` moves every process the harness
 * starts (its bash executor's, its terminals', its language servers') onto
 * the native core.
 */
export class NativeSubprocessRuntime extends SubprocessRuntime {
  constructor(ctx) {
    super(ctx)
    const state = { native: new NativeExecutor(), live: new Set() }
    this[STATE] = state
    // No method here reads the caller's context (`this.ctx`): cordis need
    // not build a shadow context and two proxies around each call, as it
    // does for a service that does (its own event service opts out the
    // same way). That wrapping cost a spawn ~50 µs, 3% of `bash -c true`.
    const tracker = this[Symbol.for('cordis.tracker')]
    if (tracker) tracker.noShadow = true
    ctx.effect(
      () => async () => {
        // Each with its own grace; terminals await their quiescence.
        await Promise.allSettled([...state.live].map((h) => h.terminate()))
        state.live.clear()
        // Stops what is still running, ends every tree, awaits all of it.
        await state.native.dispose()
      },
      'dsh-native subprocess teardown',
    )
  }

  async resolveExecutable(command, env, signal) {
    checkSignal(signal, 'signal')
    signal?.throwIfAborted()
    if (typeof command !== 'string') throw shapeError('command must be a string')
    const [keys, values] = overlay(env, 'env')
    const path = this[STATE].native.resolveExecutable(command, keys, values)
    signal?.throwIfAborted()
    return path
  }

  spawn(spec) {
    const state = this[STATE]
    if (spec === null || typeof spec !== 'object') throw shapeError('spec must be an object')
    const signal = checkSignal(spec.signal, 'spec.signal')
    if (signal?.aborted) throw new Error(`aborted before spawn: ${String(signal.reason ?? 'aborted')}`)
    const { argv, cwd, stdio, graceMs } = spec
    if (!Array.isArray(argv) || argv.some((a) => typeof a !== 'string')) {
      throw shapeError('spec.argv must be an array of strings')
    }
    if (typeof cwd !== 'string') throw shapeError('spec.cwd must be a string')
    if (stdio === null || typeof stdio !== 'object') throw shapeError('spec.stdio must be an object')
    if (typeof graceMs !== 'number') throw shapeError('spec.graceMs must be a number')
    const [stdinMode, stdinData] = input(stdio.stdin)
    const out = output(stdio.stdout, 'stdio.stdout')
    const err = output(stdio.stderr, 'stdio.stderr')
    const [keys, values] = overlay(spec.env, 'spec.env')
    let native
    try {
      native = state.native.spawnProgram(
        [...argv], resolvePath(cwd), keys, values, stdinMode, stdinData, ...out, ...err, graceMs,
      )
    } catch (e) {
      if (isSpawnFailure(e)) return failedHandle(e, stdio)
      throw e
    }
    // Only a 'pipe' stream has a descriptor to take (a crossing saved for each other).
    const streams = [stdinMode, out[0], err[0]].map((mode, i) => {
      if (mode !== 'pipe') return undefined
      if (i !== 0) return pipeReadable(native, i)
      const fd = native.takeFd(i)
      return fd === null ? undefined : pipeSocket(fd, false)
    })
    const collected = {}
    for (const [name, mode] of [['stdout', out[0]], ['stderr', err[0]]]) {
      if (mode === 'collect') collected[name] = { readFrom: (from) => native.readFrom(name, fromByte(from)) }
    }
    const handle = new NativeSubprocessHandle(native, streams, collected, signal, graceMs)
    state.live.add(handle)
    const forget = () => state.live.delete(handle)
    handle.done.then(forget, forget)
    return handle
  }

  async spawnTerminal(spec) {
    const state = this[STATE]
    if (spec === null || typeof spec !== 'object') throw shapeError('spec must be an object')
    const signal = checkSignal(spec.signal, 'spec.signal')
    signal?.throwIfAborted()
    const { argv, cwd, env, rows, cols, graceMs } = spec
    const token = new NativeCancelToken()
    const onAbort = () => token.cancel()
    signal?.addEventListener('abort', onAbort, { once: true })
    let native
    try {
      native = await state.native.spawnTerminal(
        { argv: Array.isArray(argv) ? [...argv] : argv, cwd: typeof cwd === 'string' ? resolvePath(cwd) : cwd, env, rows, cols, graceMs },
        token,
      )
    } finally {
      // The signal cancels the allocation only: the session is the handle's.
      signal?.removeEventListener('abort', onAbort)
    }
    const handle = new NativeTerminalHandle(native)
    state.live.add(handle)
    handle.done.finally(() => state.live.delete(handle))
    return handle
  }
}

export default NativeSubprocessRuntime
// The seam's class the plugin extends, under its own name.
export { SubprocessRuntime }
