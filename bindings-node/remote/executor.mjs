// dsh-native/remote's RemoteShellExecutor: `connect` (the transport and
// the config checked, then `initialize`), and the API of NativeShellExecutor
// over a Session (session.mjs): each spec and request is judged by the
// local resolver first, as the local face judges it, then sent.

import { createRequire } from 'node:module'
import { PROTOCOL_VERSION, CLIENT, CLOSE_LIMIT_MS, CONNECT_TIMEOUT_MS, HANDLE } from './constants.mjs'
import {
  describe,
  invalid,
  coded,
  quoted,
  isObject,
  wireConfig,
  withoutSpillDir,
  onServer,
  samePath,
  wireSpec,
  wireTerminalRequest,
  runResult,
  checkSignal,
  checkObject,
  checkRunOptions,
  checkTransport,
} from './wire.mjs'
import { Connection } from './connection.mjs'
import { Session } from './session.mjs'
import { TerminalMirror, RemoteTerminalHandle } from './terminal.mjs'

const require = createRequire(import.meta.url)
const { checkConfig } = require('../index.js')

/** An already-fired signal: what makes the local resolver check a spec and run nothing. */
const CHECK_ONLY = AbortSignal.abort()

const CONNECT = Symbol('dsh-native remote connect')
/** The longest timer node keeps. */
const MAX_TIMER_MS = 2 ** 31 - 1

/**
 * The harness's ShellExecutor over `dsh serve` (docs/protocol.md): the API
 * of NativeShellExecutor, made by `RemoteShellExecutor.connect()`.
 */
export class RemoteShellExecutor {
  #s
  #disposing

  /**
   * Connects: `transport` is `{ command: [...] }` (a program speaking the
   * protocol on its stdin and stdout: `['ssh', 'host', 'dsh', 'serve',
   * '--stdio']`) or `{ socket: path }` (`dsh serve --listen unix:PATH`);
   * `config` is a NativeShellExecutorConfig for the server's executor;
   * `connectTimeoutMs` (default 120000, Infinity: none) how long the
   * server may take to answer `initialize`, and a resume attempt.
   */
  static async connect(options) {
    checkObject(options, 'options')
    for (const key of Object.keys(options)) {
      if (key !== 'transport' && key !== 'config' && key !== 'connectTimeoutMs') {
        throw invalid(`options.${key}`, 'is not a known field (expected one of: transport, config, connectTimeoutMs)')
      }
    }
    const given = options.connectTimeoutMs
    if (given !== undefined && (typeof given !== 'number' || !(given > 0))) {
      const got = typeof given === 'number' ? String(given) : describe(given)
      throw invalid('connectTimeoutMs', `must be a positive number of milliseconds (Infinity: no limit), got ${got}`)
    }
    // A timer cannot be longer than 2^31 - 1 ms (node fires a longer one at
    // once): past that, ~24.8 days, it is no limit.
    const timeoutMs = given === undefined ? CONNECT_TIMEOUT_MS : given > MAX_TIMER_MS ? Infinity : given
    const transport = checkTransport(options.transport)
    const config = options.config ?? undefined
    // Every field but spillDir is checked here as the local face checks it
    // (a spillDir is the server's directory, checked there).
    checkConfig(withoutSpillDir(config))
    if (isObject(config) && config.spillDir !== undefined && typeof config.spillDir !== 'string') checkConfig({ spillDir: config.spillDir })
    const conn = await Connection.open(transport)
    conn.connectTimeoutMs = timeoutMs
    let init
    // A transport that is up but never answers (an ssh to a host that
    // drops packets) is ended: the call then fails with CONNECTION_LOST.
    const silent = Number.isFinite(timeoutMs)
      ? setTimeout(() => conn.abort(`it did not answer initialize within ${timeoutMs} ms (connectTimeoutMs), so it was ended`), timeoutMs)
      : undefined
    try {
      init = await conn.call('initialize', {
        protocol_version: PROTOCOL_VERSION,
        config: wireConfig(config),
        output_notifications: true,
        client: CLIENT,
      })
    } catch (err) {
      await conn.close()
      throw err
    } finally {
      clearTimeout(silent)
    }
    // A server that keeps sessions (`--linger`) gave a token: a dropped
    // transport is then started again and the session resumed.
    if (transport.reconnect && typeof init.session?.token === 'string') conn.resumeWith(init.session)
    return new RemoteShellExecutor(CONNECT, conn, init)
  }

