// dsh-native/remote: the harness's ShellExecutor over the protocol face
// (`dsh serve --stdio` under ssh or `kubectl exec`, or `dsh serve --listen
// unix:PATH`). The API is NativeShellExecutor's, member for member, with
// the same shapes and errors; `RemoteShellExecutor.connect()` makes one.
//
// `resolve`, `start`, `get`, `list`, `readOutput` and the other synchronous
// members answer from a mirror kept on this side: `resolve` and every
// spec's check run through the same core rules, configured as the server
// is, and each process's output is read ahead by offset, so a read returns
// what the server had sent so far (new output is told at most every 50 ms).
// `done` resolves once the process settled AND its output was read to the
// end, so `await p.done; p.readOutput()` returns everything.
//
// Errors carry the local face's `code` and camelCase `field`, plus:
// 'CONNECTION_LOST' (with `transport`) for every call pending when the
// transport ended unasked (ssh killed, the server gone; each process then
// settles `killed` with `exitStatusUnavailable`) and for every call after;
// 'ANSWER_LOST' (with `transport`) for a call whose answer was lost with a
// dropped connection whose session was then resumed (below);
// 'MESSAGE_TOO_LARGE' for a call past the 48 MiB one protocol message holds
// (a stdin that large: write it to a stdin pipe instead); 'PROTOCOL_ERROR'
// for a server error that carries no code of its own.
//
// Against a server that keeps sessions (`dsh serve --stdio --linger
// SECONDS`, docs/remote.md), a transport that ends unasked is started again
// and the session resumed, retried with a growing pause (100 ms, doubled,
// at most 2 s) until the server's linger time has passed since the drop;
// meanwhile calls wait. Then every call the server still answers keeps
// waiting. Of the others (their answers lost with the connection), a call
// that only reads is sent again, and so is one that does the same sent
// twice (kill, closeStdin, forget, the latest reconfigure, dispose); a
// start or spawnTerminal is looked up by the id this side chose (a start
// the server never had settles `killed`, the reason on stderr); any other
// (run, writeStdin, a terminal's write, …) rejects with ANSWER_LOST: it
// may have taken effect. Each process's output is read on from this
// side's offsets, so `readOutput()` across a drop returns every byte
// once. A resume that fails (the linger time passed, the server refused
// the token, the transport's program cannot be started) loses the
// connection as above. `transport.reconnect: false` turns this off.
//
// Terminal sessions (`spawnTerminal`) have NativeTerminalHandle's members:
// the output is read by long-poll into what `readOutput()` and `output`
// share; reading stops while `output`'s buffer is full or once the
// server's `maxOutputBytes` wait unread here (the server then holds the
// rest, up to its own bound, and the program waits, as a local session's
// does).

import type {
  DshNativeError,
  NativeShellExecutorConfig,
  NoExtraKeys,
  ResolvedSpec,
  SandboxMode,
  ShellExecRequest,
  ShellExecSpec,
  ShellProcessRead,
  ShellProcessStatus,
  ShellRunResult,
  ShellSandboxInfo,
  LimitName,
  LimitsEnforcement,
  OwnerToken,
  ShellProcessId,
  TerminalForeground,
  TerminalOutcome,
  TerminalRead,
  TerminalRequest,
  TerminalSignal,
} from './index.js'

/**
 * How to reach `dsh serve`: a program speaking the protocol on its stdin
 * and stdout (`['ssh', 'host', 'dsh', 'serve', '--stdio']`; its stderr is
 * kept for error messages), or the path of a unix socket a `dsh serve
 * --listen unix:PATH` listens on. With either, `reconnect` (default true)
 * says whether a dropped connection to a server that keeps sessions
 * (`--linger`) is started again (the program run anew, the socket
 * connected anew) and its session resumed.
 */
export type RemoteTransport = ({ command: string[] } | { socket: string }) & {
  /** Start the transport again and resume the session when it drops, while the server keeps it (default true; only against `--linger`). */
  reconnect?: boolean | undefined
}

