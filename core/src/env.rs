//! §4: the environment a command gets.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use crate::request::Spec;

/// The managed variable that tags every process of a command so a kill can
/// find descendants that left the process group (see `tree.rs`).
pub(crate) const EXEC_TAG_VAR: &str = "DSH_EXEC_TAG";

const FORCED: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// True for an inherited name that must not reach a command: anything that
/// looks like a credential, and every ambient managed `DSH_*` name.
pub fn is_scrubbed(name: &[u8]) -> bool {
    let upper = name.to_ascii_uppercase();
    let contains = |needle: &[u8]| upper.windows(needle.len()).any(|w| w == needle);
    upper.starts_with(b"DSH_")
        || contains(b"KEY")
        || contains(b"PASSWORD")
        || contains(b"SECRET")
        || contains(b"TOKEN")
}

/// The host's environment as it was when a command was asked for, already
/// scrubbed. Taken on the calling thread, inside the call: a host mutates
/// its environment from its own threads (Python's `os.environ` under the
/// GIL, Node's `process.env` on the JS thread), never concurrently with its
/// own call into dsh, whereas reading it later from a core thread would race
/// with the host's `setenv` (which reallocates `environ` under our feet).
pub(crate) struct HostEnv(BTreeMap<Vec<u8>, Vec<u8>>);

impl HostEnv {
    pub(crate) fn capture() -> Self {
        HostEnv(
            std::env::vars_os()
                .filter(|(k, _)| !is_scrubbed(k.as_bytes()))
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        )
    }
}

/// Builds `envp` for a command: scrubbed host env, forced terminal
/// settings, the caller's `env`, the caller's `dsh_env`, and last the
/// executor's own tag (later wins).
pub(crate) fn child_environment(host: HostEnv, spec: &Spec, tag: &str) -> Vec<CString> {
    let mut vars = host.0;
    let layers = FORCED
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .chain(
            spec.env
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        )
        .chain(
            spec.dsh_env
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        )
        .chain(std::iter::once((EXEC_TAG_VAR.as_bytes(), tag.as_bytes())));
    for (k, v) in layers {
        vars.insert(k.to_vec(), v.to_vec());
    }
    vars.into_iter()
        .filter_map(|(mut k, v)| {
            k.push(b'=');
            k.extend_from_slice(&v);
            // Parent entries cannot hold NUL; spec entries were checked by
            // resolve/check. Dropping rather than panicking keeps this total.
            CString::new(k).ok()
        })
        .collect()
}

/// The PATH a command will see, for finding its shell the way `execvp` in
/// the child would.
pub(crate) fn path_of(envp: &[CString]) -> Option<&[u8]> {
    envp.iter().find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
}
