// A real sshd of the tests' own on 127.0.0.1 (keys made here; nothing of
// the system's configuration used), for the tests that cross a real ssh
// connection: the remote executor's, and the parity table's remote side.

import { after } from 'node:test'
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import net from 'node:net'
import path from 'node:path'

const { eventually, tmpdir } = createRequire(import.meta.url)('./helpers.js')

const SSHD = '/usr/sbin/sshd'

/** Why no sshd can run here, or undefined when one can. */
export function sshdMissing() {
  if (!fs.existsSync(SSHD)) return `no ${SSHD} (Debian's openssh-server)`
  for (const tool of ['ssh', 'ssh-keygen']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' })
    } catch {
      return `no ${tool} (Debian's openssh-client)`
    }
  }
  if (process.getuid?.() !== 0) return "sshd's privilege separation needs root here"
  return undefined
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

/** A word for the remote user's shell, quoted so that it stays one word. */
export function shellQuote(word) {
  return `'${String(word).replaceAll("'", "'\\''")}'`
}

/**
 * Starts an sshd for root on 127.0.0.1, stopped when the test file ends.
 * Returns `argv(remote)`: the ssh client's command line running `remote`
 * (one string, as ssh hands it to the remote user's shell).
 */
export async function startSshd() {
  const dir = tmpdir()
  for (const key of ['host', 'client']) execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path.join(dir, key)])
  fs.copyFileSync(path.join(dir, 'client.pub'), path.join(dir, 'authorized_keys'))
  fs.mkdirSync('/run/sshd', { recursive: true })
  const port = await freePort()
  const config = path.join(dir, 'sshd_config')
  fs.writeFileSync(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${dir}/host`,
      `AuthorizedKeysFile ${dir}/authorized_keys`,
      `PidFile ${dir}/sshd.pid`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'LogLevel ERROR',
      '',
    ].join('\n'),
  )
  const server = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'ignore'] })
  const listening = await eventually(
    () =>
      new Promise((resolve) => {
        const c = net.connect(port, '127.0.0.1')
        c.once('connect', () => {
          c.destroy()
          resolve(true)
        })
        c.once('error', () => resolve(false))
      }),
    10_000,
  )
  if (!listening) {
    server.kill('SIGKILL')
    throw new Error('sshd did not listen within 10 s')
  }
  after(() => server.kill('SIGKILL'))
  const argv = (remote) => [
    'ssh', '-p', String(port), '-i', path.join(dir, 'client'),
    '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR',
    'root@127.0.0.1', remote,
  ]
  return { argv }
}
