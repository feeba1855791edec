//! The executor: foreground runs, background starts (docs/running.md), the
//! registry of what it started, completion listeners, and dispose
//! (docs/registry.md).

mod background;
pub(crate) mod foreground;
pub(crate) mod host_loop;
pub(crate) mod process;
pub(crate) mod run;
pub(crate) mod spawned;
mod terminals;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::confine::governor;
use crate::executor::process::{Process, ProcessRead};
use crate::host::callbacks;
use crate::host::cancel::CancelToken;
use crate::host::forked::current_pid;
use crate::host::runtime;
use crate::launch::ending::ExitFields;
use crate::launch::supervisor::Slot;
use crate::launch::sweeper::sweep_counted;
use crate::launch::tree::{Spare, TagMatch};
use crate::spec::config::{path_field, Config, ConfigInput};
use crate::spec::error::{DshError, Field, FieldName, Result, Scope};
use crate::spec::request::{resolve, Request, Spec};
use crate::spec::sandbox::SandboxMode;
use crate::sys::lock;
use crate::watch::escalation::kill_after;
use crate::watch::output::StreamBuffer;
use crate::watch::spill::{random_hex, SpillDir};
use crate::watch::supervise::{Stop, Streams};
use std::path::Path;

/// Identifies a task-done listener for [`Executor::off_task_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(u64);

impl ListenerId {
    /// The raw value, for faces that hand ids across a language boundary.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id whose [`ListenerId::as_u64`] is `raw`.
    pub fn from_u64(raw: u64) -> Self {
        ListenerId(raw)
    }
}

/// A task-done listener: called on the callback thread with each background
/// process that settles (see [`Executor::on_task_done`]).
pub type TaskListener = Arc<dyn Fn(&Process) + Send + Sync>;

/// A registered listener. A delivery takes the listeners registered when
/// the process settles, and calls each only while it is still registered:
/// one removed while deliveries wait in the callback queue is not called
/// by them (at most a call already under way finishes).
struct Registered {
    id: ListenerId,
    removed: std::sync::atomic::AtomicBool,
    call: TaskListener,
}

impl Registered {
    fn call_unless_removed(&self, process: &Process) {
        if !self.removed.load(Ordering::Acquire) {
            (self.call)(process)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Open,
    Disposing,
    Disposed,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    in_order: Vec<Process>,
    by_id: HashMap<String, Process>,
    /// Ids held for processes that will register under them
    /// (`start_as`, `run_as`).
    reserved: std::collections::HashSet<String>,
}

struct ExecutorInner {
    /// The host process that created the executor. In a forked child the
    /// executor is inert: its commands and spill files are the parent's.
    host_pid: libc::pid_t,
    /// Swapped whole by `reconfigure`; each operation reads one snapshot, so
    /// a command keeps the limits it started with.
    config: RwLock<Arc<Config>>,
    spill: Arc<SpillDir>,
    /// Every command's `DSH_EXEC_TAG` starts with this, so dispose can find
    /// all of this executor's descendants in one `/proc` sweep.
    tag_prefix: String,
    seq: AtomicU64,
    registry: Mutex<Registry>,
    /// Held while a background process settles with its retention passes:
    /// two settling at once would each make room for one and leave one
    /// settled process too many until their second pass.
    settling: Mutex<()>,
    listeners: Mutex<Vec<Arc<Registered>>>,
    next_listener: AtomicU64,
    lifecycle: watch::Sender<Lifecycle>,
    active_runs: watch::Sender<usize>,
    /// Listener deliveries queued or running; dispose waits for none.
    pending_notifications: watch::Sender<usize>,
    /// The parent of every command (`supervisor.rs`), started with the
    /// first one and shut down by dispose.
    supervisors: Slot,
}

/// Disposes the executor (in the background) when the last handle goes.
struct Owner {
    shared: Arc<ExecutorInner>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.shared.is_here() && *self.shared.lifecycle.borrow() == Lifecycle::Open {
            let shared = self.shared.clone();
            runtime::handle().spawn(async move { shared.dispose().await });
        }
    }
}

/// A bash executor. Cloning shares it; when the last clone is dropped
/// without `dispose`, disposal runs in the background.
#[derive(Clone)]
pub struct Executor {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("config", &self.shared().config())
            .finish()
    }
}

