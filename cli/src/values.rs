//! Value parsers shared by `dsh-cli` and `dsh`: each names the option in
//! its message, because the caller is often a script or a model that must
//! fix the call without reading the help.

use clap::builder::{OsStringValueParser, TypedValueParser};
use dsh_core::SandboxMode;

/// An option's value as text: not UTF-8 is an error naming the option.
pub fn text(option: &'static str) -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(move |v| {
        v.into_string()
            .map_err(|v| format!("option '{option}' expects UTF-8 text, got {v:?}"))
    })
}

pub fn millis(option: &'static str) -> impl TypedValueParser<Value = u64> {
    text(option).try_map(move |v| {
        v.parse()
            .map_err(|_| format!("option '{option}' expects a whole number of milliseconds, got '{v}'"))
    })
}

/// `NAME=VALUE`, split at the first `=` (the value may hold more).
pub fn env_var() -> impl TypedValueParser<Value = (String, String)> {
    text("--env").try_map(|v| match v.split_once('=') {
        Some((k, val)) if !k.is_empty() => Ok((k.to_owned(), val.to_owned())),
        _ => Err(format!("option '--env' expects NAME=VALUE, got '{v}'")),
    })
}

pub fn sandbox_mode() -> impl TypedValueParser<Value = SandboxMode> {
    text("--sandbox").try_map(|v| {
        v.parse::<SandboxMode>().map_err(|()| {
            format!(
                "option '--sandbox': unknown mode '{v}' (expected read-only, workspace-write or danger-full-access)"
            )
        })
    })
}
