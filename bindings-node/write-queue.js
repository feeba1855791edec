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
  /** A write failed so that those queued behind it must not be sent. */
  #lost = false
  #losesQueue
  #refusal

  /**
   * `losesQueue(err)`: whether a write that failed with `err` means the
   * writes queued behind it must not be sent (a write lost with a
   * connection: they would arrive out of order); each of those rejects
   * with a fresh `refusal()` instead. Writes made once the queue has
   * emptied are sent again.
   */
  constructor({ losesQueue = () => false, refusal = () => new Error('not sent') } = {}) {
    this.#losesQueue = losesQueue
    this.#refusal = refusal
  }

  /** Nothing is queued or being written. */
  get idle() {
    return this.#queued === 0
  }

  /** Runs `write` (a function returning a promise) in its turn; settles as it does. */
  add(write) {
    // In a `then` below, a refusal that throws rejects only its own write.
    const inTurn = () => (this.#lost ? Promise.reject(this.#refusal()) : write())
    const written = this.#queued === 0 ? inTurn() : this.#tail.then(inTurn)
    this.#queued++
    this.#tail = written
      .catch((err) => {
        // Never rejects: the tail is what every later write waits on.
        try {
          if (this.#losesQueue(err)) this.#lost = true
        } catch {}
      })
      .finally(() => {
        if (--this.#queued === 0) this.#lost = false
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
