pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod limits;
pub(crate) mod number;
pub(crate) mod request;
pub(crate) mod sandbox;
pub(crate) mod spawn;
pub(crate) mod terminal;
