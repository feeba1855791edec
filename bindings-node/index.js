'use strict'
// dsh-native for Node: the harness's ShellExecutor over the native core.
// This file only adapts shapes (AbortSignal, the `done` promise, `task` on
// reads, listener containment); every rule lives in the Rust core.
// The harness plugin (`dsh-native/harness`) is in harness.mjs.

const { Readable } = require('node:stream')
const { AsyncResource } = require('node:async_hooks')
const { WriteQueue } = require('./write-queue.js')
const {
  NativeExecutor,
  NativeCancelToken,
  checkConfig,
  limitsSupport: nativeLimitsSupport,
  metadataUnavailable: nativeMetadataUnavailable,
  specKeys,
  runResultSlots,
} = require('./loader.js')

/** An INVALID_ARGUMENT error shaped like the native ones. */
function invalid(field, problem) {
  const err = new TypeError(`${field} ${problem}`)
  err.code = 'INVALID_ARGUMENT'
  err.field = field
  return err
}

function describe(value) {
  return value === null ? 'null' : typeof value
}

/** `signal` is the one field that is not data: an AbortSignal or absent. */
function checkSignal(signal, field) {
  if (signal === undefined) return undefined
  const isSignal =
    (typeof AbortSignal === 'function' && signal instanceof AbortSignal) ||
    (signal !== null &&
      typeof signal === 'object' &&
      typeof signal.aborted === 'boolean' &&
      typeof signal.addEventListener === 'function')
  if (!isSignal) throw invalid(field, `must be an AbortSignal, got ${describe(signal)}`)
  return signal
}

function checkObject(value, field) {
  if (value === null || typeof value !== 'object') throw invalid(field, `must be an object, got ${describe(value)}`)
}

const SPEC_KEYS = specKeys()
const KNOWN_SPEC_KEYS = new Set(SPEC_KEYS)

/**
 * A spec as the addon takes it: its values in `specKeys()` order, read here
 * (several times cheaper than key by key through napi), or the first key
 * the addon does not know, for it to refuse. The addon checks every value.
 */
function specArgs(spec) {
  for (const key in spec) {
    if (!KNOWN_SPEC_KEYS.has(key)) return [undefined, key]
  }
  return [SPEC_KEYS.map((key) => spec[key]), undefined]
}

/** The optional fields are present only when they have a value. */
function collected(text, truncated, spillPath, spillError) {
  const output = { text, truncated }
  if (spillPath !== null) output.spillPath = spillPath
  if (spillError !== null) output.spillError = spillError
  return output
}

/**
 * Where each value of a run result's flat list is (`run_result_values` in
 * src/convert.rs defines the layout once; `runResultSlots()` names it). A
 * name the addon does not have fails here, at load, not in a result.
 */
const SLOT = (() => {
  const slots = runResultSlots()
  const at = (name) => {
    const i = slots.indexOf(name)
    if (i < 0) throw new Error(`dsh-native: the addon's run result has no ${name}: rebuild it (npm run build)`)
    return i
  }
  const names = ['exitCode', 'signal', 'exitStatusUnavailable', 'timedOut', 'aborted', 'timeoutMs', 'sandbox',
    'survivors', 'backgroundId', 'limit', 'limitsEnforcement']
  const slot = Object.fromEntries(names.map((n) => [n, at(n)]))
  for (const s of ['stdout', 'stderr']) {
    slot[s] = ['text', 'truncated', 'spillPath', 'spillError'].map((f) => at(`${s}.${f}`))
  }
  return slot
})()

/** The harness's result object from the addon's flat list. */
function runResult(v) {
  const result = { exitCode: v[SLOT.exitCode], signal: v[SLOT.signal] }
  if (v[SLOT.exitStatusUnavailable]) result.exitStatusUnavailable = true
  result.timedOut = v[SLOT.timedOut]
  result.aborted = v[SLOT.aborted]
  result.timeoutMs = v[SLOT.timeoutMs]
  const [o, e] = [SLOT.stdout, SLOT.stderr]
  result.stdout = collected(v[o[0]], v[o[1]], v[o[2]], v[o[3]])
  result.stderr = collected(v[e[0]], v[e[1]], v[e[2]], v[e[3]])
  if (v[SLOT.sandbox] !== null) result.sandbox = v[SLOT.sandbox]
  if (v[SLOT.survivors] > 0) result.survivors = v[SLOT.survivors]
  if (v[SLOT.backgroundId] !== null) result.backgroundId = v[SLOT.backgroundId]
  if (v[SLOT.limit] !== null) result.limit = v[SLOT.limit]
  if (v[SLOT.limitsEnforcement] !== null) result.limitsEnforcement = v[SLOT.limitsEnforcement]
  return result
}

