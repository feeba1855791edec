// Type declarations for dsh-native: the harness's shell-executor seam
// (`ShellExecutor`, `ctx.shell`) implemented natively. Names and shapes are
// the seam's own, so values flow both ways between these types and the
// published `@deepseek-ai/dsh-shell` ones (checked under `strict` and
// `exactOptionalPropertyTypes` by tests/node/seam-types.mts). Every name a
// user imports from the seam is exported here too, for our type: results,
// reads, processes and sandbox facts are the seam's in both directions (a
// read, a process or a request may carry more); check-declarations.mjs
// fails when the seam exports a name this file lacks. The cordis plugin is
// `dsh-native/harness`.

/** What a confined command may change on the filesystem (docs/sandbox.md). */
export type SandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access'
/** How completely the kernel enforced a mode: `full` at Landlock ABI 3 or later. */
export type SandboxEnforcement = 'full' | 'partial'
/** What a command may do on the network (docs/sandbox.md); `loopback` needs root and cgroup v2, else fails closed. */
export type NetworkPolicy = 'allow' | 'deny' | 'loopback'
/**
 * The limit that ended a command, as the kernel reported it (docs/limits.md).
 * `open_files` never ends one (the kernel refuses an open with EMFILE).
 */
export type LimitName = 'memory' | 'processes' | 'cpu' | 'file_size'
/** Every limit, as `limitsEnforcement` and `limitsSupport()` key them. */
export type LimitKey = LimitName | 'open_files'
/** How one limit is enforced: a cgroup of the command's own, a resource limit, or not at all. */
export type LimitMechanism = 'cgroup-v1' | 'cgroup-v2' | 'rlimit' | 'unsupported'
/** Per-command limits (docs/limits.md): positive whole numbers; each optional. */
export interface Limits {
  /** Bytes of memory the command's whole tree may use. */
  memoryBytes?: number | undefined
  /** Processes and threads the command's tree may have at once. */
  processes?: number | undefined
  /** CPU seconds each process may use (SIGXCPU, then SIGKILL a second later). */
  cpuSeconds?: number | undefined
  /** The largest file a process may write, in bytes (SIGXFSZ past it). */
  fileSizeBytes?: number | undefined
  /** Descriptors a process may hold (EMFILE past it). */
  openFiles?: number | undefined
}
/** How each limit a command ran with was enforced. */
export type LimitsEnforcement = Partial<Record<LimitKey, LimitMechanism>>

/** `running`, then `completed` or `killed` (at once when a stop is requested). */
export type ShellProcessStatus = 'running' | 'completed' | 'killed'
/** A background process's registry id: `bash-1`, `bash-2`, … */
export type ShellProcessId = string
/** An opaque token stored with a background process; never interpreted. */
export type OwnerToken = string

/** The prefix of every managed variable: each `dshEnv` key starts with it (the seam's `DSH_ENV_PREFIX`). */
export declare const DSH_ENV_PREFIX: 'DSH_'
/** One environment key inside the managed `DSH_` namespace. */
export type DshEnvironmentKey = `DSH_${string}`
/** Trusted harness variables for one execution (the seam's `DshEnvironment`). */
export type DshEnvironment = Readonly<Record<DshEnvironmentKey, string>>

/**
 * The per-call file-effect policy (the seam's `SandboxExecutionPolicy`).
 * `S` is the session id's type: the harness brands it, and a spec keeps
 * the brand its request had.
 */
export interface SandboxExecutionPolicy<S extends string = string> {
  /** The mode the command runs under. */
  mode: SandboxMode
  /** Absolute root that `workspace-write` may write under. */
  workspaceRoot: string
  /** The calling session's identity; carried from request to spec untouched. */
  sessionId?: S
  /** Absent: `allow`. */
  network?: NetworkPolicy
}

/** A policy as a request may give it: `workspaceRoot` defaults to the workdir. */
export interface SandboxPolicyRequest<S extends string = string> {
  /** The mode to confine the command with. */
  mode: SandboxMode
  /** Default: the resolved workdir. A relative root is taken against the process cwd. */
  workspaceRoot?: string | undefined
  /** The calling session's identity; carried to the spec untouched. */
  sessionId?: S | undefined
  /** What the command may do on the network (default `allow`). */
  network?: NetworkPolicy | undefined
}