  constructor(token, conn, init) {
    if (token !== CONNECT) throw new TypeError('RemoteShellExecutor is made by RemoteShellExecutor.connect({ transport, config, connectTimeoutMs })')
    this.#s = new Session(conn, init)
  }

  get sandboxMode() {
    return this.#s.resolver.sandboxMode
  }

  reconfigure(config) {
    const s = this.#s
    // No command will run on a server that is gone: say so, as a disposed
    // executor says DISPOSED.
    if (!s.disposed && s.conn.lostReason !== undefined) throw s.conn.lostError()
    // Checked whole before anything changes, as locally: a bad field
    // changes nothing, here or there.
    let local = withoutSpillDir(config ?? {})
    if (isObject(local)) {
      // Without a cwd the server resolves against its own; so must the resolver.
      const cwd = local.cwd
      local = { ...local, cwd: typeof cwd === 'string' && cwd !== '' ? onServer(s.hostCwd, cwd) : (cwd ?? s.hostCwd ?? undefined) }
    }
    checkConfig(local)
    const spillDir = isObject(config) ? config.spillDir : undefined
    if (spillDir !== undefined) {
      if (typeof spillDir !== 'string') checkConfig({ spillDir })
      const current = s.effective.spill_dir
      if (!samePath(onServer(s.hostCwd, spillDir), current)) {
        const err = new Error(`config.spillDir cannot change after the executor is made (it is ${current})`)
        err.code = 'INVALID_ARGUMENT'
        err.field = 'config.spillDir'
        throw err
      }
    }
    s.resolver.reconfigure(local)
    s.window = s.measureWindow()
    if (isObject(config) && typeof config.retainSettled === 'number') s.retain = config.retainSettled
    const wire = wireConfig(config)
    if (wire.cwd !== undefined) wire.cwd = local.cwd
    const nth = ++s.reconfigures
    const send = () =>
      s.conn.call('reconfigure', { config: wire }).then(
        (answer) => {
          s.effective = answer.config
          s.retain = answer.config.retain_settled
        },
        (err) => {
          // Its answer was lost with a dropped connection: a whole
          // configuration, so sending it again is sending it once, unless
          // a later one was sent since (that one is then in force).
          if (err.code === 'ANSWER_LOST' && nth === s.reconfigures) return send()
          if (err.code !== 'CONNECTION_LOST' && err.code !== 'DISPOSED' && err.code !== 'ANSWER_LOST') process.emitWarning(err, 'DshRemoteWarning')
        },
      )
    send()
  }

  resolve(request) {
    const s = this.#s
    // A relative workspaceRoot is taken against the server's cwd, as the
    // server would take it.
    const policy = isObject(request) ? request.sandboxPolicy : undefined
    const root = isObject(policy) ? policy.workspaceRoot : undefined
    if (typeof root === 'string' && root !== '' && !root.startsWith('/') && typeof s.hostCwd === 'string') {
      request = { ...request, sandboxPolicy: { ...policy, workspaceRoot: `${s.hostCwd}/${root}` } }
    }
    return s.resolver.resolve(request)
  }

