//! The `nextOutput` readers of a terminal whose session runs on the JS
//! thread's own loop (foreground.rs): a reader waiting for output is
//! settled in the turn that read it, with no hand-off through a core
//! thread (a keystroke's echo wakes the JS thread once, as node-pty's
//! does). Output a core thread read (a reader made room in a full
//! buffer) asks for a turn through the terminal's output news.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::Env;

use crate::lock;
use crate::settle::{self, Settle};

pub(crate) struct TerminalReaders {
    terminal: dsh_core::Terminal,
    /// Readers waiting for output, in the order they asked.
    waiting: Mutex<VecDeque<Settle>>,
}

/// What one reader is given: the output since the last read, or `None`
/// once it has ended and everything was read.
type Next = Option<String>;

impl TerminalReaders {
    pub(crate) fn new(terminal: dsh_core::Terminal) -> Arc<TerminalReaders> {
        Arc::new(TerminalReaders {
            terminal,
            waiting: Mutex::new(VecDeque::new()),
        })
    }

    /// A `nextOutput` promise: settled now when output waits (or has
    /// ended) and nobody asked before, else by the turn that reads it.
    pub(crate) fn next<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        let (settle, promise) = settle::promise(env)?;
        let mut waiting = lock(&self.waiting);
        if waiting.is_empty() {
            if let Some(next) = self.take() {
                drop(waiting);
                settle.resolve_here(*env, Ok(next));
                return Ok(promise);
            }
        }
        waiting.push_back(settle);
        Ok(promise)
    }

    /// Settles, on `env`'s thread after a turn, the waiting readers in the
    /// order they asked: each the output there is then, and all that are
    /// left once it has ended; `None` when there is nothing to settle.
    pub(crate) fn deliver(&self) -> Option<Box<dyn FnOnce(Env)>> {
        let mut waiting = lock(&self.waiting);
        let mut settled: Vec<(Settle, Next)> = Vec::new();
        while !waiting.is_empty() {
            let Some(next) = self.take() else { break };
            match next {
                Some(text) => settled.extend(waiting.pop_front().map(|s| (s, Some(text)))),
                None => {
                    settled.extend(waiting.drain(..).map(|s| (s, None)));
                    break;
                }
            }
        }
        if settled.is_empty() {
            return None;
        }
        Some(Box::new(move |env: Env| {
            for (settle, next) in settled {
                settle.resolve_here(env, Ok(next));
            }
        }))
    }

    /// The output there is to give one reader, if any.
    fn take(&self) -> Option<Next> {
        let read = self.terminal.read_output();
        if !read.text.is_empty() {
            Some(Some(read.text))
        } else if read.ended {
            Some(None)
        } else {
            None
        }
    }
}