/// Counts a foreground run for `dispose` to wait on.
struct ActiveRun(Arc<ExecutorInner>);

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.0.active_runs.send_modify(|n| *n -= 1);
    }
}

impl ExecutorInner {
    fn is_open(&self) -> bool {
        *self.lifecycle.borrow() == Lifecycle::Open
    }

    /// False in a forked child of the host that created the executor.
    fn is_here(&self) -> bool {
        self.host_pid == current_pid()
    }

    fn check_here(&self) -> Result<()> {
        crate::host::forked::check_host(self.host_pid)
    }

    /// Admission, the one path for a run, a start and a terminal session:
    /// the executor is this process's (not a forked copy's) and open, the
    /// spec passes `check`, and the caller's token has not fired. The
    /// command counts for `dispose` until the guard is dropped (a start
    /// hands over to the registry, which dispose waits on too).
    fn admit(
        self: &Arc<Self>,
        check: impl FnOnce(&Config) -> Result<()>,
        cancel: Option<&CancelToken>,
    ) -> Result<ActiveRun> {
        self.active_runs.send_modify(|n| *n += 1);
        let active = ActiveRun(self.clone());
        self.check_here()?;
        if !self.is_open() {
            return Err(DshError::Disposed);
        }
        check(&self.config())?;
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(DshError::AlreadyCancelled);
        }
        Ok(active)
    }

    fn next_tag(&self) -> String {
        format!("{}.{}", self.tag_prefix, self.seq.fetch_add(1, Ordering::Relaxed))
    }

    fn config(&self) -> Arc<Config> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn streams(&self, stdout_cap: u64) -> Mutex<Streams> {
        let c = self.config();
        Mutex::new(Streams {
            stdout: StreamBuffer::new(stdout_cap, Some(c.max_spill_bytes), self.spill.clone(), "stdout"),
            stderr: StreamBuffer::new(
                c.max_output_bytes,
                Some(c.max_spill_bytes),
                self.spill.clone(),
                "stderr",
            ),
            tap: None,
            valve: None,
        })
    }

    fn grace(&self) -> Duration {
        Duration::from_millis(self.config().grace_ms)
    }

    async fn disposing(&self) {
        let mut rx = self.lifecycle.subscribe();
        let _ = rx.wait_for(|l| *l != Lifecycle::Open).await;
    }

    async fn dispose(self: Arc<Self>) {
        let first = self.lifecycle.send_if_modified(|l| {
            if *l == Lifecycle::Open {
                *l = Lifecycle::Disposing;
                true
            } else {
                false
            }
        });
        if !first {
            let mut rx = self.lifecycle.subscribe();
            let _ = rx.wait_for(|l| *l == Lifecycle::Disposed).await;
            return;
        }
        lock(&self.listeners).clear();
        let processes: Vec<Process> = lock(&self.registry).in_order.clone();
        for p in &processes {
            p.request_stop(Stop::Dispose);
        }
        // Descendants that left their groups, and daemons of commands that
        // already ended: one sweep for the whole executor, with escalation.
        let all = TagMatch::executor(&self.tag_prefix).under(self.supervisors.pid());
        // Each running command signals its own group on the stop above.
        let spare_groups = all.clone().sparing(Spare::CommandGroups);
        let term_hit = sweep_counted(spare_groups, libc::SIGTERM).await.total > 0;
        for p in &processes {
            p.wait().await;
        }
        let mut rx = self.active_runs.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        let mut rx = self.pending_notifications.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        if term_hit || sweep_counted(all.clone(), 0).await.total > 0 {
            kill_after(all, tokio::time::Instant::now() + self.grace()).await;
        }
        // Whatever is left of the supervisor's subtree dies with it.
        self.supervisors.shutdown().await;
        // Groups a dead supervisor could not remove (emptied by the sweeps).
        governor::remove_leftovers();
        self.spill.remove();
        self.lifecycle.send_replace(Lifecycle::Disposed);
    }
}