  async run(spec, options) {
    const s = this.#s
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    const onOutput = checkRunOptions(options)
    // The local resolver judges the spec by the core's rules and runs
    // nothing: the error a bad spec (or an aborted signal) gets is the
    // local face's own.
    let refusal
    try {
      await s.resolver.run({ ...spec, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR' || signal?.aborted) throw err
      refusal = err
    }
    // Aborted while it was checked: refused as an already aborted one is,
    // with the core's own error, and nothing is sent.
    if (signal?.aborted) throw refusal ?? coded('ABORT_ERR', 'cancelled before the command started')
    const wire = wireSpec(spec)
    const runId = `run-${++s.nextRun}`
    const params = { spec: wire, run_id: runId }
    let handOver
    if (wire.on_expiry === 'background') {
      // Named now, so the handed-over process is known by our id and its
      // notifications find it even before the result arrives.
      handOver = s.mirror(s.takeId(), spec)
      s.pending.set(handOver.id, handOver)
      params.background_id = handOver.id
    }
    // Once the answer came there is nothing to cancel (a handed-over
    // process is killed instead), and nothing to send again after a drop.
    let answered = false
    const cancel = () => {
      if (answered) return
      s.cancelled.add(runId)
      s.conn.notify('cancel', { run_id: runId })
    }
    // What onOutput threw, or the promise it returned rejected with: the
    // run is cancelled, and rejects with it once its answer came and every
    // promise onOutput returned has settled (the callback's failure is the
    // caller's, never the connection's, and never an unhandled rejection).
    let outputFailure
    const callbacks = new Set()
    const failed = (error) => {
      if (outputFailure) return
      outputFailure = { error }
      cancel()
    }
    if (onOutput) {
      params.stream = true
      s.outputSinks.set(runId, (chunk) => {
        if (outputFailure) return
        let returned
        try {
          returned = onOutput({ stream: chunk.stream, offset: chunk.offset, data: Buffer.from(chunk.data_base64, 'base64') })
        } catch (error) {
          failed(error)
          return
        }
        if (typeof returned?.then === 'function') {
          const settled = Promise.resolve(returned).then(() => {}, failed)
          callbacks.add(settled)
          settled.then(() => callbacks.delete(settled))
        }
      })
    }
    const running = s.conn.call('run', params)
    if (signal) {
      if (signal.aborted) cancel()
      else signal.addEventListener('abort', cancel, { once: true })
    }
    // The run's own ending, which dispose waits for: its answer, and a
    // hand-over adopted.
    const ending = (async () => {
      let result
      try {
        result = runResult((await running).result)
      } catch (err) {
        // Its answer lost with a dropped connection, the run may have been
        // handed over before: the process is then kept, known by its id.
        const handedOver = handOver && err.code === 'ANSWER_LOST' && (await s.conn.call('get', { id: handOver.id }).catch(() => undefined))?.process
        if (handedOver) await s.adopt(handOver)
        else if (handOver) this.#drop(handOver)
        throw err
      } finally {
        answered = true
        signal?.removeEventListener('abort', cancel)
        s.outputSinks.delete(runId)
        s.cancelled.delete(runId)
      }
      if (handOver && result.backgroundId === handOver.id) {
        await s.adopt(handOver)
        // Handed over: from now on the signal kills the process, as for
        // start().
        const task = handOver.handle
        if (signal?.aborted) task.kill()
        else if (signal && !handOver.final) {
          const onKill = () => task.kill()
          signal.addEventListener('abort', onKill, { once: true })
          task.done.then(() => signal.removeEventListener('abort', onKill))
        }
        return { result, task }
      }
      if (handOver) this.#drop(handOver)
      return { result }
    })()
    s.runs.add(ending)
    const forget = () => s.runs.delete(ending)
    ending.then(forget, forget)
    // What the caller gets, once every promise onOutput returned has
    // settled too (dispose does not wait for those). A failed onOutput is
    // the outcome, and a process the run was handed over to goes with it.
    return ending.then(
      async ({ result, task }) => {
        await Promise.all(callbacks)
        if (!outputFailure) return result
        task?.kill()
        throw outputFailure.error
      },
      async (err) => {
        await Promise.all(callbacks)
        throw err
      },
    )
  }

  /** A hand-over that did not happen: its mirror goes. */
  #drop(m) {
    const s = this.#s
    s.pending.delete(m.id)
    if (!m.final) {
      m.final = true
      s.conn.hold(-1)
    }
  }

  start(spec) {
    const s = this.#s
    checkObject(spec, 'spec')
    const signal = checkSignal(spec.signal, 'spec.signal')
    try {
      s.resolver.start({ ...spec, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR' || signal?.aborted) throw err
    }
    // What cannot be sent (a lost connection, a spec past the message
    // limit) throws here, as a refused local start throws, and takes no id.
    const id = s.nextIdName()
    const send = s.conn.prepare('start', { spec: wireSpec(spec), id })
    s.takeId()
    const m = s.mirror(id, spec)
    m.adopted = true
    s.procs.set(m.id, m)
    send().catch((err) => {
      // A lost connection settles every process itself; a start whose
      // answer was lost is looked up once the session is resumed (Session#resumed).
      if (err.code !== 'CONNECTION_LOST' && err.code !== 'ANSWER_LOST') s.refused(m, err)
    })
    if (signal) {
      const onAbort = () => m.handle.kill()
      signal.addEventListener('abort', onAbort, { once: true })
      m.done.then(() => signal.removeEventListener('abort', onAbort))
    }
    return m.handle
  }

  get(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    // The resolver has no processes: its answer for an id the mirror does
    // not have (undefined, or the error for one that is not a string) is
    // the local face's.
    return m ? m.handle : this.#s.resolver.get(id)
  }

  ownerOf(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.owner : this.#s.resolver.ownerOf(id)
  }

  list() {
    return [...this.#s.procs.values()].map((m) => m.handle)
  }

  readOutput(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.read() : this.#s.resolver.readOutput(id)
  }

  kill(id) {
    const m = typeof id === 'string' ? this.#s.procs.get(id) : undefined
    return m ? m.handle.kill() : this.#s.resolver.kill(id)
  }

  forget(id) {
    const s = this.#s
    const m = typeof id === 'string' ? s.procs.get(id) : undefined
    if (!m) return s.resolver.forget(id)
    if (!m.settled) {
      throw coded('STILL_RUNNING', `background process ${quoted(id)} is still running: kill it and wait for it first`)
    }
    s.procs.delete(id)
    s.discard(m)
    s.fire('forget', { id })
  }

  onTaskDone(listener) {
    if (typeof listener !== 'function') throw invalid('listener', `must be a function, got ${describe(listener)}`)
    const listeners = this.#s.listeners
    // One entry per subscription, so the same function may be added twice.
    const entry = (p) => listener(p)
    listeners.add(entry)
    return () => {
      listeners.delete(entry)
    }
  }

  /**
   * Starts a terminal session on the server (`terminal_spawn`) and resolves
   * with its handle once it runs. The request is checked here first by the
   * local face's rules (its errors name `request.*`); `request.signal`
   * cancels the allocation only, as locally: already aborted, nothing is
   * sent.
   */
  async spawnTerminal(request) {
    const s = this.#s
    checkObject(request, 'request')
    const signal = checkSignal(request.signal, 'request.signal')
    // As locally, only an abort before the call counts: the check below
    // answers after a turn of the event loop.
    const abortedAtCall = signal?.aborted === true
    // The local resolver judges the request and spawns nothing: an
    // already-fired signal stops it right after the check.
    let aborted
    try {
      await s.resolver.spawnTerminal({ ...request, signal: CHECK_ONLY })
    } catch (err) {
      if (err.code !== 'ABORT_ERR') throw err
      aborted = err
    }
    if (abortedAtCall) throw aborted ?? coded('ABORT_ERR', 'cancelled before the command started')
    if (s.disposed) throw coded('DISPOSED', 'executor is disposed')
    const id = `term-${s.nextTerm + 1}`
    // What cannot be sent throws here and takes no id.
    const send = s.conn.prepare('terminal_spawn', { request: wireTerminalRequest(request), id })
    s.nextTerm += 1
    const m = new TerminalMirror(s, id, s.effective.max_output_bytes)
    s.terms.set(id, m)
    let answer
    try {
      answer = await send().catch(async (err) => {
        // Its answer lost with a dropped connection: the session may have
        // been made; it is looked up by the id chosen here.
        if (err.code !== 'ANSWER_LOST') throw err
        const found = await s.conn.call('terminal_get', { id }).catch(() => undefined)
        if (found === undefined) throw err
        return found
      })
    } catch (err) {
      s.terms.delete(id)
      m.abandon()
      // The server names the request's fields `terminal.*`: the local face names them `request.*`.
      if (typeof err.field === 'string' && err.field.startsWith('terminal.')) {
        const field = `request.${err.field.slice('terminal.'.length)}`
        if (err.message.startsWith(err.field)) err.message = field + err.message.slice(err.field.length)
        err.field = field
      }
      throw err
    }
    m.apply(answer.terminal)
    m.handle = new RemoteTerminalHandle(HANDLE, s, m, answer.terminal.pid)
    m.spawned = true
    m.pump()
    return m.handle
  }

  dispose() {
    this.#disposing ??= this.#dispose()
    this.#s.disposal ??= this.#disposing
    return this.#disposing
  }

  /**
   * After the server's dispose, which ended every terminal session: their
   * exit facts (and survivors) are asked for, and what they printed last is
   * read, as a local handle keeps it; a server that never ends an output
   * holds the dispose CLOSE_LIMIT_MS at most.
   */
  async #endTerminals() {
    const s = this.#s
    const terms = [...s.terms.values()].filter((t) => t.spawned)
    await Promise.all(
      terms.map(async (t) => {
        try {
          t.apply((await s.conn.call('terminal_get', { id: t.id })).terminal)
        } catch (err) {
          if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
        }
      }),
    )
    let timer
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, CLOSE_LIMIT_MS)
    })
    await Promise.race([Promise.all(terms.map((t) => t.drain())), late])
    clearTimeout(timer)
  }

