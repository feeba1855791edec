// Type declarations for dsh-native: the harness's shell-executor seam
// (`ShellExecutor`, `ctx.shell`) implemented natively. Names and shapes are
// the seam's own, so values flow both ways between these types and the
// published `@deepseek-ai/dsh-shell` ones (checked under `strict` and
// `exactOptionalPropertyTypes`). The cordis plugin is `dsh-native/harness`.

export type SandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access'
export type SandboxEnforcement = 'full' | 'partial'
export type ShellProcessStatus = 'running' | 'completed' | 'killed'
export type ShellProcessId = string
export type OwnerToken = string

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
  mode: SandboxMode
  /** Absolute root that `workspace-write` may write under. */
  workspaceRoot: string
  /** The calling session's identity; carried from request to spec untouched. */
  sessionId?: S
}

/** A policy as a request may give it: `workspaceRoot` defaults to the workdir. */
export interface SandboxPolicyRequest<S extends string = string> {
  mode: SandboxMode
  workspaceRoot?: string | undefined
  sessionId?: S | undefined
}

export interface NativeShellExecutorConfig {
  /** Default workdir (default: the process cwd, read at resolve time). */
  cwd?: string | undefined
  /** Default foreground timeout (default 120000). */
  timeoutMs?: number | undefined
  /** Cap for per-call timeouts (default 600000). */
  maxTimeoutMs?: number | undefined
  /** In-memory cap per stream (default 64000). */
  maxOutputBytes?: number | undefined
  /** Cap of one spill file (default 64 MiB). */
  maxSpillBytes?: number | undefined
  /** Settled background processes kept in the registry (default 1000); the oldest beyond are forgotten. */
  retainSettled?: number | undefined
  /** SIGTERM→SIGKILL grace and pipe-drain bound (default 3000, at most 2147483647). */
  graceMs?: number | undefined
  /** Where the private 0700 spill directory is created (default: os.tmpdir()). Fixed once made. */
  spillDir?: string | undefined
  /** Default sandbox mode (default: none — the executor does not confine). */
  sandboxMode?: SandboxMode | undefined
}

/** A caller's request; `resolve()` turns it into a {@link ShellExecSpec}. */
export interface ShellExecRequest {
  command: string
  /** Relative paths are relative to the configured `cwd`. */
  workdir?: string | undefined
  /** Any positive number of milliseconds; a fraction is rounded up; capped at `maxTimeoutMs`. */
  timeoutMs?: number | undefined
  stdoutMaxBytes?: number | undefined
  signal?: AbortSignal | undefined
  /** Written to stdin, then closed; a Buffer for bytes that are not text. */
  stdin?: string | Buffer | undefined
  /** Ordinary variables, merged after the scrub; an `undefined` value is an absent key. */
  env?: Readonly<Record<string, string | undefined>> | undefined
  /** Managed `DSH_*` variables, merged last. */
  dshEnv?: DshEnvironment | undefined
  /** Stored with a background process (see `ownerOf`); not part of the harness's seam. */
  owner?: OwnerToken | undefined
  sandboxPolicy?: SandboxPolicyRequest | undefined
}

/** A resolved spec: what `run`/`start` take (ours or one the harness built). */
export interface ShellExecSpec {
  command: string
  workdir: string
  timeoutMs: number
  stdoutMaxBytes: number
  signal?: AbortSignal | undefined
  stdin?: string | Buffer | undefined
  env?: Record<string, string> | undefined
  dshEnv?: DshEnvironment | undefined
  owner?: OwnerToken | undefined
  /** Required-but-nullable: present, possibly undefined (unconfined). */
  sandboxPolicy: SandboxExecutionPolicy | undefined
}

/**
 * The spec `resolve(request)` gives for a request of type `R`: text stdin
 * stays text and a branded session id keeps its brand, so the spec also
 * fits the harness's own `ShellExecSpec`.
 */
