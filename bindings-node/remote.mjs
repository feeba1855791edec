// dsh-native/remote: the harness's ShellExecutor over the protocol face
// (`dsh serve`: JSON-RPC 2.0, one message per line), so commands run on
// another machine (`ssh host dsh serve --stdio`), in a container
// (`kubectl exec … dsh serve --stdio`) or behind a unix socket, with the
// API of the local NativeShellExecutor.
//
// This file is the entry point; the code is in remote/, one part a file,
// each importing only the ones listed before it:
//
//   constants.mjs   what several parts share: the protocol version, this
//                   client's name, a write's piece size, the handle token
//   wire.mjs        the protocol ↔ local face translation: errors, the
//                   wire shapes of configs, specs and results, and the
//                   arguments checked as index.js checks them
//   connection.mjs  the transport (TransportLink) and the JSON-RPC session
//                   over it (Connection), resumed after a drop
//   process.mjs     RemoteShellProcess, a background process's handle
//   session.mjs     the mirrored registry (StreamMirror, Mirror) and
//                   everything an executor holds (Session)
//   terminal.mjs    terminal sessions (TerminalMirror, RemoteTerminalHandle)
//   executor.mjs    RemoteShellExecutor

export { RemoteShellExecutor } from './remote/executor.mjs'
export { RemoteShellProcess } from './remote/process.mjs'
export { RemoteTerminalHandle } from './remote/terminal.mjs'
