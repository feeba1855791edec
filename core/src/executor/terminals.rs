//! Terminal sessions started by the executor (docs/terminals.md).

use std::time::Duration;

use crate::confine;
use crate::host::callbacks;
use crate::host::runtime;
use crate::launch::env::HostEnv;
use crate::launch::pty;
use crate::launch::{launch_terminal, spawn_error};
use crate::spec::error::Result;
use crate::spec::terminal::{resolve_terminal, TerminalRequest, TerminalSpec};
use crate::terminal::session::{self, SessionParts};
use crate::terminal::{Terminal, TerminalTask};

use super::host_loop::{HostLoop, HostRun};

use super::Executor;

impl Executor {
    /// Terminal request → spec (docs/terminals.md); the only place its
    /// defaults are applied.
    pub fn resolve_terminal(&self, request: TerminalRequest) -> Result<TerminalSpec> {
        resolve_terminal(&self.shared().config(), request)
    }

    /// Starts a terminal session (docs/terminals.md): the program leads a
    /// new session whose controlling terminal is a fresh pseudo-terminal,
    /// started by the executor's supervisor like every command (the host
    /// never forks). Returns once it has started; its handle reads, writes,
    /// resizes, inspects and signals it, and `terminate()` ends the whole
    /// session. Dispose ends it too.
    pub fn spawn_terminal(&self, spec: &TerminalSpec) -> Result<Terminal> {
        let (terminal, task) = self.spawn_terminal_task_in(spec, HostEnv::capture())?;
        task.start();
        Ok(terminal)
    }

    /// [`Executor::spawn_terminal`] for hosts with their own event loop: the
    /// environment is taken now, the spawn happens on the core's threads,
    /// and `on_done` gets the outcome on the callback thread.
    pub fn spawn_terminal_with(
        &self,
        spec: &TerminalSpec,
        on_done: impl FnOnce(Result<Terminal>) + Send + 'static,
    ) {
        let (this, spec, env) = (self.clone(), spec.clone(), HostEnv::capture());
        runtime::handle().spawn_blocking(move || {
            let outcome = this.spawn_terminal_task_in(&spec, env).map(|(terminal, task)| {
                task.start();
                terminal
            });
            callbacks::dispatch(move || on_done(outcome));
        });
    }

    /// [`Executor::spawn_terminal`] whose session's task is the caller's
    /// to start, at once: on a host's own loop
    /// ([`TerminalTask::on_host_loop`]), or on the core's threads
    /// ([`TerminalTask::start`], or by dropping it). Until it starts,
    /// nothing reads the terminal, hears of the program's exit, or answers
    /// a stop or dispose.
    pub fn spawn_terminal_task(&self, spec: &TerminalSpec) -> Result<(Terminal, TerminalTask)> {
        self.spawn_terminal_task_in(spec, HostEnv::capture())
    }

    fn spawn_terminal_task_in(
        &self,
        spec: &TerminalSpec,
        host_env: HostEnv,
    ) -> Result<(Terminal, TerminalTask)> {
        let shared = self.shared();
        let active = shared.admit(|_| spec.check(), None)?;
        confine::check(spec.sandbox_policy.as_ref())?;
        let tag = shared.next_tag();
        let os_error = |e: std::io::Error| spawn_error(e, &spec.cwd);
        let pty = pty::open(spec.rows, spec.cols).map_err(os_error)?;
        crate::sys::set_nonblocking(&pty.master).map_err(os_error)?;
        let control = pty.master.try_clone().map_err(os_error)?;
        let (pid, launched, live) = launch_terminal(spec, host_env, &tag, &shared.supervisors, &pty)?;
        let pty::Pty { master, rdev, .. } = pty; // the slave is closed here
        let disposing = {
            let shared = shared.clone();
            async move { shared.disposing().await }
        };
        Ok(session::prepare(
            SessionParts {
                pid,
                report: launched.report,
                releaser: launched.releaser,
                master,
                control,
                rdev,
                tag,
                grace: Duration::from_millis(spec.grace_ms),
                max_output_bytes: shared.config().max_output_bytes,
                live,
            },
            disposing,
            active,
        ))
    }
}

impl TerminalTask {
    /// Starts the session's task on `host`'s loop: the host's thread reads
    /// and writes the terminal when [`HostLoop::fd`] says it is ready, and
    /// polls the returned [`HostRun`] until the session has ended (its
    /// output ended, its leader released). Timers, stops and queued writes
    /// are answered by a core thread at once, as for a run on the host's
    /// loop; output such a thread reads is announced through
    /// [`Terminal::set_output_news`]. Where the loop refuses the
    /// descriptors, the task runs on the core's threads and the `HostRun`
    /// only waits for its end. A `HostRun` dropped before the end stops the
    /// session (as `terminate` does) and waits for it.
    pub fn on_host_loop(mut self, host: &HostLoop) -> HostRun<()> {
        let run = self.run.take().expect("a task is started once");
        let master = self.fds[0];
        let watch = host.writable_watch(master);
        let _ = self
            .wants_writable
            .set(Box::new(move |writable| watch.wants(writable)));
        let session = async move {
            run.await;
            Ok(())
        };
        HostRun::watching(host, true, &self.fds, session, self.on_drop.clone())
    }
}
