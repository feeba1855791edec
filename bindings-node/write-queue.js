'use strict'
// Ordered writes, for a process's stdin (index.js, remote/process.mjs) and
// a remote terminal's input (remote/terminal.mjs): one rule, kept here.

/** The largest piece of a write handed on at once (to the core, or in one message). */
const WRITE_PIECE = 1 << 20

/**
 * Writes handed on one after another, in call order, so the pieces of one
 * write are never interleaved with another's. With nothing queued a write
 * starts at once, so a write and the call after it (a close) reach the
 * other side in that order.
 */
class WriteQueue {
  #tail = Promise.resolve()
  #queued = 0
  #refusal
  #refuseBehind

  /**
   * `refuseBehind(err)`: for a write that failed with `err`, the error each
   * write queued behind it rejects with instead of being sent, or
   * undefined to send them as usual. (A write lost with a connection: those
   * behind it would arrive out of order.) Writes made once the queue has
   * emptied are sent again.
   */
  constructor(refuseBehind = () => undefined) {
    this.#refuseBehind = refuseBehind
  }

  /** Nothing is queued or being written. */
  get idle() {
    return this.#queued === 0
  }

  /** Runs `write` (a function returning a promise) in its turn; settles as it does. */
  add(write) {
    const inTurn = () => (this.#refusal === undefined ? write() : Promise.reject(this.#refusal))
    const written = this.#queued === 0 ? inTurn() : this.#tail.then(inTurn)
    this.#queued++
    this.#tail = written
      .catch((err) => {
        this.#refusal ??= this.#refuseBehind(err)
      })
      .finally(() => {
        if (--this.#queued === 0) this.#refusal = undefined
      })
    return written
  }

  /**
   * Queues `bytes` as one write, handed to `send` in pieces of at most
   * WRITE_PIECE bytes, each once the one before was taken (a pending write
   * never holds a second copy of the caller's data).
   */
  addBytes(bytes, send) {
    if (bytes.length <= WRITE_PIECE) return this.add(() => send(bytes))
    return this.add(async () => {
      for (let at = 0; at < bytes.length; at += WRITE_PIECE) await send(bytes.subarray(at, at + WRITE_PIECE))
    })
  }
}

module.exports = { WriteQueue, WRITE_PIECE }