/** A background process handle (the harness's ShellProcess). */
class NativeShellProcess {
  #native
  #done
  constructor(native) {
    this.#native = native
    // Created once: the same promise every time, and it never rejects.
    this.#done = native.done()
    Object.defineProperty(this, 'id', { value: native.id, enumerable: true })
    Object.defineProperty(this, 'command', { value: native.command, enumerable: true })
  }

  get status() {
    return this.#native.status
  }

  get exitCode() {
    return this.#native.exitCode ?? null
  }

  get signal() {
    return this.#native.signal ?? null
  }

  /** Present (true) once settled when nobody could say how it ended. */
  get exitStatusUnavailable() {
    return this.#native.exitStatusUnavailable || undefined
  }

  /** Present once settled after a stop when part of its tree outlived the final SIGKILL. */
  get survivors() {
    return this.#native.survivors || undefined
  }

  get done() {
    return this.#done
  }

  /** Sandbox facts, present once a policy-carrying task has settled. */
  get sandbox() {
    return this.#native.sandbox() ?? undefined
  }

  /** The limit that ended it, present once settled when one did (docs/limits.md). */
  get limit() {
    return this.#native.limit ?? undefined
  }

  /** How each of its limits was enforced, present once settled when it had limits. */
  get limitsEnforcement() {
    return this.#native.limitsEnforcement() ?? undefined
  }

  get owner() {
    return this.#native.owner ?? undefined
  }

  readOutput() {
    return withTask(this.#native.readOutput(), this)
  }

  kill() {
    return this.#native.kill()
  }

  /** True when started with `stdin: { pipe: true }`. */
  get hasStdinPipe() {
    return this.#native.hasStdinPipe
  }

  /**
   * Writes `data` (a string as UTF-8, a Buffer or a Uint8Array) to the
   * command's stdin. Resolves once every byte was taken by its bounded
   * buffer; while the command does not read, the promise waits
   * (back-pressure) and the event loop runs on. Writes are written whole,
   * in call order. Rejects with code STDIN_CLOSED without a stdin pipe,
   * after closeStdin(), and once the command exited or closed its stdin.
   * A large write goes down in 1 MiB pieces, each copied once, so a pending
   * write never holds a second copy of the caller's data; do not change the
   * data until the promise settles.
   */
  writeStdin(data) {
    let bytes
    if (typeof data === 'string') bytes = Buffer.from(data, 'utf8')
    else if (Buffer.isBuffer(data)) bytes = data
    else if (data instanceof Uint8Array) bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength)
    else return Promise.reject(invalid('data', `must be a string, a Buffer or a Uint8Array, got ${describe(data)}`))
    return this.#stdin.addBytes(bytes, (piece) => this.#native.writeStdin(piece))
  }

  // In call order; with nothing queued a write starts at once, so
  // `writeStdin(x); closeStdin()` delivers x (write-queue.js).
  #stdin = new WriteQueue()
  #closeQueued = false

  /**
   * Closes the command's stdin once what was written is delivered (it reads
   * EOF). True when this call closed it; false when already closed or the
   * command exited. Throws STDIN_CLOSED without a stdin pipe.
   */
  closeStdin() {
    if (this.#stdin.idle || !this.#native.hasStdinPipe) return this.#native.closeStdin()
    if (this.#closeQueued) return false
    // A write made before goes down whole: its later pieces, still here,
    // reach the core before the close does. A write made after queues
    // behind the close, which refuses it.
    this.#closeQueued = true
    this.#stdin.add(async () => {
      this.#native.closeStdin()
    })
    return true
  }
}

/**
 * A terminal session (docs/terminals.md), assignable to the published
 * `SubprocessTerminalHandle`: `output` is a Readable of the terminal's
 * output, pulled from the core as it is read (an unread stream makes the
 * program wait, as a terminal does); `readOutput()` takes from the same
 * place, so a caller uses one or the other.
 */
