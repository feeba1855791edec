// dsh-native/remote's session: everything a RemoteShellExecutor holds.
//
// What must answer synchronously is answered on this side, from the same
// rules: `resolve` and the validation of every spec run through a local
// NativeShellExecutor configured as the server is (it never runs anything),
// and the registry is mirrored: each process's output is read ahead by
// offset (`read_from`, never the server's consuming read), so `readOutput()`
// is a synchronous consuming read exactly as a local one. Once a dropped
// session is resumed (connection.mjs), the mirrors are brought back in line
// by offset (Session#resumed).

import { createRequire } from 'node:module'
import { HANDLE } from './constants.mjs'
import { isObject, resolverConfig, sandboxInfo, enforcement } from './wire.mjs'
import { RemoteShellProcess } from './process.mjs'

const require = createRequire(import.meta.url)
const { NativeShellExecutor } = require('../index.js')
const { composeDelta } = require('../loader.js')

/**
 * A consuming read's window may have dropped up to this many continuation
 * bytes at its start (a cut inside a character), so it holds at least
 * `cap - WINDOW_SLACK` bytes once it slides.
 */
const WINDOW_SLACK = 3

// ----------------------------------------------------------------- mirror

/** One stream of a mirrored process, read ahead by offset. */
class StreamMirror {
  /** Where the next consuming read starts (whole-stream offset). */
  cursor = 0
  /** Where the read-ahead text ends: `text` covers [cursor, end). */
  end = 0
  text = ''
  /** Unread bytes slid out of the window since the last consuming read. */
  lossy = false
  /** The latest end the server told of. */
  known = 0
  /** The end the last read asked for: a read that ended short of it held back part of a character. */
  covered = 0
  /** The end once the process settled. */
  finalEnd
  /** A settled stream that read no further (its end held back an incomplete character). */
  stuck = false
  reading = false
  spillPath = null
  spillError = null
  /** A lower bound of the window's size: a span larger than it minus WINDOW_SLACK may have slid out. */
  cap

  constructor(cap) {
    this.cap = cap
  }

  caughtUp() {
    return this.finalEnd !== undefined && (this.end >= this.finalEnd || this.stuck)
  }

  /** The read-ahead position, for a process whose consuming reads start at `offset`. */
  startAt(offset) {
    this.cursor = this.end = this.covered = offset
    this.known = Math.max(this.known, offset)
  }

  /** What `discard_output` leaves: nothing to read, and a spill file no more. */
  discard() {
    this.text = ''
    this.lossy = false
    this.cursor = this.end = this.finalEnd ?? Math.max(this.end, this.known)
    this.stuck = true
    if (this.spillPath != null) {
      this.spillPath = null
      this.spillError = 'the process was forgotten'
    }
  }
}

/** One background process as the client knows it. */
class Mirror {
  status = 'running'
  /** The server said it settled (or the connection ended). */
  settled = false
  /** Settled and its output read ahead to the end: `done` resolved. */
  final = false
  /** Its consuming reads' start is known (a hand-over learns it after the run's result). */
  adopted = false
  /** Forgotten or retired: its output is gone. */
  discarded = false
  /** Listeners are not told (a process the executor's disposal ended). */
  quiet = false
  /** A start the server refused: this side's alone. */
  refusedHere = false
  stopAsked = false
  stdinClosed = false
  exitCode = null
  signal = null
  exitStatusUnavailable = false
  survivors = 0
  sandbox
  limit
  limitsEnforcement
  /** An adoption waiting for it to settle. */
  snapshotWaiters = []
  handle
  done
  resolveDone

  constructor(id, spec, cap) {
    this.id = id
    this.command = spec.command
    this.owner = typeof spec.owner === 'string' ? spec.owner : undefined
    this.hasStdinPipe = isObject(spec.stdin) && !ArrayBuffer.isView(spec.stdin)
    this.streams = { stdout: new StreamMirror(cap), stderr: new StreamMirror(cap) }
    this.done = new Promise((resolve) => (this.resolveDone = resolve))
  }

  /** The consuming read: what was read ahead, then the cursors move on. */
  read() {
    const { stdout: o, stderr: e } = this.streams
    const read = { task: this.handle, delta: composeDelta(o.text, e.text), lossy: o.lossy || e.lossy }
    if (o.spillPath != null) read.stdoutSpillPath = o.spillPath
    if (e.spillPath != null) read.stderrSpillPath = e.spillPath
    if (o.spillError != null) read.stdoutSpillError = o.spillError
    if (e.spillError != null) read.stderrSpillError = e.spillError
    for (const s of [o, e]) {
      s.cursor = s.end
      s.text = ''
      s.lossy = false
    }
    return read
  }