/** A piece of a streamed run's output, as the command wrote it. */
export interface RemoteOutputChunk {
  /** Which stream it came from. */
  stream: 'stdout' | 'stderr'
  /**
   * The stream's byte offset of `data[0]`. Chunks of a stream come in
   * order; one that starts past where the previous ended says that the
   * bytes between were left out (see {@link RemoteRunOptions.onOutput}).
   */
  offset: number
  /** The bytes, raw: a chunk may end inside a character that the next one finishes. */
  data: Uint8Array
}

/** What `RemoteShellExecutor#run` takes beside the spec. */
export interface RemoteRunOptions {
  /**
   * Called with each chunk of the output while the command runs, in order
   * per stream, all before `run` resolves (none after a hand-over at the
   * timeout). A caller that reads slower than the command writes holds
   * the command back once 8 MiB wait to be sent (as a slow terminal
   * would; its timeout still runs). Chunks may still be left out for a
   * slow reader (of output that comes after the command exited or while it
   * is being stopped, past 32 MiB waiting) and while the connection is
   * down: a chunk's `offset` past where the previous one ended shows it.
   * The result is the same as without it (capped, the spill file whole).
   * A throw cancels the run (as its signal would), and `run` rejects with
   * what was thrown once the run has ended. An async callback's promise is
   * waited for before `run` settles (not by `dispose()`), and its rejection
   * counts as a throw (it is never left unhandled); a process the run was
   * handed over to at its timeout is then killed.
   */
  onOutput?: ((chunk: RemoteOutputChunk) => void | PromiseLike<void>) | undefined
}

/** What `RemoteShellExecutor.connect()` takes. */
export interface RemoteConnectOptions {
  /** Where the server is. */
  transport: RemoteTransport
  /**
   * The server's executor configuration (docs/configuration.md), checked
   * here first as the local face checks it; `spillDir` and a relative
   * `cwd` are the server's paths.
   */
  config?: NativeShellExecutorConfig | undefined
  /**
   * How long the server gets to answer the first message, in milliseconds
   * (default 120000; Infinity, or more than 2^31 - 1: no limit). A
   * transport that is started but never answers (an ssh to a host that
   * drops packets, a program that is not `dsh serve`) is ended then (its
   * process killed; it is node's child in the host's own process group)
   * and `connect` rejects with `CONNECTION_LOST` quoting its stderr. A reconnection's attempt that goes unanswered as
   * long is ended and tried again, until the session's linger time has
   * passed. Not a positive number: `INVALID_ARGUMENT` naming
   * `connectTimeoutMs`, before anything starts.
   */
  connectTimeoutMs?: number | undefined
}

/** A remote error: a {@link DshNativeError}, with the transport named when the connection (or an answer) was lost. */
export interface RemoteError extends DshNativeError {
  /** With `CONNECTION_LOST` and `ANSWER_LOST`: the transport, as `` `ssh host dsh serve --stdio` `` or `unix:PATH`. */
  transport?: string
}

/** What one consuming read of a remote process returns. */
export type RemoteShellProcessRead = Omit<ShellProcessRead, 'task'> & {
  /** The process this read came from. */
  task: RemoteShellProcess
}

/** A task-done listener: called once per background process that settles, already settled and read to the end. */
export type RemoteShellProcessListener = (process: RemoteShellProcess) => void