/**
 * The executor's configuration (docs/configuration.md). Every field is
 * optional; numbers are positive whole numbers no larger than 2^53−1, and a
 * bad one is an `INVALID_ARGUMENT` error naming it (`config.graceMs`).
 */
export interface NativeShellExecutorConfig {
  /** Default workdir, and the base of a relative one (default: the process cwd, read at resolve time). */
  cwd?: string | undefined
  /** Default foreground timeout in milliseconds (default 120000, or `maxTimeoutMs` if smaller). */
  timeoutMs?: number | undefined
  /** Cap for per-call timeouts, in milliseconds (default 600000). */
  maxTimeoutMs?: number | undefined
  /** In-memory window per stream, in bytes (default 64000); a foreground request's `stdoutMaxBytes` may raise stdout's. */
  maxOutputBytes?: number | undefined
  /** Cap of one spill file, in bytes (default 67108864, 64 MiB). */
  maxSpillBytes?: number | undefined
  /** Settled background processes kept in the registry (default 1000); the oldest beyond are forgotten. */
  retainSettled?: number | undefined
  /** SIGTERM→SIGKILL grace and pipe-drain bound, in milliseconds (default 3000, at most 2147483647). */
  graceMs?: number | undefined
  /**
   * Where the private 0700 spill directory is created (default: the core's
   * temp dir, `$TMPDIR` or `/tmp`). Created if missing; fixed once the
   * executor is made.
   */
  spillDir?: string | undefined
  /** Default sandbox mode (default: none — the executor does not confine). */
  sandboxMode?: SandboxMode | undefined
  /** Limits every command gets, and the most a request may ask for (docs/limits.md). */
  limits?: Limits | undefined
}

/** A caller's request; `resolve()` turns it into a {@link ShellExecSpec}. */
export interface ShellExecRequest {
  /** Run as `bash -c -- <command>`. */
  command: string
  /** Relative paths are relative to the configured `cwd`. */
  workdir?: string | undefined
  /** Any positive number of milliseconds; a fraction is rounded up; capped at `maxTimeoutMs`. */
  timeoutMs?: number | undefined
  /** In-memory stdout window of a foreground run in bytes, a positive whole number up to 2^53-1; may be above `maxOutputBytes` (stderr keeps that). */
  stdoutMaxBytes?: number | undefined
  /** Aborts a `run` (the result says `aborted`) or kills a started process; copied onto the spec. Already aborted: ABORT_ERR. */
  signal?: AbortSignal | undefined
  /**
   * Written to stdin, then closed; a Buffer for bytes that are not text. Or
   * `{ pipe: true }`: a pipe that stays open for `writeStdin` (for `start`,
   * or `run` with `onExpiry: 'background'`).
   */
  stdin?: string | Buffer | StdinPipe | undefined
  /**
   * What a `run` does when its timeout is reached: `'kill'` (the default)
   * or `'background'`, which hands the command over to the registry as a
   * background process instead (the result's `backgroundId`).
   */
  onExpiry?: OnExpiry | undefined
  /** Ordinary variables, merged after the scrub; an `undefined` value is an absent key. */
  env?: Readonly<Record<string, string | undefined>> | undefined
  /** Managed `DSH_*` variables, merged last. */
  dshEnv?: DshEnvironment | undefined
  /** Stored with a background process (see `ownerOf`); not part of the harness's seam. */
  owner?: OwnerToken | undefined
  /** This call's sandbox policy (default: the executor's `sandboxMode`, if any). */
  sandboxPolicy?: SandboxPolicyRequest | undefined
  /** This call's limits, each clamped to the executor's (default: the executor's). */
  limits?: Limits | undefined
}

/** A stdin that stays open for `writeStdin` until `closeStdin`. */
export interface StdinPipe {
  /** Always true. */
  pipe: true
}

/** What a foreground run does when its timeout is reached. */
export type OnExpiry = 'kill' | 'background'