  /** A process snapshot's ending (the server's `process` object, settled). */
  applyEnding(p) {
    this.status = p.status
    this.exitCode = p.exit_code ?? null
    this.signal = p.signal ?? null
    this.exitStatusUnavailable = p.exit_status_unavailable === true
    this.survivors = p.survivors ?? 0
    this.sandbox = sandboxInfo(p.sandbox)
    this.limit = p.limit ?? undefined
    this.limitsEnforcement = enforcement(p.limits_enforcement)
  }
}

// ---------------------------------------------------------------- session

/** Everything a RemoteShellExecutor holds (internal: remote.mjs does not export it; processes and the executor share it). */
export class Session {
  conn
  resolver
  hostCwd
  /** The server's effective config (protocol keys), as last reported. */
  effective
  /** The settled processes kept in the registry, as the server keeps them. */
  retain
  /** The window a process started now gets (the resolver's maxOutputBytes). */
  window
  /** id → Mirror, in start order: the registry. */
  procs = new Map()
  /** Background ids of runs in flight: a hand-over at their timeout registers there. */
  pending = new Map()
  listeners = new Set()
  /** Runs in flight, which dispose waits for. */
  runs = new Set()
  /** run_id → what takes the `run_output` chunks of a streamed run. */
  outputSinks = new Map()
  /**
   * The run_ids of runs in flight whose cancel was sent: sent again once a
   * dropped session is resumed, since it may have been lost with the drop
   * (the server takes a second cancel of a run as the first).
   */
  cancelled = new Set()
  /** How many reconfigure calls were made: one whose answer was lost is sent again only while it is the latest. */
  reconfigures = 0
  /** id → TerminalMirror: the terminal sessions this client spawned. */
  terms = new Map()
  nextId = 0
  nextRun = 0
  nextTerm = 0
  disposed = false
  /** The executor's dispose once it began (a terminal's terminate() then waits for it). */
  disposal

  constructor(conn, init) {
    this.conn = conn
    this.hostCwd = init.host?.cwd ?? null
    this.effective = init.config
    this.retain = init.config.retain_settled
    this.resolver = new NativeShellExecutor(resolverConfig(init.config, this.hostCwd))
    this.window = this.measureWindow()
    conn.onNotification = (method, params) => this.notification(method, params)
    conn.onLost = () => this.lost()
    conn.onResumed = () => this.resumed()
  }

  /** The resolver's maxOutputBytes: a request without stdoutMaxBytes gets exactly it. */
  measureWindow() {
    return this.resolver.resolve({ command: '', workdir: '/' }).stdoutMaxBytes
  }

  find(id) {
    return this.procs.get(id) ?? this.pending.get(id)
  }

  /** The id the next process gets: `bash-1`, `bash-2`, … (this client's own counter; the server takes it as given). */
  nextIdName() {
    return `bash-${this.nextId + 1}`
  }

  takeId() {
    const id = this.nextIdName()
    this.nextId += 1
    return id
  }

  /**
   * A call whose answer nobody waits for; its failure changes nothing here.
   * Each such call (kill, close_stdin, forget) does the same sent twice, so
   * one whose answer was lost with a dropped connection is sent again.
   */
  fire(method, params) {
    this.conn.call(method, params).catch((err) => {
      if (err.code === 'ANSWER_LOST') this.fire(method, params)
    })
  }

  notification(method, params) {
    if (method === 'output') {
      const m = this.find(params.id)
      if (m === undefined || m.discarded) return
      m.streams.stdout.known = Math.max(m.streams.stdout.known, params.stdout_end)
      m.streams.stderr.known = Math.max(m.streams.stderr.known, params.stderr_end)
      this.pumpBoth(m)
    } else if (method === 'terminal_exit') {
      // May come before the spawn's answer: the mirror exists from the call on.
      this.terms.get(params.terminal?.id)?.apply(params.terminal)
    } else if (method === 'task_done') {
      const p = params.process
      const m = this.find(p?.id)
      if (m === undefined || m.settled) return
      this.settledThere(m, p)
    } else if (method === 'run_output') {
      this.outputSinks.get(params.run_id)?.(params)
    }
  }

  /** The server says `m` settled (`p`, its snapshot): as its task_done. */
  settledThere(m, p) {
    // As the core settles one: room is made before it counts as settled
    // (so the oldest other settled one goes, not it), then again after.
    this.retire(1)
    this.settle(m, p)
    this.retire(0)
    this.pumpBoth(m)
    this.finish(m)
  }

