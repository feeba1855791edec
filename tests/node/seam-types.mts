// Values flow both ways between dsh-native and the harness's PUBLISHED seam
// types (installed from the npm registry as devDependencies), under `strict`
// and `exactOptionalPropertyTypes`. Compiled by `npm run typecheck`; a
// mismatch is a compile error.

import type {
  ShellExecRequest as SeamRequest,
  ShellExecSpec as SeamSpec,
  ShellExecutor,
  ShellProcess as SeamProcess,
  ShellProcessRead as SeamRead,
  ShellRunResult as SeamRunResult,
  ShellSandboxInfo as SeamSandboxInfo,
} from '@deepseek-ai/dsh-shell'
import type * as Seam from '@deepseek-ai/dsh-shell'
import type { SandboxExecutionPolicy as SeamPolicy } from '@deepseek-ai/dsh-sandbox'
import type {
  SubprocessOutcome,
  SubprocessTerminalForeground,
  SubprocessTerminalHandle,
  SubprocessTerminalSignal,
  SubprocessTerminalSpawnSpec,
} from '@deepseek-ai/dsh-subprocess'
import {
  NativeBashExecutor,
  NativeShellExecutor,
  type NativeShellProcess,
  type NativeTerminalHandle,
  type TerminalForeground,
  type TerminalOutcome,
  type TerminalRequest,
  type TerminalSignal,
  type SandboxExecutionPolicy,
  type ShellRunResult,
} from 'dsh-native'
import type * as Native from 'dsh-native'
import NativeShellPlugin, { type Config } from 'dsh-native/harness'
import type * as Harness from 'dsh-native/harness'

/** Compiles only when `A` is assignable to `B`. */
type Assignable<A extends B, B> = A
/** Compiles only when each is assignable to the other. */
type BothWays<A extends B, B extends C, C = A> = [A, B, C]

/** The members of `Ours` that the seam's `Seam` also has (a compile error if `Ours` lacks one). */
type SeamPart<Ours, Seam> = Pick<Ours, keyof Seam & keyof Ours> & { [K in Exclude<keyof Seam, keyof Ours>]: never }
/** What a process's `readOutput()` returns. */
type ReadOf<P extends { readOutput(): unknown }> = ReturnType<P['readOutput']>
/** The seam's `ShellExecutor` methods (the cordis `Service` members aside). */
type ExecutorMethods = 'sandboxMode' | 'resolve' | 'run' | 'start'

// Every name of the seam a user imports, from each entry point
// (check-declarations.mjs fails when the seam exports a name that one of
// them lacks, except the tools' and settings' helpers it lists).
//
// dsh-native: the names are ours. Results, sandbox facts, statuses,
// outputs and environments are the seam's both ways. A read and a process
// carry more (a read's `task`; a process's id, command and stdin pipe):
// ours are the seam's, and what the seam defines of them is ours too. A
// request or a spec may be wider (stdin bytes or a pipe, limits, onExpiry,
// owner): the seam's are ours. The executor has the seam's methods.
export type NativeNames = [
  BothWays<Native.CollectedOutput, Seam.CollectedOutput>,
  BothWays<Native.DshEnvironment, Seam.DshEnvironment>,
  BothWays<Native.DshEnvironmentKey, Seam.DshEnvironmentKey>,
  BothWays<typeof Native.DSH_ENV_PREFIX, typeof Seam.DSH_ENV_PREFIX>,
  BothWays<Native.ShellSandboxInfo, Seam.ShellSandboxInfo>,
  BothWays<Native.ShellProcessStatus, Seam.ShellProcessStatus>,
  BothWays<Native.ShellRunResult, Seam.ShellRunResult>,
  Assignable<Native.ShellProcessRead, Seam.ShellProcessRead>,
  BothWays<SeamPart<Native.ShellProcessRead, Seam.ShellProcessRead>, Seam.ShellProcessRead>,
  Assignable<Native.ShellProcess, Seam.ShellProcess>,
  BothWays<Native.ShellProcess, NativeShellProcess>,
  BothWays<SeamPart<Omit<Native.ShellProcess, 'readOutput'>, Omit<Seam.ShellProcess, 'readOutput'>>, Omit<Seam.ShellProcess, 'readOutput'>>,
  BothWays<SeamPart<ReadOf<Native.ShellProcess>, ReadOf<Seam.ShellProcess>>, ReadOf<Seam.ShellProcess>>,
  Assignable<Seam.ShellExecRequest, Native.ShellExecRequest>,
  Assignable<Seam.ShellExecSpec, Native.ShellExecSpec>,
  BothWays<Native.ShellExecutor, NativeShellExecutor>,
  Assignable<Pick<Native.ShellExecutor, ExecutorMethods>, Pick<Seam.ShellExecutor, ExecutorMethods>>,
]

