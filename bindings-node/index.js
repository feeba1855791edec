'use strict'
// dsh-native for Node: the harness's ShellExecutor over the native core.
// This file only adapts shapes (AbortSignal, the `done` promise, `task` on
// reads, listener containment); every rule lives in the Rust core.

const { NativeExecutor, NativeCancelToken } = require('./native.js')

/** A background process handle (the harness's BashTask). */
class NativeBashTask {
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

  /** Present (true) once settled when someone else took the exit status. */
  get exitStatusUnavailable() {
    return this.#native.exitStatusUnavailable || undefined
  }

  get done() {
    return this.#done
  }

  /** Sandbox facts, present once a policy-carrying task has settled. */
  get sandbox() {
    return this.#native.sandbox() ?? undefined
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
}

function withTask(read, task) {
  return { task, ...read }
}

class NativeBashExecutor {
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

  resolve(request) {
    const spec = this.#native.resolve(request)
    if (request.signal !== undefined) spec.signal = request.signal
    return spec
  }

  async run(spec) {
    const { signal } = spec
    const token = new NativeCancelToken()
    const onAbort = () => token.cancel()
    if (signal) {
      if (signal.aborted) token.cancel()
      else signal.addEventListener('abort', onAbort, { once: true })
    }
    try {
      return await this.#native.run(spec, token)
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  start(spec) {
    const task = this.#wrap(this.#native.start(spec))
    const { signal } = spec
    if (signal) {
      const onAbort = () => task.kill()
      if (signal.aborted) onAbort()
      else {
        signal.addEventListener('abort', onAbort, { once: true })
        task.done.then(() => signal.removeEventListener('abort', onAbort))
      }
    }
    return task
  }

  #wrap(native) {
    let task = this.#tasks.get(native.id)
    if (!task) {
      task = new NativeBashTask(native)
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
      const err = new TypeError(`invalid listener: must be a function, got ${listener === null ? 'null' : typeof listener}`)
      err.code = 'INVALID_ARGUMENT'
      err.field = 'listener'
      throw err
    }
    const id = this.#native.onTaskDone((taskId) => {
      try {
        listener(this.get(taskId))
      } catch (err) {
        process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'DshListenerWarning')
      }
    })
    return () => {
      this.#native.offTaskDone(id)
    }
  }

  dispose() {
    return this.#native.dispose()
  }
}

module.exports = { NativeBashExecutor, NativeBashTask }
