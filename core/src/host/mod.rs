pub(crate) mod callbacks;
pub(crate) mod cancel;
pub(crate) mod forked;
pub(crate) mod latch;
pub(crate) mod runtime;
