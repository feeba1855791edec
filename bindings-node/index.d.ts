// Type declarations for dsh-native: the harness's bash-executor seam
// (ShellExecutor) implemented natively. Field names follow the harness.

export type SandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access'
export type SandboxEnforcement = 'full' | 'partial'
export type BashTaskStatus = 'running' | 'completed' | 'killed'
export type BashTaskId = string
export type OwnerToken = string
/** Managed variables; a key whose value is undefined is absent. */
export type DshEnvironment = { [K in `DSH_${string}`]?: string | undefined }

export interface SandboxPolicy {
  mode: SandboxMode
  workspaceRoot: string
}

export interface NativeBashExecutorConfig {
  /** Default workdir (default: the process cwd, read at resolve time). */
  cwd?: string
  /** Default foreground timeout (default 120000). */
  timeoutMs?: number
  /** Cap for per-call timeouts (default 600000). */
  maxTimeoutMs?: number
  /** In-memory cap per stream (default 64000). */
  maxOutputBytes?: number
  /** Cap of one spill file (default 64 MiB). */
  maxSpillBytes?: number
  /** Settled background tasks kept in the registry (default 1000); the oldest beyond are forgotten. */
  retainSettled?: number
  /** SIGTERM→SIGKILL grace and pipe-drain bound (default 3000). */
  graceMs?: number
  /** Where the private 0700 spill directory is created (default: os.tmpdir()). */
  spillDir?: string
  /** Default sandbox mode (default: none — the executor does not confine). */
  sandboxMode?: SandboxMode
}

export interface BashExecRequest {
  command: string
  workdir?: string | undefined
  timeoutMs?: number | undefined
  stdoutMaxBytes?: number | undefined
  signal?: AbortSignal | undefined
  stdin?: string | undefined
  env?: Record<string, string | undefined> | undefined
  dshEnv?: DshEnvironment | undefined
  owner?: OwnerToken | undefined
  sandboxPolicy?: { mode: SandboxMode; workspaceRoot?: string } | undefined
}

export interface BashExecSpec {
  command: string
  workdir: string
  timeoutMs: number
  stdoutMaxBytes: number
  signal?: AbortSignal | undefined
  stdin?: string | undefined
  env?: Record<string, string> | undefined
  dshEnv?: DshEnvironment | undefined
  /** Required-but-nullable: present, possibly undefined. */
  owner: OwnerToken | undefined
  /** Required-but-nullable: present, possibly undefined (unconfined). */
  sandboxPolicy: SandboxPolicy | undefined
}

export interface CollectedOutput {
  /** The tail of the stream when truncated. */
  text: string
  truncated: boolean
  /** A file holding the complete stream, when truncated and available. */
  spillPath?: string
  /** Why a truncated stream has no spill file (past maxSpillBytes, or it could not be written). */
  spillError?: string
}

export interface BashSandboxInfo {
  mode: SandboxMode
  denied: boolean
  enforcement?: SandboxEnforcement
  runnerFailed?: boolean
}

export interface BashRunResult {
  exitCode: number | null
  signal: NodeJS.Signals | null
  /**
   * Present (true) when the command ran and ended but its exit status was
   * taken by someone else (a host that ignores SIGCHLD or reaps with
   * `waitpid(-1)`, on a kernel before 6.15); `exitCode` and `signal` are null.
   */
  exitStatusUnavailable?: true
  timedOut: boolean
  aborted: boolean
  timeoutMs: number
  stdout: CollectedOutput
  stderr: CollectedOutput
  sandbox?: BashSandboxInfo
}

export interface BashTaskRead {
  task: NativeBashTask
  delta: string
  lossy: boolean
  stdoutSpillPath?: string
  stderrSpillPath?: string
  /** Why stdout outgrew its window without a spill file. */
  stdoutSpillError?: string
  /** Why stderr outgrew its window without a spill file. */
  stderrSpillError?: string
}

export type BashTaskListener = (task: NativeBashTask) => void

/** A background process; `status`, `exitCode` and `signal` are live. */
export declare class NativeBashTask {
  private constructor()
  readonly id: BashTaskId
  readonly command: string
  readonly status: BashTaskStatus
  readonly exitCode: number | null
  readonly signal: NodeJS.Signals | null
  /** Present (true) once settled when someone else took the exit status. */
  readonly exitStatusUnavailable: true | undefined
  /** Resolves when the process has settled; never rejects. */
  readonly done: Promise<void>
  readonly sandbox: BashSandboxInfo | undefined
  readonly owner: OwnerToken | undefined
  /** Consuming read: what arrived since the previous read. */
  readOutput(): BashTaskRead
  /** SIGTERM to the tree, SIGKILL after graceMs; true when this call began it. */
  kill(): boolean
}

/**
 * Errors carry a `code`: 'INVALID_ARGUMENT' (with `field`, e.g.
 * 'request.timeoutMs'), an errno name such as 'ENOENT' for a command that
 * could not start, 'ABORT_ERR', 'DISPOSED', 'NOT_FOUND',
 * 'SANDBOX_UNAVAILABLE'.
 */
export interface DshNativeError extends Error {
  code: string
  field?: string
  errno?: number
}

export declare class NativeBashExecutor {
  constructor(config?: NativeBashExecutorConfig)
  /** undefined: this executor does not sandbox. */
  readonly sandboxMode: SandboxMode | undefined
  resolve(request: BashExecRequest): BashExecSpec
  /** Never blocks the event loop; `spec.signal` aborts the command. */
  run(spec: BashExecSpec): Promise<BashRunResult>
  /** Returns at once; `spec.signal` kills the task. */
  start(spec: BashExecSpec): NativeBashTask
  get(id: BashTaskId): NativeBashTask | undefined
  ownerOf(id: BashTaskId): OwnerToken | undefined
  list(): NativeBashTask[]
  /** Throws NOT_FOUND for an unknown id. */
  readOutput(id: BashTaskId): BashTaskRead
  /** Throws NOT_FOUND for an unknown id. */
  kill(id: BashTaskId): boolean
  /** Forgets a settled task (registry entry, spill files, buffers); throws STILL_RUNNING while it runs. */
  forget(id: BashTaskId): void
  /** Returns a function that unsubscribes. */
  onTaskDone(listener: BashTaskListener): () => void
  /** Kills every running process and resolves once all have exited. */
  dispose(): Promise<void>
}