export type ResolvedSpec<R extends ShellExecRequest> = Omit<ShellExecSpec, 'stdin' | 'sandboxPolicy'> & {
  stdin?: Extract<R['stdin'], string | Buffer> | undefined
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

export interface CollectedOutput {
  /** The tail of the stream when truncated. */
  text: string
  truncated: boolean
  /** A file holding the complete stream, when truncated and available. */
  spillPath?: string
  /** Why a truncated stream has no spill file (past maxSpillBytes, or it could not be written). */
  spillError?: string
}

export interface ShellSandboxInfo {
  mode: SandboxMode
  denied: boolean
  enforcement?: SandboxEnforcement
  runnerFailed?: boolean
}

export interface ShellRunResult {
  exitCode: number | null
  signal: NodeJS.Signals | null
  /**
   * Present (true) when the command ran and ended but nobody could say how
   * (the executor's supervisor, its parent, was itself killed); `exitCode`
   * and `signal` are null.
   */
  exitStatusUnavailable?: true
  timedOut: boolean
  aborted: boolean
  timeoutMs: number
  stdout: CollectedOutput
  stderr: CollectedOutput
  sandbox?: ShellSandboxInfo
  /**
   * Present after a timeout or an abort when processes of the command's
   * tree were still alive when the stop finished (after the final SIGKILL):
   * how many. Absent means none — the expected outcome; warn otherwise.
   */
  survivors?: number
}

export interface ShellProcessRead {
  /** The process this read came from. */
  task: NativeShellProcess
  /** Output since the previous read; stderr in a `[stderr]` section. */
  delta: string
  lossy: boolean
  stdoutSpillPath?: string
  stderrSpillPath?: string
  /** Why stdout outgrew its window without a spill file. */
  stdoutSpillError?: string
  /** Why stderr outgrew its window without a spill file. */
  stderrSpillError?: string
}

export type ShellProcessListener = (process: NativeShellProcess) => void

/** A background process (the seam's `ShellProcess`); `status`, `exitCode` and `signal` are live. */
export declare class NativeShellProcess {
  private constructor()
  readonly id: ShellProcessId
  readonly command: string
  readonly status: ShellProcessStatus
  readonly exitCode: number | null
  readonly signal: NodeJS.Signals | null
  /** Present (true) once settled when nobody could say how it ended. */
  readonly exitStatusUnavailable?: true
  /** Present once settled after a stop that left part of its tree alive: how many (see ShellRunResult). */
  readonly survivors?: number
  /** Resolves when the process has settled; never rejects. */
  readonly done: Promise<void>
  /** Sandbox facts, present once a policy-carrying process has settled. */
  readonly sandbox?: ShellSandboxInfo
  readonly owner?: OwnerToken
  /** Consuming read: what arrived since the previous read. */
  readOutput(): ShellProcessRead
  /** SIGTERM to the tree, SIGKILL after graceMs; true when this call began it. */
  kill(): boolean
}

/**
 * Errors carry a `code`: 'INVALID_ARGUMENT' (with `field`, e.g.
 * 'request.timeoutMs', 'spec.workdir', 'request.work_dir' for an unknown
 * key), an errno name such as 'ENOENT' for a command that could not start,
 * 'ABORT_ERR', 'DISPOSED', 'NOT_FOUND', 'STILL_RUNNING', 'WOULD_BLOCK',
 * 'FORKED_CHILD', 'SANDBOX_UNAVAILABLE', 'INTERNAL'.
 */
export interface DshNativeError extends Error {
  code: string
  field?: string
  errno?: number
}

export declare class NativeShellExecutor {
  constructor(config?: NativeShellExecutorConfig)
  /** undefined: this executor does not sandbox. */
  readonly sandboxMode: SandboxMode | undefined
  /** New commands get `config`; running ones keep theirs; a bad field changes nothing. */
  reconfigure(config: NativeShellExecutorConfig): void
  /** Adds no key for an absent optional field; an unknown key is an error (in types too). */
  resolve<R extends ShellExecRequest>(request: R & NoExtraKeys<R, ShellExecRequest>): ResolvedSpec<R>
  /** Never blocks the event loop; `spec.signal` aborts the command. */
  run(spec: ShellExecSpec): Promise<ShellRunResult>
  /** Returns at once; `spec.signal` kills the process (already aborted: throws ABORT_ERR, nothing runs). */
  start(spec: ShellExecSpec): NativeShellProcess
  get(id: ShellProcessId): NativeShellProcess | undefined
  /** Throws NOT_FOUND for an unknown id. */
  ownerOf(id: ShellProcessId): OwnerToken | undefined
  list(): NativeShellProcess[]
  /** Throws NOT_FOUND for an unknown id. */
  readOutput(id: ShellProcessId): ShellProcessRead
  /** Throws NOT_FOUND for an unknown id. */
  kill(id: ShellProcessId): boolean
  /** Forgets a settled process (registry entry, spill files, buffers); throws STILL_RUNNING while it runs. */
  forget(id: ShellProcessId): void
  /** Returns a function that unsubscribes. */
  onTaskDone(listener: ShellProcessListener): () => void
  /** Kills every running process and resolves once all have exited. */
  dispose(): Promise<void>
}

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
