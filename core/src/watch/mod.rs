pub(crate) mod escalation;
pub(crate) mod limit_events;
pub(crate) mod output;
pub(crate) mod pipes;
pub(crate) mod spill;
pub(crate) mod stdin;
pub(crate) mod supervise;