  async #dispose() {
    const s = this.#s
    s.disposed = true
    const local = s.resolver.dispose()
    if (s.conn.lostReason === undefined) {
      try {
        await s.conn.call('dispose', {}).catch((err) => {
          // Its answer lost with a dropped connection, the session resumed
          // since: the server never had it (a disposal refuses the token
          // at once), so it is sent again.
          if (err.code === 'ANSWER_LOST') return s.conn.call('dispose', {})
          throw err
        })
        // The disposal settled what still ran without telling (its
        // completions are not delivered): the registry says how each ended.
        const { processes } = await s.conn.call('list', {})
        const now = new Map(processes.map((p) => [p.id, p]))
        for (const m of [...s.procs.values()]) {
          // Retired by a settling the disposal caused: gone there, gone here.
          if (!now.has(m.id) && m.settled && !m.refusedHere) {
            s.procs.delete(m.id)
            s.discard(m)
          }
        }
        for (const m of [...s.procs.values(), ...s.pending.values()]) {
          if (m.settled) continue
          m.quiet = true
          const p = now.get(m.id)
          if (p?.settled) {
            s.settle(m, p)
            s.pumpBoth(m)
            s.finish(m)
          }
        }
        await Promise.allSettled([...s.runs])
        await Promise.all([...s.procs.values()].filter((m) => m.settled).map((m) => m.done))
        // Its spill files went with it: reads say so from now on.
        const refreshed = []
        for (const m of s.procs.values()) {
          for (const [name, st] of Object.entries(m.streams)) {
            if (st.spillPath == null || m.discarded) continue
            refreshed.push(
              s.conn.call('read_from', { id: m.id, stream: name, from: st.end }).then(
                (r) => {
                  st.spillPath = r.spill_path
                  st.spillError = r.spill_error
                },
                () => {},
              ),
            )
          }
        }
        await Promise.all(refreshed)
        await this.#endTerminals()
      } catch (err) {
        if (err.code !== 'CONNECTION_LOST') throw err
      } finally {
        await s.conn.close()
        // Anything the server could not say settles as a lost connection would.
        s.lost()
      }
    }
    await local
  }
}
