//! What `dsh-cli` and `dsh` share: Ctrl-C handling, the option value
//! parsers, exit statuses and the JSON shapes of a command's facts.

pub mod interrupt;
pub mod json;
pub mod protocol;
pub mod status;
pub mod values;