impl Executor {
    /// Validates `input` (docs/configuration.md); a bad field is an error
    /// naming it.
    pub fn new(input: ConfigInput) -> Result<Executor> {
        let config = Config::new(input)?;
        // /proc as it is now, before any command could cover it.
        crate::sys::proc::keep();
        let shared = Arc::new(ExecutorInner {
            host_pid: current_pid(),
            spill: Arc::new(SpillDir::new(config.spill_dir.clone())),
            config: RwLock::new(Arc::new(config)),
            tag_prefix: random_hex().map_err(DshError::Internal)?,
            seq: AtomicU64::new(1),
            registry: Mutex::new(Registry::default()),
            settling: Mutex::new(()),
            listeners: Mutex::new(Vec::new()),
            next_listener: AtomicU64::new(1),
            lifecycle: watch::channel(Lifecycle::Open).0,
            active_runs: watch::channel(0).0,
            pending_notifications: watch::channel(0).0,
            supervisors: Slot::default(),
        });
        Ok(Executor {
            owner: Arc::new(Owner { shared }),
        })
    }

    fn shared(&self) -> &Arc<ExecutorInner> {
        &self.owner.shared
    }

    /// The configuration new commands get (see [`Executor::reconfigure`]).
    pub fn config(&self) -> Arc<Config> {
        self.shared().config()
    }

    /// Replaces the configuration for everything resolved or started from
    /// now on; running commands keep the limits they started with. Hosts
    /// whose settings change at run time call this instead of making a new
    /// executor, so background processes stay owned by one executor. The
    /// spill directory is the one fixed field: spill files already written
    /// live there until the executor is disposed. Left out, it stays as it
    /// is; given, it must name the same directory.
    pub fn reconfigure(&self, input: ConfigInput) -> Result<()> {
        let shared = self.shared();
        shared.check_here()?;
        if !shared.is_open() {
            return Err(DshError::Disposed);
        }
        let mut current = shared.config.write().unwrap_or_else(|p| p.into_inner());
        // Compared as a path before `Config::new`, which would make a
        // missing directory: a refused change leaves nothing behind.
        let mut input = input;
        if let Some(dir) = input.spill_dir.take() {
            let field = Field::new(Scope::Config, FieldName::SpillDir);
            if path_field(field, Path::new(&dir))? != current.spill_dir {
                return Err(DshError::invalid(
                    field,
                    format!(
                        "cannot change after the executor is made (it is {})",
                        current.spill_dir.display()
                    ),
                ));
            }
        }
        let mut next = Config::new(input)?;
        next.spill_dir = current.spill_dir.clone();
        *current = Arc::new(next);
        Ok(())
    }

    /// The pid of the executor's supervisor (`docs/host-death.md`), while
    /// one runs: the parent of its commands, and the owner of their cgroups
    /// (`dsh.<this pid>.<n>`, docs/limits.md). For diagnostics and tests.
    pub fn supervisor_pid(&self) -> Option<i32> {
        self.shared().supervisors.pid()
    }