class NativeTerminalHandle {
  #native
  #done
  #terminating
  #pulling = false
  /** Calls in flight, which terminate() waits for. */
  #inflight = new Set()
  constructor(native) {
    this.#native = native
    Object.defineProperty(this, 'pid', { value: native.pid, enumerable: true })
    this.#done = native.done().then(() => ({ exitCode: native.exitCode ?? null, signal: native.signal ?? null }))
    // The output's events run in the async context of the spawn, as a
    // socket's do, whoever reads it first and wherever.
    const scope = new AsyncResource('DshTerminalOutput')
    const output = new Readable({
      read: () => scope.runInAsyncScope(() => {
        if (this.#pulling) return
        this.#pulling = true
        const deliver = (text) => {
          if (text === null) {
            // The end comes after `done`, as the core orders them (the
            // output's promises settle through a core I/O thread, the exit's
            // through the callback thread, so the end could overtake it).
            // Still pulling: nothing is read after the end.
            this.#done.then(() => output.push(null))
            return false
          }
          if (output.push(Buffer.from(text, 'utf8'))) return true
          this.#pulling = false
          return false
        }
        const pull = () => {
          // What is already there is taken at once; only an empty buffer
          // waits for the core.
          for (;;) {
            const now = native.readOutput()
            if (now.text !== '') {
              if (!deliver(now.text)) return
            } else if (now.ended) {
              deliver(null)
              return
            } else {
              break
            }
          }
          native.nextOutput().then(
            (text) => {
              if (deliver(text)) pull()
            },
            (err) => {
              this.#pulling = false
              output.destroy(err)
            },
          )
        }
        pull()
      }),
    })
    Object.defineProperty(this, 'output', { value: output, enumerable: true })
  }

  /** Resolves with `{ exitCode, signal }` when the program exits; never rejects. */
  get done() {
    return this.#done
  }

  /** True once the program has exited. */
  get exited() {
    return this.#native.exited
  }

  /** Present (true) once exited when nobody could say how it ended. */
  get exitStatusUnavailable() {
    return this.#native.exitStatusUnavailable || undefined
  }

  /** Present after terminate() or dispose when members of the session outlived the final SIGKILL. */
  get survivors() {
    return this.#native.survivors || undefined
  }

  /** Consuming read: `{ text, ended }`. */
  readOutput() {
    return this.#native.readOutput()
  }

  /** Resolves once the terminal took every byte; rejects TERMINAL_CLOSED after the program exited. */
  write(data) {
    // undefined when the terminal took everything at once.
    return this.#track(async () => {
      await this.#native.write(data)
    })
  }

  #track(call) {
    const p = call()
    this.#inflight.add(p)
    const forget = () => this.#inflight.delete(p)
    p.then(forget, forget)
    return p
  }

  /** Changes the window size (the foreground group gets SIGWINCH). */
  resize(rows, cols) {
    this.#native.resize(rows, cols)
  }

  inspectForeground() {
    return this.#track(async () => (await this.#native.inspectForeground()) ?? undefined)
  }

  /** Resolves with true once the foreground group waits for input; false when `timeoutMs` passed or the program exited. */
  waitInputWaiting(timeoutMs) {
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))) {
      return Promise.reject(invalid('timeoutMs', `must be a non-negative number of milliseconds or undefined, got ${typeof timeoutMs === 'number' ? timeoutMs : describe(timeoutMs)}`))
    }
    // Infinity: no limit, as undefined.
    const limit = timeoutMs === Infinity ? undefined : timeoutMs
    return this.#track(() => this.#native.waitInputWaiting(limit))
  }

  signalForeground(signal) {
    return this.#track(async () => this.#native.signalForeground(signal))
  }

  /**
   * Ends every member of the session; resolves once nothing is left and no
   * write, inspection or signal call of this handle is still in flight.
   * Idempotent.
   */
  terminate() {
    if (this.#terminating === undefined) {
      this.#terminating = this.#native.terminate().then(async () => {
        await Promise.allSettled([...this.#inflight])
      })
    }
    return this.#terminating
  }
}

function withTask(read, task) {
  return { task, ...read }
}

class NativeShellExecutor {
  #native
  /** id → NativeBashTask, so every lookup returns the same object. */
  #tasks = new Map()

  constructor(config) {
    this.#native = new NativeExecutor(config ?? undefined)
  }

  /** The default sandbox mode; undefined when this executor does not confine. */
  get sandboxMode() {
    return this.#native.sandboxMode ?? undefined
  }

  /**
   * New commands get `config` (a whole configuration, defaults for what it
   * omits); running ones keep theirs. A bad field changes nothing.
   */
  reconfigure(config) {
    this.#native.reconfigure(config)
  }

  resolve(request) {
    checkObject(request, 'request')
    const signal = checkSignal(request.signal, 'request.signal')
    const spec = this.#native.resolve(request)
    if (signal !== undefined) spec.signal = signal
    return spec
  }