// dsh-native/harness: the plugin is declared with the seam's types, so its
// names are the seam's own; they meet dsh-native's as the seam's do.
export type HarnessNames = [
  BothWays<Harness.CollectedOutput, Seam.CollectedOutput>,
  BothWays<Harness.DshEnvironment, Seam.DshEnvironment>,
  BothWays<Harness.DshEnvironmentKey, Seam.DshEnvironmentKey>,
  BothWays<Harness.ShellSandboxInfo, Seam.ShellSandboxInfo>,
  BothWays<Harness.ShellProcessStatus, Seam.ShellProcessStatus>,
  BothWays<Harness.ShellRunResult, Seam.ShellRunResult>,
  BothWays<Harness.ShellProcessRead, Seam.ShellProcessRead>,
  BothWays<Harness.ShellProcess, Seam.ShellProcess>,
  BothWays<Harness.ShellExecRequest, Seam.ShellExecRequest>,
  BothWays<Harness.ShellExecSpec, Seam.ShellExecSpec>,
  BothWays<Harness.ShellExecutor, Seam.ShellExecutor>,
  BothWays<typeof Harness.ShellExecutor, typeof Seam.ShellExecutor>,
  Assignable<NativeShellPlugin, Harness.ShellExecutor>,
  BothWays<Harness.ShellRunResult, Native.ShellRunResult>,
  Assignable<Native.ShellProcess, Harness.ShellProcess>,
]

// Beyond dsh-shell's names.
export type Checks = [
  // A policy the harness built (a branded sessionId) is ours; ours may also carry `network`.
  Assignable<SeamPolicy, SandboxExecutionPolicy>,
  // Terminal sessions: our handle is the published one (with more), a
  // published terminal spawn spec is a request of ours.
  Assignable<NativeTerminalHandle, SubprocessTerminalHandle>,
  Assignable<SubprocessTerminalSpawnSpec, TerminalRequest>,
  BothWays<TerminalSignal, SubprocessTerminalSignal>,
  BothWays<TerminalForeground, SubprocessTerminalForeground>,
  BothWays<TerminalOutcome, SubprocessOutcome>,
]

/** A published terminal consumer drives our handle as it is. */
export async function terminalSeam(ex: NativeShellExecutor, spec: SubprocessTerminalSpawnSpec): Promise<void> {
  const handle: SubprocessTerminalHandle = await ex.spawnTerminal(spec)
  handle.output.on('data', (chunk: Buffer) => chunk.length)
  await handle.write('echo hi\r')
  const fg = await handle.inspectForeground()
  if (fg?.inputWaiting) await handle.signalForeground('SIGINT')
  await handle.terminate()
  const outcome: SubprocessOutcome = await handle.done
  void outcome
}

export async function bothWays(seam: ShellExecutor, harnessSpec: SeamSpec, harnessRequest: SeamRequest): Promise<void> {
  const ex = new NativeShellExecutor({ cwd: '/tmp', timeoutMs: 1000 })

  // A spec the harness built (no owner, a branded sessionId): run and start take it as it is,
  const result: SeamRunResult = await ex.run(harnessSpec)
  const proc: SeamProcess = ex.start(harnessSpec)
  const read: SeamRead = proc.readOutput()
  void [result, read]

  // and what our resolve() makes from a harness request goes to the harness's executor.
  const ours = ex.resolve(harnessRequest)
  const theirs: SeamRunResult = await seam.run(ours)
  const back: ShellRunResult = theirs
  void back

  // Optional result fields are optional, not `| undefined`.
  const r: ShellRunResult = await ex.run(ours)
  if (r.sandbox !== undefined) {
    const mode: SeamSandboxInfo['mode'] = r.sandbox.mode
    void mode
  }

  // A pipe for stdin and the timeout hand-over (native extras).
  const piped = ex.resolve({ command: 'cat', stdin: { pipe: true }, onExpiry: 'background', timeoutMs: 100 })
  const handed: ShellRunResult = await ex.run(piped)
  if (handed.backgroundId !== undefined) {
    const p: NativeShellProcess | undefined = ex.get(handed.backgroundId)
    if (p?.hasStdinPipe) {
      await p.writeStdin('text')
      await p.writeStdin(Buffer.from('bytes'))
      await p.writeStdin(new Uint8Array([1, 2]))
      const closed: boolean = p.closeStdin()
      void closed
    }
  }

  // The deprecated alias is the same class.
  const old: NativeShellExecutor = new NativeBashExecutor()
  await old.dispose()
  await ex.dispose()
}