    /// The default sandbox mode this executor stamps (`None`: it does not
    /// confine unless a spec asks).
    pub fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.shared().config().sandbox_mode
    }

    /// Request → spec (docs/requests.md); the only place defaults are applied.
    pub fn resolve(&self, request: Request) -> Result<Spec> {
        resolve(&self.shared().config(), request)
    }

    /// The private spill directory, once a spill has created it.
    pub fn spill_dir(&self) -> Option<std::path::PathBuf> {
        self.shared().spill.path()
    }

    /// The process registered under `id`, if any.
    pub fn get(&self, id: &str) -> Option<Process> {
        lock(&self.shared().registry).by_id.get(id).cloned()
    }

    fn known(&self, id: &str) -> Result<Process> {
        self.get(id).ok_or_else(|| DshError::NotFound(id.to_owned()))
    }

    /// The owner token stored at `start` (never interpreted).
    pub fn owner_of(&self, id: &str) -> Result<Option<String>> {
        Ok(self.known(id)?.owner().map(str::to_owned))
    }

    /// Every process started, in start order.
    pub fn list(&self) -> Vec<Process> {
        lock(&self.shared().registry).in_order.clone()
    }

    /// [`Process::read_output`] of the process registered under `id`;
    /// [`DshError::NotFound`] for an unknown id.
    pub fn read_output(&self, id: &str) -> Result<ProcessRead> {
        Ok(self.known(id)?.read_output())
    }

    /// [`Process::kill`] of the process registered under `id`;
    /// [`DshError::NotFound`] for an unknown id.
    pub fn kill(&self, id: &str) -> Result<bool> {
        Ok(self.known(id)?.kill())
    }

    /// Removes a settled process from the registry and deletes its spill
    /// files and buffered output; its id is then unknown. Handles to it
    /// still answer status questions. A running process is
    /// [`DshError::StillRunning`]; an unknown id is [`DshError::NotFound`].
    /// In a forked child it is [`DshError::ForkedChild`]: the files are
    /// the parent's.
    pub fn forget(&self, id: &str) -> Result<()> {
        self.shared().check_here()?;
        let process = {
            let mut reg = lock(&self.shared().registry);
            let process = reg
                .by_id
                .get(id)
                .cloned()
                .ok_or_else(|| DshError::NotFound(id.to_owned()))?;
            if !process.is_settled() {
                return Err(DshError::StillRunning(id.to_owned()));
            }
            reg.by_id.remove(id);
            reg.in_order.retain(|p| p.id() != id);
            process
        };
        process.discard_output();
        Ok(())
    }

    /// Calls `listener` once for each background process that settles from
    /// now on, until removed or the executor is disposed. A panicking
    /// listener is contained and the others still run. A listener that
    /// holds this executor keeps it alive until `dispose` (which drops every
    /// listener) or `off_task_done`.
    pub fn on_task_done(&self, listener: TaskListener) -> ListenerId {
        let shared = self.shared();
        let id = ListenerId(shared.next_listener.fetch_add(1, Ordering::Relaxed));
        if shared.is_open() {
            lock(&shared.listeners).push(Arc::new(Registered {
                id,
                removed: false.into(),
                call: listener,
            }));
        }
        id
    }

    /// Removes a listener; false if it was not registered. No delivery
    /// calls it afterwards, except one already calling it on the callback
    /// thread (which may be this call's own thread).
    pub fn off_task_done(&self, id: ListenerId) -> bool {
        let mut listeners = lock(&self.shared().listeners);
        let Some(at) = listeners.iter().position(|l| l.id == id) else {
            return false;
        };
        listeners.remove(at).removed.store(true, Ordering::Release);
        true
    }

    /// True once disposal has begun (or this is a forked child's copy that
    /// was disposed).
    pub fn is_disposed(&self) -> bool {
        !self.shared().is_open()
    }

    /// Kills every running process (with the escalation), waits until all
    /// have exited, and removes the spill directory. Idempotent; afterwards
    /// `run` and `start` fail with [`DshError::Disposed`]. In a forked child
    /// it only closes this copy: the commands and spill files are the
    /// parent's, and the parent's executor still owns them.
    pub async fn dispose(&self) {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            return;
        }
        // On the core's runtime, whatever runtime awaits this.
        let _ = runtime::handle().spawn(shared.dispose()).await;
    }

    /// [`Executor::dispose`] for hosts with their own event loop: returns at
    /// once and calls `on_done` on the callback thread when disposal is
    /// complete.
    pub fn start_dispose(&self, on_done: impl FnOnce() + Send + 'static) {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            callbacks::dispatch(on_done);
            return;
        }
        runtime::handle().spawn(async move {
            shared.dispose().await;
            callbacks::dispatch(on_done);
        });
    }

    /// [`Executor::dispose`] for threads that are not in an async runtime:
    /// blocks until disposal is complete. Refused
    /// ([`DshError::BlockingInAsync`]) inside a callback or a runtime.
    pub fn dispose_blocking(&self) -> Result<()> {
        let shared = self.shared().clone();
        if !shared.is_here() {
            shared.lifecycle.send_replace(Lifecycle::Disposed);
            return Ok(());
        }
        runtime::block_on(shared.dispose())
    }
}

/// The governor's facts on an ending: which limit ended the command (the
/// one the executor stopped it for, else the kernel's counters and the
/// leader's death signal when it ended by itself; never after a timeout or
/// a cancellation), how each limit was enforced; then the command's groups
/// are removed.
fn governed(
    mut ending: ExitFields,
    limits: &crate::spec::limits::Limits,
    stop: Option<Stop>,
    status: crate::launch::ending::ExitStatus,
    group: Option<crate::confine::governor::CommandGroup>,
    leader_cpu: Option<Duration>,
) -> ExitFields {
    let signal = match status {
        crate::launch::ending::ExitStatus::Signal(s) => Some(s),
        _ => None,
    };
    ending.limit = match stop {
        Some(Stop::Limit(kind)) => Some(kind),
        None => crate::confine::cause::cause(limits, group.as_ref(), signal, leader_cpu),
        Some(_) => None,
    };
    ending.limits_enforcement = governor::check(limits).unwrap_or_default();
    if let Some(g) = group {
        g.remove();
    }
    ending
}