  /**
   * The session was resumed over a new connection. What the server had
   * to say meanwhile (answers, task_done, terminal_exit) came right after
   * the resume; `output` notifications were not kept: each running
   * process's ends are asked for (`get`), and its output read on from the
   * mirror's own offsets, so every byte arrives once. A process the server
   * does not have was never started there (its start was lost with the
   * connection). Each terminal's exit facts are asked for too.
   */
  resumed() {
    const warn = (err) => {
      if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
    }
    for (const runId of this.cancelled) this.conn.notify('cancel', { run_id: runId })
    for (const m of this.procs.values()) {
      if (m.settled || m.discarded) continue
      this.conn.call('get', { id: m.id }).then(({ process: p }) => {
        if (m.discarded || m.settled) return
        if (p == null) {
          this.refused(m, new Error(`the connection to ${this.conn.label} dropped before the server had this start: it has no process of this id`))
          return
        }
        const { stdout, stderr } = m.streams
        stdout.known = Math.max(stdout.known, p.output.stdout_end)
        stderr.known = Math.max(stderr.known, p.output.stderr_end)
        if (p.settled) this.settledThere(m, p)
        else this.pumpBoth(m)
      }, warn)
    }
    for (const t of this.terms.values()) {
      if (!t.spawned || t.exited) continue
      this.conn.call('terminal_get', { id: t.id }).then(({ terminal }) => t.apply(terminal), warn)
    }
  }

  /** Takes the server's settled snapshot: the ending and the final ends. */
  settle(m, p) {
    m.settled = true
    m.applyEnding(p)
    const o = p.output
    for (const [name, end] of [['stdout', o.stdout_end], ['stderr', o.stderr_end]]) {
      const s = m.streams[name]
      s.finalEnd = end
      s.known = Math.max(s.known, end)
    }
    for (const wake of m.snapshotWaiters.splice(0)) wake()
  }

  /**
   * The retention rule of the core (`retire_oldest_settled`): the oldest
   * settled processes, in start order, beyond `retainSettled` leave the
   * registry, and their output goes; `settling` counts one about to settle.
   */
  retire(settling) {
    let excess = [...this.procs.values()].filter((m) => m.settled).length + settling - this.retain
    for (const m of [...this.procs.values()]) {
      if (excess <= 0) break
      if (!m.settled) continue
      excess -= 1
      this.procs.delete(m.id)
      this.discard(m)
    }
  }

  discard(m) {
    m.discarded = true
    m.streams.stdout.discard()
    m.streams.stderr.discard()
    this.finish(m)
  }

  pumpBoth(m) {
    if (!m.adopted || m.discarded) return
    this.pump(m, 'stdout')
    this.pump(m, 'stderr')
  }

  /**
   * Reads `name` ahead from where the read-ahead ends to what the server
   * told of. A read that slid out of the window (`lossy`), or a span the
   * window may no longer hold, is read again from the cursor instead: what
   * a consuming read returns then is the window, and says so.
   */
  async pump(m, name) {
    const s = m.streams[name]
    if (s.reading) return
    s.reading = true
    try {
      while (!m.discarded && this.conn.lostReason === undefined) {
        const target = s.finalEnd ?? s.known
        if (s.end >= target || s.stuck) break
        if (s.finalEnd === undefined && s.known <= s.covered) break
        const asked = target
        const from = s.end
        // A consuming read meanwhile moves the cursor to `from` and empties
        // the text: the answer, which starts there, is still what follows.
        // A lossy one is the window, all of it past `from`.
        let r = await this.conn.call('read_from', { id: m.id, stream: name, from })
        let replace = r.lossy
        if (!r.lossy && r.next_offset - s.cursor > s.cap - WINDOW_SLACK) {
          const cursor = s.cursor
          const again = await this.conn.call('read_from', { id: m.id, stream: name, from: cursor })
          // A consuming read meanwhile returned part of what this answer
          // holds: ask again from where it left the cursor.
          if (s.cursor !== cursor) continue
          r = again
          replace = true
          // Whatever it returned is in the window, which is at most `cap`.
          if (!r.lossy) s.cap = Math.max(s.cap, r.next_offset - cursor)
        }
        if (m.discarded) break
        if (replace) {
          s.text = r.text
          if (r.lossy) s.lossy = true
        } else {
          s.text += r.text
        }
        const progressed = replace || r.next_offset > from
        s.end = r.next_offset
        s.covered = Math.max(asked, r.next_offset)
        s.spillPath = r.spill_path
        s.spillError = r.spill_error
        // A settled stream that gives no more would be asked forever.
        if (s.finalEnd !== undefined && !progressed) s.stuck = true
      }
    } catch (err) {
      // Forgotten or retired by the server meanwhile: its output is gone
      // there, as it is here. A lost connection settles everything itself.
      if (err.code === 'NOT_FOUND') this.discard(m)
      else if (err.code !== 'CONNECTION_LOST') process.emitWarning(err, 'DshRemoteWarning')
      s.stuck = true
    } finally {
      s.reading = false
    }
    this.finish(m)
  }

