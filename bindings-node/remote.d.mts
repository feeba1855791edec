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
// 'MESSAGE_TOO_LARGE' for a call past the 48 MiB one protocol message holds
// (a stdin that large: write it to a stdin pipe instead); 'NOT_SUPPORTED'
// from `spawnTerminal`, which the protocol does not have yet;
// 'PROTOCOL_ERROR' for a server error that carries no code of its own.

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
  TerminalRequest,
} from './index.js'

/**
 * How to reach `dsh serve`: a program speaking the protocol on its stdin
 * and stdout (`['ssh', 'host', 'dsh', 'serve', '--stdio']`; its stderr is
 * kept for error messages), or the path of a unix socket a `dsh serve
 * --listen unix:PATH` listens on.
 */
export type RemoteTransport = { command: string[] } | { socket: string }

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
}

/** A remote error: a {@link DshNativeError}, with the transport named when the connection was lost. */
export interface RemoteError extends DshNativeError {
  /** With `CONNECTION_LOST`: the transport, as `` `ssh host dsh serve --stdio` `` or `unix:PATH`. */
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
   * `STDIN_CLOSED` (and a `reason`) as locally, and with `CONNECTION_LOST`.
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
  /** Runs the spec on the server; `spec.signal` aborts it (already aborted: rejects ABORT_ERR, nothing is sent). */
  run(spec: ShellExecSpec): Promise<ShellRunResult>
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
   * Not supported: the protocol has no terminal sessions yet. Always
   * rejects with an error of code `NOT_SUPPORTED`.
   */
  spawnTerminal(request: TerminalRequest): Promise<never>
  /**
   * Disposes the server's executor (every running process is killed and
   * awaited, spill files removed), then ends the transport. Afterwards
   * `run` and `start` fail with DISPOSED. Idempotent.
   */
  dispose(): Promise<void>
}
