pub(crate) mod escalation;
pub(crate) mod output;
pub(crate) mod spill;
pub(crate) mod stdin;
pub(crate) mod supervise;
