// The terminal seam's published shell backend on our ctx.subprocess: a
// cordis composition of dsh-agent (ctx.agents), dsh-terminal
// (ctx.terminals), dsh-sandbox-policy, a pass-through ctx.sandbox and
// dsh-terminal-bash, whose persistent bash sessions are terminals spawned
// by dsh-native/subprocess (spawnTerminal) where dsh-subprocess-local would
// be. What an agent's terminal tool relies on: state kept between sends,
// the secrets scrub, signals to the foreground, and a kill that leaves
// nothing behind.

import test, { after, before } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

import { seam } from './seam.mjs'

const { alive, eventually } = createRequire(import.meta.url)('./helpers.js')

// The harness's terminal packages need Node 22 (`Promise.withResolvers`);
// dsh-native itself does not, so the test supplies it on older Nodes.
Promise.withResolvers ??= () => {
  let resolve
  let reject
  const promise = new Promise((a, b) => {
    resolve = a
    reject = b
  })
  return { promise, resolve, reject }
}

const { Context } = await seam('@deepseek-ai/cordis')
const { Session, SessionId } = await seam('@deepseek-ai/dsh-session')
const { default: AgentRegistry, Inbox } = await seam('@deepseek-ai/dsh-agent')
const { default: TerminalSessionService } = await seam('@deepseek-ai/dsh-terminal')
const { default: SandboxProvider } = await seam('@deepseek-ai/dsh-sandbox')
const { default: SandboxPolicyService } = await seam('@deepseek-ai/dsh-sandbox-policy')
const TerminalBash = await seam('@deepseek-ai/dsh-terminal-bash')
const { default: NativeSubprocessRuntime } = await import(
  new URL('../../bindings-node/subprocess.mjs', import.meta.url).href
)

/** A sandbox that confines nothing: the commands here are the test's own. */
class UnconfinedSandbox extends SandboxProvider {
  confine(argv) {
    return { argv: [...argv], enforcement: 'full', denialSignatures: [], runnerFailureRules: [] }
  }
}

/** The least an agent is for the terminal service: an id, a session, a scope. */
function agentIn(ctx, name) {
  const id = SessionId(name)
  const session = Session.create(id)
  const quiet = { inserted() {}, discarded() {}, claimed() {} }
  return {
    id,
    options: {},
    session,
    inbox: new Inbox(session, quiet),
    status: 'idle',
    ctx: ctx.plugin(() => {}).ctx,
    send() {},
    followup() {},
    steer() {},
    inject() {},
    cancel() {},
    runMaintenance: (task) => task(new AbortController().signal),
    whenIdle: () => Promise.resolve(),
  }
}

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-terminal-bash-'))
let root
let agent

before(async () => {
  root = new Context()
  await root.plugin(AgentRegistry)
  await root.plugin(TerminalSessionService)
  await root.plugin(UnconfinedSandbox)
  await root.plugin(SandboxPolicyService, { mode: 'danger-full-access', workspaceRoot: base })
  await root.plugin(NativeSubprocessRuntime)
  await root.plugin(TerminalBash, {
    pollIntervalMs: 10,
    exactProbeAfterMs: 20,
    idleSilenceMs: 400,
    handoffGraceMs: 400,
    timeoutMs: 10_000,
    disposeGraceMs: 500,
  })
  agent = agentIn(root, 'agent-native')
  root.agents.register(agent)
})

after(async () => {
  await root.fiber.dispose()
  fs.rmSync(base, { recursive: true, force: true })
})

/** One line typed at the session's prompt; what the send settled with. */
function send(id, text) {
  return root.terminals.startSend(agent, id, { text, submit: true }).done
}

test('a shell session keeps its cwd and variables between sends, without the host secrets', async () => {
  process.env.DSH_TERMINAL_TEST_TOKEN = 'must-not-leak'
  try {
    const created = await root.terminals.spawn(agent, { type: 'shell', name: 'main', cwd: base })
    assert.match(created.motd, /dsh> /)
    const first = await send(created.sessionId, 'export KEPT=yes; cd /')
    assert.equal(first.waitReason, 'stdin_read')
    const second = await send(
      created.sessionId,
      'printf "at=%s kept=%s token=%s\\n" "$PWD" "$KEPT" "${DSH_TERMINAL_TEST_TOKEN-unset}"',
    )
    assert.match(second.viewport, /at=\/ kept=yes token=unset/)
    const read = root.terminals.read(agent, created.sessionId, { offset: 0, count: 50 })
    assert.match(read.text, /at=\/ kept=yes token=unset/)
    assert.equal(await root.terminals.kill(agent, created.sessionId), true)
    assert.deepEqual(root.terminals.list(agent), [])
  } finally {
    delete process.env.DSH_TERMINAL_TEST_TOKEN
  }
})

test('SIGINT reaches the foreground command, and a kill ends a TERM-ignoring background child', async () => {
  const created = await root.terminals.spawn(agent, { type: 'shell', name: 'signals', cwd: base })
  // The job says when it is the foreground (it is from its fork on); the
  // marker is split in the typed line, so the terminal's echo of it does
  // not count.
  const sleeping = root.terminals.startSend(agent, created.sessionId, {
    text: "sh -c 'echo FORE''GROUND; exec sleep 60'",
    submit: true,
  })
  let seen = ''
  assert.ok(await eventually(() => (seen += sleeping.readOutput().delta).includes('FOREGROUND'), 10000), seen)
  const signalled = await root.terminals.signal(agent, created.sessionId, 'SIGINT')
  assert.equal(signalled.delivered, true)
  const interrupted = await sleeping.done
  assert.ok(['stdin_read', 'inferred_idle'].includes(interrupted.waitReason), interrupted.waitReason)

  const started = await send(created.sessionId, "sh -c 'trap \"\" TERM; sleep 60' & echo CHILD=$!")
  const child = Number(/CHILD=(\d+)/.exec(started.viewport)?.[1])
  assert.ok(child > 0, started.viewport)
  assert.ok(alive(child))
  await root.terminals.kill(agent, created.sessionId)
  const ended = await eventually(() => !alive(child), 5000)
  if (!ended) process.kill(child, 'SIGKILL')
  assert.ok(ended, 'the TERM-ignoring child outlived the killed session')
})