/** A resolved spec: what `run`/`start` take (ours or one the harness built). */
export interface ShellExecSpec {
  /** Run as `bash -c -- <command>`. */
  command: string
  /** Absolute. */
  workdir: string
  /** The effective foreground timeout in milliseconds; at most `maxTimeoutMs`. */
  timeoutMs: number
  /** The in-memory stdout window of a foreground run, in bytes; at most `maxOutputBytes`. */
  stdoutMaxBytes: number
  /** Aborts `run` or kills a started process. */
  signal?: AbortSignal | undefined
  /** Written to stdin, then closed; `{ pipe: true }`: a pipe for `writeStdin`; absent: stdin is /dev/null. */
  stdin?: string | Buffer | StdinPipe | undefined
  /** `'background'`: hand the command over at the timeout; absent: `'kill'`. */
  onExpiry?: OnExpiry | undefined
  /** Ordinary variables, merged after the scrub. */
  env?: Record<string, string> | undefined
  /** Managed `DSH_*` variables, merged last. */
  dshEnv?: DshEnvironment | undefined
  /** Stored with a background process. */
  owner?: OwnerToken | undefined
  /** Required-but-nullable: present, possibly undefined (unconfined). */
  sandboxPolicy: SandboxExecutionPolicy | undefined
  /** The effective limits; absent when the command has none. */
  limits?: Limits | undefined
}

/**
 * The spec `resolve(request)` gives for a request of type `R`: text stdin
 * stays text and a branded session id keeps its brand, so the spec also
 * fits the harness's own `ShellExecSpec`.
 */
export type ResolvedSpec<R extends ShellExecRequest> = Omit<ShellExecSpec, 'stdin' | 'sandboxPolicy'> & {
  stdin?: Extract<R['stdin'], string | Buffer | StdinPipe> | undefined
  sandboxPolicy: SandboxExecutionPolicy<SessionIdOf<R>> | undefined
}

/** Keys of `R` that `Shape` does not have, typed `never` so passing one fails to compile. */
export type NoExtraKeys<R, Shape> = { [K in Exclude<keyof R, keyof Shape>]: never }

/** The session id type a request carries (`string` when it carries none). */
export type SessionIdOf<R> = R extends { sandboxPolicy?: { sessionId?: infer S } | undefined }
  ? Exclude<S, undefined> extends string
    ? Exclude<S, undefined>
    : string
  : string

/** One stream of a foreground run. */
export interface CollectedOutput {
  /** The tail of the stream when truncated; never splits a UTF-8 character. */
  text: string
  /** True when bytes were dropped from the start of the stream. */
  truncated: boolean
  /** A file holding the complete stream, when truncated and available. */
  spillPath?: string
  /** Why a truncated stream has no spill file (past maxSpillBytes, or it could not be written). */
  spillError?: string
}

/** Sandbox facts of a run or a settled process (docs/sandbox.md). */
export interface ShellSandboxInfo {
  /** The mode the command ran under. */
  mode: SandboxMode
  /** A conservative guess that the sandbox denied a file operation (a failed exit with a permission error). */
  denied: boolean
  /** Absent for `danger-full-access`. */
  enforcement?: SandboxEnforcement
  /** Metadata changes (chmod, chown, timestamps, xattrs) were refused too outside the writable places: the command ran in read-only mounts of its own (docs/sandbox.md, "Metadata"). Never for `danger-full-access`. Always set by dsh-native (optional only so the seam's own results fit this type). */
  metadata?: boolean
  /** Background only: confinement could not be applied and nothing ran. */
  runnerFailed?: boolean
  /** Present when the policy was not `allow`. */
  network?: NetworkPolicy
  /** How completely the kernel enforced the network policy; absent for `allow`. */
  networkEnforcement?: SandboxEnforcement
}

