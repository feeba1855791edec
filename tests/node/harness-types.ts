// The harness's seam, written from the seeds (docs/core-data-structures/bash)
// and DESIGN.md, independently of dsh-native's own declarations. Compiled with
// `tsc --noEmit --strict`: it fails if NativeBashExecutor or its results are
// not assignable to what a harness expects.

import { NativeBashExecutor } from 'dsh-native'

type SandboxMode = 'read-only' | 'workspace-write' | 'danger-full-access'
type SandboxEnforcement = 'full' | 'partial'
type BashTaskStatus = 'running' | 'completed' | 'killed'
type BashTaskId = string
type OwnerToken = string
type DshEnvironment = Partial<Record<`DSH_${string}`, string>>

interface SandboxPolicy {
  mode: SandboxMode
  workspaceRoot: string
}

interface BashExecRequest {
  command: string
  workdir?: string | undefined
  timeoutMs?: number | undefined
  stdoutMaxBytes?: number | undefined
  signal?: AbortSignal | undefined
  stdin?: string | undefined
  env?: Record<string, string> | undefined
  dshEnv?: DshEnvironment | undefined
  owner?: OwnerToken | undefined
  sandboxPolicy?: SandboxPolicy | undefined
}

interface BashExecSpec {
  command: string
  workdir: string
  timeoutMs: number
  stdoutMaxBytes: number
  signal?: AbortSignal | undefined
  stdin?: string | undefined
  env?: Record<string, string> | undefined
  dshEnv?: DshEnvironment | undefined
  owner: OwnerToken | undefined
  sandboxPolicy: SandboxPolicy | undefined
}

interface CollectedOutput {
  text: string
  truncated: boolean
  spillPath?: string
}

interface BashSandboxInfo {
  mode: SandboxMode
  denied: boolean
  enforcement?: SandboxEnforcement
  runnerFailed?: boolean
}

interface BashRunResult {
  exitCode: number | null
  signal: NodeJS.Signals | null
  timedOut: boolean
  aborted: boolean
  timeoutMs: number
  stdout: CollectedOutput
  stderr: CollectedOutput
  sandbox?: BashSandboxInfo
}

interface BashTask {
  readonly id: BashTaskId
  status: BashTaskStatus
  exitCode: number | null
  signal: NodeJS.Signals | null
  readonly done: Promise<void>
  sandbox?: BashSandboxInfo
}

interface BashTaskRead {
  task: BashTask
  delta: string
  lossy: boolean
  stdoutSpillPath?: string
  stderrSpillPath?: string
}

interface BashProcess {
  readonly id: BashTaskId
  readonly status: BashTaskStatus
  readonly exitCode: number | null
  readonly signal: NodeJS.Signals | null
  readonly done: Promise<void>
  readOutput(): BashTaskRead
  kill(): boolean
}

type BashTaskListener = (task: BashTask) => void

interface ShellExecutor {
  readonly sandboxMode: SandboxMode | undefined
  resolve(request: BashExecRequest): BashExecSpec
  run(spec: BashExecSpec): Promise<BashRunResult>
  start(spec: BashExecSpec): BashProcess
  get(id: BashTaskId): BashProcess | undefined
  ownerOf(id: BashTaskId): OwnerToken | undefined
  list(): readonly BashProcess[]
  readOutput(id: BashTaskId): BashTaskRead
  kill(id: BashTaskId): boolean
  onTaskDone(listener: BashTaskListener): () => void
  dispose(): Promise<void>
}

// The checks: assignability, in both directions the harness uses.
const executor: ShellExecutor = new NativeBashExecutor({ timeoutMs: 30_000, graceMs: 1_000 })

async function harnessUse(exec: ShellExecutor): Promise<string> {
  const controller = new AbortController()
  const spec: BashExecSpec = exec.resolve({ command: 'echo hi', signal: controller.signal, dshEnv: { DSH_SESSION: 's' } })
  const result: BashRunResult = await exec.run(spec)
  const task: BashProcess = exec.start({ ...spec, owner: 'session-1' })
  const read: BashTaskRead = task.readOutput()
  const asTask: BashTask = read.task
  const off: () => void = exec.onTaskDone((t: BashTask) => void t.done)
  off()
  await task.done
  return `${result.stdout.text}${read.delta}${asTask.status}${exec.ownerOf(task.id) ?? ''}`
}

void harnessUse(executor)