  async run(spec) {
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    // A native token only when there is a signal to follow: each one is a
    // native object with a finalizer, which a plain run need not pay for.
    const token = signal ? new NativeCancelToken() : undefined
    const onAbort = () => token.cancel()
    if (signal) {
      if (signal.aborted) token.cancel()
      else signal.addEventListener('abort', onAbort, { once: true })
    }
    let result
    try {
      const [values, unknownKey] = specArgs(spec)
      result = runResult(await this.#native.run(values, unknownKey, token))
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
    if (signal && result.backgroundId !== undefined) {
      // Handed over at the timeout: from now on the signal kills the
      // process, as for start().
      const task = this.get(result.backgroundId)
      if (signal.aborted) token.cancel()
      else if (task) {
        signal.addEventListener('abort', onAbort, { once: true })
        task.done.then(() => signal.removeEventListener('abort', onAbort))
      }
    }
    return result
  }

  start(spec) {
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    // The core refuses a start whose signal already fired (nothing runs) and
    // stops the process when it fires later.
    const token = signal ? new NativeCancelToken() : undefined
    if (signal?.aborted) token.cancel()
    const [values, unknownKey] = specArgs(spec)
    const task = this.#wrap(this.#native.start(values, unknownKey, token))
    if (signal && !signal.aborted) {
      const onAbort = () => token.cancel()
      signal.addEventListener('abort', onAbort, { once: true })
      task.done.then(() => signal.removeEventListener('abort', onAbort))
    }
    return task
  }

  #wrap(native) {
    let task = this.#tasks.get(native.id)
    if (!task) {
      task = new NativeShellProcess(native)
      this.#tasks.set(native.id, task)
    }
    return task
  }

  get(id) {
    const native = this.#native.get(id)
    return native ? this.#wrap(native) : undefined
  }

  /** The owner token stored at start; throws NOT_FOUND for an unknown id. */
  ownerOf(id) {
    return this.#native.ownerOf(id) ?? undefined
  }

  list() {
    return this.#native.list().map((native) => this.#wrap(native))
  }

  readOutput(id) {
    const read = this.#native.readOutput(id)
    return withTask(read, this.get(id))
  }

  kill(id) {
    return this.#native.kill(id)
  }

  /**
   * Forgets a settled task: its registry entry, spill files and buffered
   * output. Throws STILL_RUNNING while it runs, NOT_FOUND for an unknown id.
   */
  forget(id) {
    this.#native.forget(id)
    this.#tasks.delete(id)
  }

  /**
   * Calls `listener(task)` once per background task that settles. A
   * listener that throws is reported as a process warning and starves no
   * other. Returns a function that unsubscribes.
   */
  onTaskDone(listener) {
    if (typeof listener !== 'function') {
      throw invalid('listener', `must be a function, got ${describe(listener)}`)
    }
    // Calls the core queued for this thread before the removal are
    // dropped here: a removed listener hears of nothing more.
    let removed = false
    const id = this.#native.onTaskDone((taskId) => {
      if (removed) return
      try {
        listener(this.get(taskId))
      } catch (err) {
        process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'DshListenerWarning')
      }
    })
    return () => {
      removed = true
      this.#native.offTaskDone(id)
    }
  }

  /**
   * Starts a terminal session (docs/terminals.md) and resolves with its
   * handle once it runs. `request.signal` cancels the allocation only.
   */
  async spawnTerminal(request) {
    checkObject(request, 'request')
    const signal = checkSignal(request.signal, 'request.signal')
    const token = new NativeCancelToken()
    if (signal?.aborted) token.cancel()
    return new NativeTerminalHandle(await this.#native.spawnTerminal(request, token))
  }

  dispose() {
    return this.#native.dispose()
  }
}

/** @deprecated the seam's old name; use NativeShellExecutor. */
const NativeBashExecutor = NativeShellExecutor
/** @deprecated the seam's old name; use NativeShellProcess. */
const NativeBashTask = NativeShellProcess

/** How this host would enforce each limit (docs/limits.md). */
function limitsSupport() {
  return nativeLimitsSupport()
}

/** Why confined commands run without read-only mounts here (docs/sandbox.md); null where they run in them. */
function metadataUnavailable() {
  return nativeMetadataUnavailable() ?? null
}

/** The prefix of every managed variable (`dshEnv` keys): the seam's DSH_ENV_PREFIX. */
const DSH_ENV_PREFIX = 'DSH_'

module.exports = {
  NativeShellExecutor,
  NativeShellProcess,
  checkConfig,
  limitsSupport,
  metadataUnavailable,
  NativeTerminalHandle,
  NativeBashExecutor,
  NativeBashTask,
  DSH_ENV_PREFIX,
}