/** The outcome of a foreground run; a nonzero exit, a timeout and an abort are all results. */
export interface ShellRunResult {
  /** The exit status when the shell exited by itself; else null. */
  exitCode: number | null
  /** The signal that killed the shell (`SIGTERM`); else null. */
  signal: NodeJS.Signals | null
  /**
   * Present (true) when the command ran and ended but nobody could say how
   * (the executor's supervisor, its parent, was itself killed); `exitCode`
   * and `signal` are null.
   */
  exitStatusUnavailable?: true
  /** The executor's timeout fired first. */
  timedOut: boolean
  /** The caller's signal (or the executor's disposal) fired first. */
  aborted: boolean
  /** The effective timeout of this run, in milliseconds. */
  timeoutMs: number
  /** The command's stdout. */
  stdout: CollectedOutput
  /** The command's stderr. */
  stderr: CollectedOutput
  /** Present when the spec carried a sandbox policy. */
  sandbox?: ShellSandboxInfo
  /**
   * Present after a timeout or an abort when processes of the command's
   * tree were still alive when the stop finished (after the final SIGKILL):
   * how many. Absent means none — the expected outcome; warn otherwise.
   */
  survivors?: number
  /** Present when a limit ended the command (never with `timedOut` or `aborted`). */
  limit?: LimitName
  /** Present when the command had limits: how each was enforced. */
  limitsEnforcement?: LimitsEnforcement
  /**
   * Present when the timeout was reached with `onExpiry: 'background'`: the
   * command was not stopped but registered under this id (`get(id)`);
   * `timedOut` is true, `exitCode` and `signal` are null, and the
   * process's reads continue right after this result's output.
   */
  backgroundId?: string
}

/** What one consuming read returns. */
export interface ShellProcessRead {
  /** The process this read came from. */
  task: NativeShellProcess
  /** Output since the previous read; stderr in a `[stderr]` section. */
  delta: string
  /** Unread bytes slid out of the in-memory window before this read (the spill file has them). */
  lossy: boolean
  /** The file holding the complete stdout, once it outgrew its window. */
  stdoutSpillPath?: string
  /** The file holding the complete stderr, once it outgrew its window. */
  stderrSpillPath?: string
  /** Why stdout outgrew its window without a spill file. */
  stdoutSpillError?: string
  /** Why stderr outgrew its window without a spill file. */
  stderrSpillError?: string
}

/** A task-done listener: called once per background process that settles, already settled. */
export type ShellProcessListener = (process: NativeShellProcess) => void

/** A background process (the seam's `ShellProcess`); `status`, `exitCode` and `signal` are live. */
export declare class NativeShellProcess {
  /** Made by `NativeShellExecutor#start`, `get`, `list` and listeners; one object per id. */
  private constructor()
  /** The registry id: `bash-1`, `bash-2`, … */
  readonly id: ShellProcessId
  /** The command as started. */
  readonly command: string
  /** Live: `killed` as soon as a stop is requested, before the process has exited. */
  readonly status: ShellProcessStatus
  /** The exit status once settled, if the shell exited by itself; else null. */
  readonly exitCode: number | null
  /** The signal that killed it once settled; else null. */
  readonly signal: NodeJS.Signals | null
  /** Present (true) once settled when nobody could say how it ended. */
  readonly exitStatusUnavailable?: true
  /** Present once settled after a stop that left part of its tree alive: how many (see ShellRunResult). */
  readonly survivors?: number
  /** Resolves when the process has settled; never rejects. */
  readonly done: Promise<void>
  /** Sandbox facts, present once a policy-carrying process has settled. */
  readonly sandbox?: ShellSandboxInfo
  /** Present once settled when a limit ended it (docs/limits.md). */
  readonly limit?: LimitName
  /** Present once settled when it had limits: how each was enforced. */
  readonly limitsEnforcement?: LimitsEnforcement
  /** The request's owner token, if it had one. */
  readonly owner?: OwnerToken
  /** Consuming read: what arrived since the previous read. */
  readOutput(): ShellProcessRead
  /** SIGTERM to the tree, SIGKILL after graceMs; true when this call began it. */
  kill(): boolean
  /** True when started with `stdin: { pipe: true }`. */
  readonly hasStdinPipe: boolean
  /**
   * Writes `data` (a string as UTF-8, a Buffer or a Uint8Array) to the
   * command's stdin. Resolves once every byte was taken by its bounded
   * buffer (64 KiB); while the command does not read, the promise waits
   * (back-pressure) and the event loop runs on. Writes are written whole,
   * in call order. Rejects with code `STDIN_CLOSED` (and a `reason`)
   * without a stdin pipe, after `closeStdin()`, and once the command exited
   * or closed its stdin.
   */
  writeStdin(data: string | Uint8Array): Promise<void>
  /**
   * Closes the command's stdin once what was written is delivered, so it
   * reads EOF. True when this call closed it; false when it was already
   * closed or the command exited. Throws `STDIN_CLOSED` without a pipe.
   */
  closeStdin(): boolean
}