/** A background process on the server (the seam's `ShellProcess`): the members of `NativeShellProcess`. */
export declare class RemoteShellProcess {
  /** Made by `RemoteShellExecutor#start`, `get`, `list`, `run` (a hand-over) and listeners; one object per id. */
  private constructor()
  /** The registry id: `bash-1`, `bash-2`, … (chosen by this client). */
  readonly id: ShellProcessId
  /** The command as started. */
  readonly command: string
  /** Live: `killed` as soon as a stop is requested here, before the process has exited. */
  readonly status: ShellProcessStatus
  /** The exit status once settled, if the shell exited by itself; else null. */
  readonly exitCode: number | null
  /** The signal that killed it once settled; else null. */
  readonly signal: NodeJS.Signals | null
  /** Present (true) once settled when nobody could say how it ended, and when the connection was lost while it ran. */
  readonly exitStatusUnavailable?: true
  /** Present once settled after a stop that left part of its tree alive: how many. */
  readonly survivors?: number
  /** Resolves once the process has settled and its output was read to the end; never rejects. */
  readonly done: Promise<void>
  /** Sandbox facts, present once a policy-carrying process has settled. */
  readonly sandbox?: ShellSandboxInfo
  /** Present once settled when a limit ended it (docs/limits.md). */
  readonly limit?: LimitName
  /** Present once settled when it had limits: how each was enforced. */
  readonly limitsEnforcement?: LimitsEnforcement
  /** The request's owner token, if it had one. */
  readonly owner?: OwnerToken
  /** Consuming read of what arrived since the previous read (as far as the server has told). */
  readOutput(): RemoteShellProcessRead
  /** SIGTERM to the tree, SIGKILL after graceMs; true when this call began it. */
  kill(): boolean
  /** True when started with `stdin: { pipe: true }`. */
  readonly hasStdinPipe: boolean
  /**
   * Writes `data` (a string as UTF-8, a Buffer or a Uint8Array) to the
   * command's stdin; resolves once the server's bounded buffer took every
   * byte, so a command that does not read keeps the promise waiting
   * (back-pressure). Writes are whole and in call order. Rejects with
   * `STDIN_CLOSED` (and a `reason`) as locally, with `CONNECTION_LOST`, and
   * with `ANSWER_LOST` when the connection dropped before it was answered.
   */
  writeStdin(data: string | Uint8Array): Promise<void>
  /**
   * Closes the command's stdin once what was written is delivered. True
   * when this call closed it; false when it was already closed or the
   * process settled. Throws `STDIN_CLOSED` without a pipe.
   */
  closeStdin(): boolean
}

/**
 * A terminal session on the server (docs/terminals.md): the members of
 * `NativeTerminalHandle`, so it goes wherever that one (or the published
 * `SubprocessTerminalHandle`) is expected. `output` and `readOutput()` take
 * from the same unread output: use one or the other. After a lost
 * connection `done` resolves with both facts null and `exitStatusUnavailable`,
 * `output` ends, pending calls reject with `CONNECTION_LOST`, and so does
 * every later call (`resize` throws it).
 */
export declare class RemoteTerminalHandle {
  /** Made by `RemoteShellExecutor#spawnTerminal`. */
  private constructor()
  /** The program's pid on the server: the leader of the session, and its group id. */
  readonly pid: number
  /** The terminal's output as UTF-8 bytes, in order, never split inside a character; ends once the output has ended (or the connection). */
  readonly output: import('node:stream').Readable
  /** Resolves when the program exits (`terminal_exit`); never rejects. */
  readonly done: Promise<TerminalOutcome>
  /** True once the program has exited (or the connection was lost). */
  readonly exited: boolean
  /** Present (true) once exited when nobody could say how it ended, and after a lost connection. */
  readonly exitStatusUnavailable?: true
  /** Present after `terminate()` or dispose when members of the session outlived the final SIGKILL. */
  readonly survivors?: number
  /** Consuming read of what arrived from the server so far. */
  readOutput(): TerminalRead
  /** Types into the terminal as given; resolves once the terminal took every byte; writes are whole and in call order; TERMINAL_CLOSED after the program exited. */
  write(data: string | Buffer): Promise<void>
  /**
   * Changes the window size; the foreground group gets SIGWINCH. Checked
   * here by the local rules (INVALID_ARGUMENT naming `terminal.rows` or
   * `terminal.cols`; TERMINAL_CLOSED once the session is known to have
   * ended), then sent: calls made after it see the new size. A refusal
   * the server sends later cannot be thrown: TERMINAL_CLOSED (the session
   * ended meanwhile) and CONNECTION_LOST change nothing; anything else is
   * a process warning (`DshRemoteWarning`).
   */
  resize(rows: number, cols: number): void
  /** The foreground group and whether the server's kernel shows it waiting for input; undefined once the program exited. */
  inspectForeground(): Promise<TerminalForeground | undefined>
  /** Resolves with true once the foreground group waits for input, with false when `timeoutMs` passed (none or Infinity: no limit; negative or NaN: INVALID_ARGUMENT naming `timeoutMs`) or the program exited. */
  waitInputWaiting(timeoutMs?: number): Promise<boolean>
  /** Signals the foreground group; resolves with its id (TERMINAL_CLOSED when there is none). */
  signalForeground(signal: TerminalSignal): Promise<number>
  /**
   * Ends every member of the session; resolves once nothing is left, the
   * output was read to its end (`readOutput()` then returns the rest with
   * `ended`), and no call of this handle is in flight. Idempotent; once
   * the executor's dispose began, it waits for the dispose (which ends
   * every session); after a lost connection it rejects with CONNECTION_LOST.
   */
  terminate(): Promise<void>
}