  /** Resolves `done` once settled and read ahead to the end, telling the listeners first. */
  finish(m) {
    if (m.final || !m.settled || !m.adopted) return
    if (!m.discarded && !(m.streams.stdout.caughtUp() && m.streams.stderr.caughtUp())) return
    m.final = true
    this.conn.hold(-1)
    if (!m.quiet) {
      for (const listener of [...this.listeners]) {
        try {
          listener(m.handle)
        } catch (err) {
          process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'DshListenerWarning')
        }
      }
    }
    m.resolveDone()
  }

  /** A new mirror, held open (the event loop runs) until it is final. */
  mirror(id, spec) {
    const m = new Mirror(id, spec, this.window)
    m.handle = new RemoteShellProcess(HANDLE, this, m)
    this.conn.hold(1)
    return m
  }

  /** A start the server refused after the mirror was made: a spawn failure, settled as the core settles one. */
  refused(m, err) {
    if (m.settled) return
    this.retire(1)
    m.refusedHere = true
    m.settled = true
    m.status = 'killed'
    const s = m.streams.stderr
    s.text = `spawn failed: ${err.message}`
    s.end = s.finalEnd = s.known = Buffer.byteLength(s.text)
    m.streams.stdout.finalEnd = 0
    this.retire(0)
    this.finish(m)
  }

  /**
   * A run handed over at its timeout: its process joins the registry once
   * its reads' start is known. The server registered it at the hand-over,
   * possibly among starts made meanwhile, and counted it in its retention
   * since: the registry is taken from the server's list, in its order.
   */
  async adopt(m) {
    let listed
    try {
      listed = (await this.conn.call('list', {})).processes
    } catch {
      listed = undefined
    }
    const snapshot = listed?.find((p) => p.id === m.id)
    if (listed !== undefined) this.reorder(listed, m)
    // Settled and retired before the list: gone there, so gone here once its
    // task_done (which it still gets) has settled it.
    if (snapshot === undefined && listed !== undefined && !m.settled) {
      await new Promise((resolve) => m.snapshotWaiters.push(resolve))
    }
    this.pending.delete(m.id)
    m.adopted = true
    if (snapshot === undefined) {
      this.procs.delete(m.id)
      this.discard(m)
      return
    }
    m.streams.stdout.startAt(snapshot.output.stdout_read)
    m.streams.stderr.startAt(snapshot.output.stderr_read)
    this.pumpBoth(m)
    this.finish(m)
  }

  /**
   * The registry in the server's order (`listed`, with `m` joining it); a
   * settled process the server no longer has was retired there: its
   * output goes here too. A start only this side knows (refused by the
   * server) keeps its place at the end.
   */
  reorder(listed, m) {
    const order = new Map()
    for (const p of listed) {
      const known = p.id === m.id ? m : this.procs.get(p.id)
      if (known !== undefined) order.set(p.id, known)
    }
    for (const [id, x] of this.procs) {
      if (order.has(id)) continue
      if (x.settled && !x.refusedHere) this.discard(x)
      else order.set(id, x)
    }
    this.procs = order
  }

  /** The connection ended unasked: every process is settled with what is known, and nothing waits. */
  lost() {
    for (const t of this.terms.values()) t.lost(this.disposed)
    for (const m of [...this.procs.values(), ...this.pending.values()]) {
      if (!m.settled) {
        m.settled = true
        m.status = 'killed'
        m.exitCode = null
        m.signal = null
        m.exitStatusUnavailable = true
        // A hand-over not yet in the registry was never the listeners' to hear of.
        m.quiet = this.disposed || this.pending.has(m.id)
      }
      for (const s of Object.values(m.streams)) {
        s.finalEnd ??= s.end
        s.stuck = true
      }
      for (const wake of m.snapshotWaiters.splice(0)) wake()
      m.adopted = true
      this.finish(m)
    }
  }
}