/** The seam's name for a background process: a {@link NativeShellProcess}. */
export type ShellProcess = NativeShellProcess

/** The signals a terminal's foreground group can be sent (the published `SubprocessTerminalSignal`). */
export type TerminalSignal = 'SIGINT' | 'SIGTERM' | 'SIGKILL' | 'SIGTSTP' | 'SIGHUP'

/**
 * A terminal session request (docs/terminals.md): the published
 * `SubprocessTerminalSpawnSpec`'s fields, optional here (defaults: the
 * configured `cwd`, 24 rows, 80 columns, the configured `graceMs`), and
 * ours. Exactly one of `argv` and `command`.
 */
export interface TerminalRequest {
  /** The program and its arguments; `argv[0]` is looked up on the PATH unless it contains a `/`. */
  argv?: readonly string[]
  /** Instead of `argv`: a line run as `bash -c -- <command>`. */
  command?: string
  /** The working directory; a relative one is relative to the configured `cwd`. */
  cwd?: string
  /** Variables over the scrubbed host environment; `TERM` is `xterm-256color` unless given. */
  env?: Record<string, string> | undefined
  /** Managed `DSH_*` variables, merged after `env`. */
  dshEnv?: DshEnvironment
  /** Initial rows, 1 to 65535. */
  rows?: number
  /** Initial columns, 1 to 65535. */
  cols?: number
  /** SIGTERM-to-SIGKILL grace of `terminate()`, in milliseconds. */
  graceMs?: number
  /** Cancels the allocation only: already aborted, the spawn rejects with ABORT_ERR. */
  signal?: AbortSignal | undefined
  /** This session's sandbox policy (docs/sandbox.md). */
  sandboxPolicy?: SandboxExecutionPolicy
}

/** A terminal's foreground process group (the published `SubprocessTerminalForeground`). */
export interface TerminalForeground {
  /** The group the terminal driver publishes as its foreground. */
  processGroupId: number
  /** True only when the kernel shows that group blocked reading the terminal (docs/terminals.md). */
  inputWaiting: boolean
}

/** How a terminal's program ended (the published `SubprocessOutcome`). */
export interface TerminalOutcome {
  /** The exit code; null when a signal ended it. */
  exitCode: number | null
  /** The signal that ended it; null on a normal exit. */
  signal: NodeJS.Signals | null
}

/** One consuming read of a terminal's output. */
export interface TerminalRead {
  /** Output since the previous read, never split inside a UTF-8 character. */
  text: string
  /** True once the output has ended and everything was read. */
  ended: boolean
}

/**
 * A terminal session (docs/terminals.md), assignable to the published
 * `SubprocessTerminalHandle`. `output` and `readOutput()` take from the
 * same unread output: use one or the other.
 */