/**
 * The harness's `ShellExecutor` on a `dsh serve` server: NativeShellExecutor's
 * members, shapes and errors. Several in one process are independent; each
 * ends what it started when it is disposed or its connection ends.
 */
export declare class RemoteShellExecutor {
  /** Made by {@link RemoteShellExecutor.connect}. */
  private constructor()
  /**
   * Connects and initializes a session with `config`; resolves once it is
   * ready. A bad config field rejects with `INVALID_ARGUMENT` naming it; a
   * transport that fails rejects with `CONNECTION_LOST`.
   */
  static connect(options: RemoteConnectOptions): Promise<RemoteShellExecutor>
  /** undefined: the server's executor does not sandbox by default. */
  readonly sandboxMode: SandboxMode | undefined
  /**
   * New commands get `config`, a whole configuration (omitted fields take
   * their defaults); checked and applied here at once, then sent. A bad
   * field changes nothing; `spillDir` cannot change.
   */
  reconfigure(config: NativeShellExecutorConfig): void
  /** Synchronous, by the server's configuration; adds no key for an absent optional field. */
  resolve<R extends ShellExecRequest>(request: R & NoExtraKeys<R, ShellExecRequest>): ResolvedSpec<R>
  /**
   * Runs the spec on the server; `spec.signal` aborts it (already aborted:
   * rejects ABORT_ERR, nothing is sent); `options.onOutput` sees the output
   * as it comes.
   */
  run(spec: ShellExecSpec, options?: RemoteRunOptions): Promise<ShellRunResult>
  /** Returns at once (a bad spec throws as locally); a start the server refuses settles `killed` with the error on stderr. */
  start(spec: ShellExecSpec): RemoteShellProcess
  /** The process registered as `id`, or undefined. */
  get(id: ShellProcessId): RemoteShellProcess | undefined
  /** Throws NOT_FOUND for an unknown id. */
  ownerOf(id: ShellProcessId): OwnerToken | undefined
  /** Every registered background process, in start order. */
  list(): RemoteShellProcess[]
  /** The process's consuming read; throws NOT_FOUND for an unknown id. */
  readOutput(id: ShellProcessId): RemoteShellProcessRead
  /** Kills the process (true when this call began it); throws NOT_FOUND for an unknown id. */
  kill(id: ShellProcessId): boolean
  /** Forgets a settled process (here and on the server); throws STILL_RUNNING while it runs. */
  forget(id: ShellProcessId): void
  /**
   * Calls `listener(process)` once per background process that settles;
   * one that throws becomes a process warning. Returns a function that
   * unsubscribes.
   */
  onTaskDone(listener: RemoteShellProcessListener): () => void
  /**
   * Starts a terminal session on the server and resolves with its handle
   * once it runs. The request is checked here first, as locally (errors
   * name `request.*`); an already aborted `request.signal` rejects with
   * ABORT_ERR and sends nothing (a later abort changes nothing, as locally).
   * A program that cannot start rejects with its errno code (`ENOENT`).
   */
  spawnTerminal(request: TerminalRequest): Promise<RemoteTerminalHandle>
  /**
   * Disposes the server's executor (every running process is killed and
   * awaited, spill files removed), then ends the transport. Afterwards
   * `run` and `start` fail with DISPOSED. Idempotent. While a dropped
   * session is being resumed it waits for the resume (at most the
   * server's linger time), so the far side's processes are ended rather
   * than left to linger.
   */
  dispose(): Promise<void>
}