// The plugin is a ShellExecutor; its config takes the published executor's fields.
export const asService: typeof ShellExecutor = NativeShellPlugin
export const config: Config = { cwd: '/w', timeoutMs: 120_000, maxTimeoutMs: 600_000, maxOutputBytes: 64_000, maxSpillBytes: 1 << 26, graceMs: 3_000 }

// Mistakes that must not compile.
export function mistakes(ex: NativeShellExecutor, harnessSpec: SeamSpec): void {
  // @ts-expect-error a misspelt key is refused at compile time as at run time
  ex.resolve({ command: 'x', timeout_ms: 5 })
  // @ts-expect-error a Buffer stdin gives a spec the harness's executor cannot take
  const buffered: SeamSpec = ex.resolve({ command: 'x', stdin: Buffer.from('x') })
  // @ts-expect-error a request is not a spec
  void ex.start({ command: 'x' })
  // @ts-expect-error `sandbox` is optional: absent, never present with the value undefined
  const withUndefined: ShellRunResult = { ...({} as ShellRunResult), sandbox: undefined }
  const text: SeamSpec = ex.resolve({ command: 'x', stdin: 'text', sandboxPolicy: harnessSpec.sandboxPolicy })
  // @ts-expect-error a stdin pipe gives a spec the harness's executor cannot take
  const piped: SeamSpec = ex.resolve({ command: 'x', stdin: { pipe: true } })
  // @ts-expect-error onExpiry is 'kill' or 'background'
  ex.resolve({ command: 'x', onExpiry: 'later' })
  void [buffered, withUndefined, text, piped]
}

// dsh-native/subprocess is the seam's SubprocessRuntime: a composition that
// loads it in place of the published provider type-checks unchanged.
import NativeSubprocessRuntime from 'dsh-native/subprocess'
import type { SubprocessHandle, SubprocessRuntime, SubprocessSpawnSpec } from '@deepseek-ai/dsh-subprocess'
declare const nativeSubprocess: NativeSubprocessRuntime
export const subprocessAsSeam: SubprocessRuntime = nativeSubprocess
export const spawnedAsSeam = (spec: SubprocessSpawnSpec): SubprocessHandle => nativeSubprocess.spawn(spec)

// dsh-native/remote: the same API over the protocol; its process is the
// seam's ShellProcess, its executor has the seam's methods and every member
// of NativeShellExecutor, and its process every member of NativeShellProcess.
import type { RemoteShellExecutor, RemoteShellProcess, RemoteTerminalHandle } from '../../bindings-node/remote.mjs'
export type RemoteNames = [
  Assignable<RemoteTerminalHandle, SubprocessTerminalHandle>,
  BothWays<keyof RemoteTerminalHandle, keyof NativeTerminalHandle>,
  Assignable<RemoteShellProcess, Seam.ShellProcess>,
  BothWays<SeamPart<ReadOf<RemoteShellProcess>, ReadOf<Seam.ShellProcess>>, ReadOf<Seam.ShellProcess>>,
  Assignable<Pick<RemoteShellExecutor, ExecutorMethods>, Pick<Seam.ShellExecutor, ExecutorMethods>>,
  BothWays<keyof RemoteShellExecutor, keyof NativeShellExecutor>,
  BothWays<keyof RemoteShellProcess, keyof NativeShellProcess>,
]