export declare class NativeTerminalHandle {
  /** Made by `NativeShellExecutor#spawnTerminal`. */
  private constructor()
  /** The program's pid: the leader of the session, and its group id. */
  readonly pid: number
  /** The terminal's output as UTF-8 bytes, in order; ends once the output has ended. */
  readonly output: import('node:stream').Readable
  /** Resolves when the program exits; never rejects. */
  readonly done: Promise<TerminalOutcome>
  /** True once the program has exited. */
  readonly exited: boolean
  /** Present (true) once exited when nobody could say how it ended. */
  readonly exitStatusUnavailable?: true
  /** Present after `terminate()` or dispose when members of the session outlived the final SIGKILL. */
  readonly survivors?: number
  /** Consuming read of the output. */
  readOutput(): TerminalRead
  /** Writes to the terminal's input as typed; resolves once taken; TERMINAL_CLOSED after the program exited. A Buffer is held, not copied, until then: do not transfer or detach its ArrayBuffer meanwhile. */
  write(data: string | Buffer): Promise<void>
  /** Changes the window size; the foreground group gets SIGWINCH. Throws TERMINAL_CLOSED once the program exited. */
  resize(rows: number, cols: number): void
  /** The foreground group and whether it waits for input (`/proc` is read off the JS thread); undefined once the program exited. */
  inspectForeground(): Promise<TerminalForeground | undefined>
  /** Resolves once the kernel shows the foreground group waiting for input (true), or with false when `timeoutMs` passed (none or Infinity: no limit; negative or NaN: INVALID_ARGUMENT naming `timeoutMs`) or the program exited; right after a write, true only once the program took what was written and waits again. */
  waitInputWaiting(timeoutMs?: number): Promise<boolean>
  /** Signals the foreground group; resolves with its id (TERMINAL_CLOSED when there is none; INVALID_ARGUMENT for SIGKILL while the terminal's own program is in the foreground: it would end the session, which terminate() does). */
  signalForeground(signal: TerminalSignal): Promise<number>
  /** Ends every member of the session; resolves once nothing is left and no call of this handle is in flight. Idempotent. */
  terminate(): Promise<void>
}

/**
 * Errors carry a `code`: 'INVALID_ARGUMENT' (with `field`, e.g.
 * 'request.timeoutMs', 'spec.workdir', 'request.work_dir' for an unknown
 * key), an errno name such as 'ENOENT' for a command that could not start,
 * 'ABORT_ERR', 'DISPOSED', 'NOT_FOUND', 'STILL_RUNNING', 'WOULD_BLOCK',
 * 'FORKED_CHILD', 'SANDBOX_UNAVAILABLE', 'LIMIT_UNAVAILABLE' (with `limit`),
 * 'STDIN_CLOSED' (with `reason` and `id`), 'TERMINAL_CLOSED', 'INTERNAL'.
 */
export interface DshNativeError extends Error {
  /** What went wrong, to switch on (see above). */
  code: string
  /** With `INVALID_ARGUMENT`: the field, e.g. `request.timeoutMs`. */
  field?: string
  /** With an errno `code`: the negated errno, as Node's own errors carry it. */
  errno?: number
  /** With `LIMIT_UNAVAILABLE`: the limit this host cannot enforce. */
  limit?: LimitKey
  /**
   * With `STDIN_CLOSED`: why the stdin takes no more bytes: `'not-piped'`,
   * `'closed'` (after `closeStdin`), `'exited'` or `'broken'` (the command
   * closed its stdin).
   */
  reason?: 'not-piped' | 'closed' | 'exited' | 'broken'
  /** With `STDIN_CLOSED`: the process's id. */
  id?: string
}

/**
 * The harness's `ShellExecutor`, native (docs/running.md, docs/registry.md).
 * Spawning, waiting and reading happen on the core's threads; the event loop
 * is never blocked.
 */
