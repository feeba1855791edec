// Values flow both ways between dsh-native and the harness's PUBLISHED seam
// types (installed from the npm registry as devDependencies), under `strict`
// and `exactOptionalPropertyTypes`. Compiled by `npm run typecheck`; a
// mismatch is a compile error.

import type {
  CollectedOutput as SeamCollectedOutput,
  DshEnvironment as SeamDshEnvironment,
  ShellExecRequest as SeamRequest,
  ShellExecSpec as SeamSpec,
  ShellExecutor,
  ShellProcess as SeamProcess,
  ShellProcessRead as SeamRead,
  ShellProcessStatus as SeamStatus,
  ShellRunResult as SeamRunResult,
  ShellSandboxInfo as SeamSandboxInfo,
} from '@deepseek-ai/dsh-shell'
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
  type CollectedOutput,
  type DshEnvironment,
  type NativeShellProcess,
  type NativeTerminalHandle,
  type TerminalForeground,
  type TerminalOutcome,
  type TerminalRequest,
  type TerminalSignal,
  type SandboxExecutionPolicy,
  type ShellExecRequest,
  type ShellExecSpec,
  type ShellProcessRead,
  type ShellProcessStatus,
  type ShellRunResult,
  type ShellSandboxInfo,
} from 'dsh-native'
import NativeShellPlugin, { type Config } from 'dsh-native/harness'

/** Compiles only when `A` is assignable to `B`. */
type Assignable<A extends B, B> = A
/** Compiles only when each is assignable to the other. */
type BothWays<A extends B, B extends C, C = A> = [A, B, C]

// The vocabulary, both ways.
export type Checks = [
  BothWays<DshEnvironment, SeamDshEnvironment>,
  BothWays<CollectedOutput, SeamCollectedOutput>,
  BothWays<ShellSandboxInfo, SeamSandboxInfo>,
  BothWays<ShellProcessStatus, SeamStatus>,
  // Our extra result fields are optional, so theirs are ours and ours are theirs.
  BothWays<ShellRunResult, SeamRunResult>,
  // A read carries `task` in addition; the harness's read has no such field.
  Assignable<ShellProcessRead, SeamRead>,
  Assignable<NativeShellProcess, SeamProcess>,
  // A spec the harness built (no owner, a branded sessionId) is ours...
  Assignable<SeamSpec, ShellExecSpec>,
  Assignable<SeamRequest, ShellExecRequest>,
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

  // ...run and start take it as it is,
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