export declare class NativeShellExecutor {
  /** Validates `config` (docs/configuration.md); a bad field throws `INVALID_ARGUMENT`. */
  constructor(config?: NativeShellExecutorConfig)
  /** undefined: this executor does not sandbox. */
  readonly sandboxMode: SandboxMode | undefined
  /**
   * New commands get `config`, a whole configuration (omitted fields take
   * their defaults); running ones keep theirs; a bad field changes nothing.
   * `spillDir` cannot change.
   */
  reconfigure(config: NativeShellExecutorConfig): void
  /** Adds no key for an absent optional field; an unknown key is an error (in types too). */
  resolve<R extends ShellExecRequest>(request: R & NoExtraKeys<R, ShellExecRequest>): ResolvedSpec<R>
  /** Never blocks the event loop; `spec.signal` aborts the command. */
  run(spec: ShellExecSpec): Promise<ShellRunResult>
  /** Returns at once; `spec.signal` kills the process (already aborted: throws ABORT_ERR, nothing runs). */
  start(spec: ShellExecSpec): NativeShellProcess
  /** The process registered as `id`, or undefined. */
  get(id: ShellProcessId): NativeShellProcess | undefined
  /** Throws NOT_FOUND for an unknown id. */
  ownerOf(id: ShellProcessId): OwnerToken | undefined
  /** Every registered background process, in start order. */
  list(): NativeShellProcess[]
  /** The process's consuming read; throws NOT_FOUND for an unknown id. */
  readOutput(id: ShellProcessId): ShellProcessRead
  /** Kills the process (true when this call began it); throws NOT_FOUND for an unknown id. */
  kill(id: ShellProcessId): boolean
  /** Forgets a settled process (registry entry, spill files, buffers); throws STILL_RUNNING while it runs. */
  forget(id: ShellProcessId): void
  /**
   * Calls `listener(process)` once per background process that settles;
   * one that throws becomes a process warning. Returns a function that
   * unsubscribes.
   */
  onTaskDone(listener: ShellProcessListener): () => void
  /**
   * Starts a terminal session: the program leads a new session whose
   * controlling terminal is a fresh pseudo-terminal (docs/terminals.md).
   * Resolves with its handle once it runs.
   */
  spawnTerminal(request: TerminalRequest): Promise<NativeTerminalHandle>
  /**
   * Kills every running process and everything commands left behind
   * (SIGTERM, SIGKILL after `graceMs`), resolves once all have exited and
   * removes the spill files. Afterwards `run` and `start` fail with DISPOSED.
   */
  dispose(): Promise<void>
}

/**
 * The seam's name for the executor: a {@link NativeShellExecutor}, whose
 * `sandboxMode`, `resolve`, `run` and `start` are the seam's. A type only:
 * the seam's `ShellExecutor` is also the abstract cordis service a plugin
 * extends, which `dsh-native/harness` exports (its plugin is one).
 */
export type ShellExecutor = NativeShellExecutor

/**
 * Validates a configuration the way `new NativeShellExecutor(config)` would,
 * without making an executor; throws `INVALID_ARGUMENT` naming the field.
 */
export declare function checkConfig(config?: NativeShellExecutorConfig): void

/** How this host would enforce each limit; `unsupported` ones fail closed with LIMIT_UNAVAILABLE. */
export declare function limitsSupport(): Record<LimitKey, LimitMechanism>

/** Why confined commands run without read-only mounts here, so metadata changes are not refused (`metadata: false`); null where they run in them. */
export declare function metadataUnavailable(): string | null

/** @deprecated the seam's old name; use {@link NativeShellExecutor}. */
export declare const NativeBashExecutor: typeof NativeShellExecutor
/** @deprecated the seam's old name; use {@link NativeShellExecutor}. */
export type NativeBashExecutor = NativeShellExecutor
/** @deprecated the seam's old name; use {@link NativeShellProcess}. */
export declare const NativeBashTask: typeof NativeShellProcess
/** @deprecated the seam's old name; use {@link NativeShellProcess}. */
export type NativeBashTask = NativeShellProcess
/** @deprecated use {@link NativeShellExecutorConfig}. */
export type NativeBashExecutorConfig = NativeShellExecutorConfig
/** @deprecated use {@link ShellExecRequest}. */
export type BashExecRequest = ShellExecRequest
/** @deprecated use {@link ShellExecSpec}. */
export type BashExecSpec = ShellExecSpec
/** @deprecated use {@link ShellRunResult}. */
export type BashRunResult = ShellRunResult
/** @deprecated use {@link ShellProcessRead}. */
export type BashTaskRead = ShellProcessRead
/** @deprecated use {@link ShellProcessStatus}. */
export type BashTaskStatus = ShellProcessStatus
/** @deprecated use {@link ShellSandboxInfo}. */
export type BashSandboxInfo = ShellSandboxInfo
/** @deprecated use {@link ShellProcessId}. */
export type BashTaskId = ShellProcessId
/** @deprecated use {@link ShellProcessListener}. */
export type BashTaskListener = ShellProcessListener
